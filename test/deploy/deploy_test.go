// Package deploy checks the Kubernetes manifests that ship in deploy/k8s
// against a real kube-apiserver: every object decodes strictly and passes
// the server's validation (a server-side dry run), and the settings the
// Deployment passes are ones edihub knows.
package deploy

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/edihub/edihub/test/controlplane"
)

const base = "../../deploy/k8s"

// kustomization is the part of kustomization.yaml this test reads.
type kustomization struct {
	Resources []string `json:"resources"`
}

func resources(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(base, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if len(k.Resources) == 0 {
		t.Fatal("kustomization.yaml lists no resources")
	}
	return k.Resources
}

func TestManifestsPassServerValidation(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx := context.Background()
	cfg := cp.AdminConfig()
	cs := kubernetes.NewForConfigOrDie(cfg)
	ns := "deploy-check"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(cfg)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(cfg)))

	kinds := map[string]int{}
	files := resources(t)
	examples, err := filepath.Glob(filepath.Join(base, "examples", "*.yaml"))
	if err != nil || len(examples) == 0 {
		t.Fatalf("no examples in deploy/k8s/examples (%v)", err)
	}
	for _, e := range examples {
		files = append(files, filepath.Join("examples", filepath.Base(e)))
	}
	for _, file := range files {
		objs, err := controlplane.DecodeManifest(filepath.Join(base, file))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, obj := range objs {
			gvk := obj.GetObjectKind().GroupVersionKind()
			kinds[gvk.Kind]++
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
			if err != nil {
				t.Fatal(err)
			}
			u := &unstructured.Unstructured{Object: m}
			mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatalf("%s %s: %v", file, gvk, err)
			}
			_, err = dyn.Resource(mapping.Resource).Namespace(ns).Create(ctx, u, metav1.CreateOptions{
				DryRun:          []string{metav1.DryRunAll},
				FieldValidation: metav1.FieldValidationStrict,
			})
			if err != nil {
				t.Errorf("%s: %s %s rejected by the API server: %v", file, gvk.Kind, u.GetName(), err)
			}
		}
	}
	for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget", "ServiceAccount", "Role", "RoleBinding", "NetworkPolicy", "Job", "Ingress"} {
		if kinds[kind] == 0 {
			t.Errorf("deploy/k8s ships no %s", kind)
		}
	}
}

// TestDeploymentSettingsExist keeps the Deployment's EDIHUB_* variables in
// step with the flags: docs/settings.md is generated from the flag
// definitions (and checked by a test in cmd/edihub).
func TestDeploymentSettingsExist(t *testing.T) {
	readme, err := os.ReadFile("../../docs/settings.md")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := controlplane.DecodeManifest(filepath.Join(base, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var dep *appsv1.Deployment
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			dep = d
		}
	}
	if dep == nil {
		t.Fatal("deployment.yaml has no Deployment")
	}
	if got := *dep.Spec.Replicas; got != 3 {
		t.Errorf("replicas = %d, want 3", got)
	}
	known := regexp.MustCompile("`(EDIHUB_[A-Z_]+)`").FindAllStringSubmatch(string(readme), -1)
	set := map[string]bool{}
	for _, m := range known {
		set[m[1]] = true
	}
	c := dep.Spec.Template.Spec.Containers[0]
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "EDIHUB_") && !set[e.Name] {
			t.Errorf("deployment.yaml sets %s, which no edihub flag reads", e.Name)
		}
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Fatal("probe missing")
		}
	}
	if got := c.ReadinessProbe.HTTPGet.Path; got != "/readyz" {
		t.Errorf("readiness probe path = %s, want /readyz (never leadership-dependent)", got)
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "edihub" {
		t.Errorf("serviceAccountName = %q, want edihub (bound to the leader-election Role)", dep.Spec.Template.Spec.ServiceAccountName)
	}
}
