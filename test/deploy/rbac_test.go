package deploy

import (
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/edihub/edihub/test/controlplane"
)

// defaultLeaseName is the default of EDIHUB_LEASE_NAME (cmd/edihub).
const defaultLeaseName = "edihub-leader"

// TestRoleGrantsOnlyTheLease keeps the Role on the one Lease the Deployment
// campaigns for: get, update and watch by name, create (which RBAC cannot
// restrict by name), and nothing else. The kube-apiserver tests
// (test/controlplane, internal/leader) prove these rights are enough and
// that they forbid the rest.
func TestRoleGrantsOnlyTheLease(t *testing.T) {
	objs, err := controlplane.DecodeManifest(filepath.Join(base, "rbac.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lease := defaultLeaseName
	dobjs, err := controlplane.DecodeManifest(filepath.Join(base, "deployment.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range dobjs {
		if d, ok := o.(*appsv1.Deployment); ok {
			for _, e := range d.Spec.Template.Spec.Containers[0].Env {
				if e.Name == "EDIHUB_LEASE_NAME" {
					lease = e.Value
				}
			}
		}
	}
	var rules []rbacv1.PolicyRule
	for _, o := range objs {
		if r, ok := o.(*rbacv1.Role); ok {
			rules = append(rules, r.Rules...)
		}
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, ResourceNames: []string{lease}, Verbs: []string{"get", "update", "watch"}},
		{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"create"}},
	}
	if !slices.EqualFunc(rules, want, func(a, b rbacv1.PolicyRule) bool {
		return slices.Equal(a.APIGroups, b.APIGroups) && slices.Equal(a.Resources, b.Resources) &&
			slices.Equal(a.ResourceNames, b.ResourceNames) && slices.Equal(a.Verbs, b.Verbs) &&
			len(a.NonResourceURLs) == 0
	}) {
		t.Errorf("rbac.yaml Role rules = %+v, want %+v", rules, want)
	}
}
