package controlplane

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/tools/clientcmd"
)

func TestStartMissingBinaries(t *testing.T) {
	_, err := Start(t.Context(), t.TempDir(), Options{BinDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "scripts/controlplane-build.sh") {
		t.Fatalf("Start with an empty BinDir = %v, want an error naming scripts/controlplane-build.sh", err)
	}
}

func TestStartRetriesTakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := ln.Addr().(*net.TCPAddr).Port
	// Offer the held port for the API server once, as if another process
	// had bound it after it was chosen.
	offered := false
	pickPorts = func(n int) ([]int, error) {
		if n == 1 && !offered {
			offered = true
			return []int{taken}, nil
		}
		return freePorts(n)
	}
	t.Cleanup(func() { pickPorts = freePorts })

	cp := StartForTest(t, Options{})
	if !offered {
		t.Fatal("the taken port was never offered")
	}
	if cp.URL == "https://127.0.0.1:"+strconv.Itoa(taken) {
		t.Errorf("URL = %s, the port held by the test", cp.URL)
	}
}

func TestControlPlane(t *testing.T) {
	// HTTP keep-alive connections of client-go's shared transports and
	// klog's flush daemon outlive the test by design; anything else is ours.
	defer goleak.VerifyNone(t,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
	)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	began := time.Now()
	cp, err := Start(ctx, t.TempDir(), Options{Logf: t.Logf})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("control plane ready in %v", time.Since(began).Round(time.Millisecond))
	closed := false
	defer func() {
		if !closed {
			cp.Close()
		}
	}()

	// The edihub client is built from the kubeconfig file, as edihub builds
	// its own from KUBECONFIG.
	edihubCfg, err := clientcmd.BuildConfigFromFlags("", cp.EdihubKubeconfig)
	if err != nil {
		t.Fatalf("load %s: %v", cp.EdihubKubeconfig, err)
	}
	edihub := kubernetes.NewForConfigOrDie(edihubCfg)
	admin := kubernetes.NewForConfigOrDie(cp.AdminConfig())
	ns := cp.Namespace
	leases := edihub.CoordinationV1().Leases(ns)

	// What the leader election needs succeeds.
	holder := "replica-a"
	lease, err := leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "edihub-leader"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("edihub: create lease: %v", err)
	}
	if lease, err = leases.Get(ctx, "edihub-leader", metav1.GetOptions{}); err != nil {
		t.Fatalf("edihub: get lease: %v", err)
	}
	holder = "replica-b"
	lease.Spec.HolderIdentity = &holder
	if lease, err = leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("edihub: update lease: %v", err)
	}
	w, err := leases.Watch(ctx, metav1.ListOptions{ResourceVersion: lease.ResourceVersion, FieldSelector: "metadata.name=edihub-leader"})
	if err != nil {
		t.Fatalf("edihub: watch leases: %v", err)
	}
	w.Stop()

	// Another controller's Lease in the same namespace is out of reach,
	// however edihub asks for it.
	other := "other-controller"
	if _, err := admin.CoordinationV1().Leases(ns).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: other},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &other},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin: create lease %s: %v", other, err)
	}
	otherLease, err := admin.CoordinationV1().Leases(ns).Get(ctx, other, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("admin: get lease %s: %v", other, err)
	}

	// Everything else is forbidden.
	forbidden := []struct {
		name string
		do   func(context.Context) error
	}{
		{"list secrets", func(ctx context.Context) error {
			_, err := edihub.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"delete lease", func(ctx context.Context) error {
			return leases.Delete(ctx, "edihub-leader", metav1.DeleteOptions{})
		}},
		{"get another lease", func(ctx context.Context) error {
			_, err := leases.Get(ctx, other, metav1.GetOptions{})
			return err
		}},
		{"update another lease", func(ctx context.Context) error {
			l := otherLease.DeepCopy()
			l.Spec.HolderIdentity = &holder
			_, err := leases.Update(ctx, l, metav1.UpdateOptions{})
			return err
		}},
		{"watch another lease", func(ctx context.Context) error {
			w, err := leases.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + other})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"watch every lease", func(ctx context.Context) error {
			w, err := leases.Watch(ctx, metav1.ListOptions{})
			if err == nil {
				w.Stop()
			}
			return err
		}},
		{"patch lease", func(ctx context.Context) error {
			_, err := leases.Patch(ctx, "edihub-leader", types.MergePatchType, []byte(`{"spec":{"holderIdentity":"x"}}`), metav1.PatchOptions{})
			return err
		}},
		{"create lease in default", func(ctx context.Context) error {
			_, err := edihub.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: "edihub-leader"},
			}, metav1.CreateOptions{})
			return err
		}},
		{"list leases in all namespaces", func(ctx context.Context) error {
			_, err := edihub.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"list leases", func(ctx context.Context) error {
			_, err := leases.List(ctx, metav1.ListOptions{})
			return err
		}},
		{"create event", func(ctx context.Context) error {
			_, err := edihub.CoreV1().Events(ns).Create(ctx, &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: "edihub-leader.test"},
				InvolvedObject: corev1.ObjectReference{Kind: "Lease", Namespace: ns, Name: "edihub-leader"},
				Reason:         "LeaderElection",
				Type:           corev1.EventTypeNormal,
			}, metav1.CreateOptions{})
			return err
		}},
		{"get configmap", func(ctx context.Context) error {
			_, err := edihub.CoreV1().ConfigMaps(ns).Get(ctx, "any", metav1.GetOptions{})
			return err
		}},
	}
	for _, tt := range forbidden {
		if err := tt.do(ctx); !apierrors.IsForbidden(err) {
			t.Errorf("edihub: %s: error = %v, want Forbidden", tt.name, err)
		}
	}

	// The RoleBinding as shipped grants the same to the edihub
	// ServiceAccount, which the tests do not authenticate as.
	sa := "system:serviceaccount:" + ns + ":edihub"
	access := []struct {
		verb, group, resource, name string
		want                        bool
	}{
		{"get", "coordination.k8s.io", "leases", "edihub-leader", true},
		{"update", "coordination.k8s.io", "leases", "edihub-leader", true},
		{"watch", "coordination.k8s.io", "leases", "edihub-leader", true},
		{"create", "coordination.k8s.io", "leases", "", true},
		{"get", "coordination.k8s.io", "leases", other, false},
		{"update", "coordination.k8s.io", "leases", other, false},
		{"watch", "coordination.k8s.io", "leases", other, false},
		{"update", "coordination.k8s.io", "leases", "", false},
		{"watch", "coordination.k8s.io", "leases", "", false},
		{"patch", "coordination.k8s.io", "leases", "edihub-leader", false},
		{"delete", "coordination.k8s.io", "leases", "edihub-leader", false},
		{"list", "coordination.k8s.io", "leases", "", false},
		{"create", "", "events", "", false},
		{"list", "", "secrets", "", false},
	}
	for _, tt := range access {
		review, err := admin.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   sa,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: ns, Verb: tt.verb, Group: tt.group, Resource: tt.resource, Name: tt.name,
				},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SubjectAccessReview: %v", err)
		}
		if got := review.Status.Allowed; got != tt.want {
			t.Errorf("may %s %s %s/%s %q = %v, want %v", sa, tt.verb, tt.group, tt.resource, tt.name, got, tt.want)
		}
	}

	// The API server goes away and comes back on the same URL; etcd keeps
	// the Lease.
	if err := cp.StopAPIServer(); err != nil {
		t.Fatalf("StopAPIServer: %v", err)
	}
	if _, err := leases.Get(ctx, "edihub-leader", metav1.GetOptions{}); err == nil {
		t.Fatalf("get lease with the API server stopped: got no error")
	}
	began = time.Now()
	if err := cp.StartAPIServer(ctx); err != nil {
		t.Fatalf("StartAPIServer: %v", err)
	}
	t.Logf("API server restarted in %v", time.Since(began).Round(time.Millisecond))
	got, err := leases.Get(ctx, "edihub-leader", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("edihub: get lease after restart: %v", err)
	}
	if got.ResourceVersion != lease.ResourceVersion || *got.Spec.HolderIdentity != holder {
		t.Errorf("lease after restart = rv %s holder %s, want rv %s holder %s",
			got.ResourceVersion, *got.Spec.HolderIdentity, lease.ResourceVersion, holder)
	}

	// Close leaves no process behind.
	pids := cp.PIDs()
	if len(pids) != 2 {
		t.Fatalf("PIDs() = %v, want etcd and kube-apiserver", pids)
	}
	if err := cp.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	closed = true
	for _, pid := range pids {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("process %d still exists after Close (stat: %v)", pid, err)
		}
	}
	if children := childProcesses(t); len(children) > 0 {
		t.Errorf("child processes after Close: %v", children)
	}
	if err := cp.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// childProcesses returns the pids of this process's children, from /proc.
func childProcesses(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	self := os.Getpid()
	var children []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...; comm may contain spaces and parentheses.
		fields := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(self) {
			children = append(children, pid)
		}
	}
	return children
}

// TestStartKeepData: a second Start on the same directory with KeepData
// finds the Lease the first one's client wrote, the RBAC still lets edihub
// at it, and the next write's resourceVersion is above every one before the
// restart; without KeepData the second Start begins with an empty etcd.
func TestStartKeepData(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	start := func(keep bool) *ControlPlane {
		t.Helper()
		cp, err := Start(ctx, dir, Options{Logf: t.Logf, KeepData: keep})
		if err != nil {
			t.Fatalf("Start(KeepData: %v): %v", keep, err)
		}
		return cp
	}
	leasesOf := func(cp *ControlPlane) coordinationclient.LeaseInterface {
		return kubernetes.NewForConfigOrDie(cp.EdihubConfig()).CoordinationV1().Leases(cp.Namespace)
	}

	cp := start(true)
	holder := "replica-gone"
	lease, err := leasesOf(cp).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "edihub-leader"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create lease: %v", err)
	}
	if err := cp.Close(); err != nil {
		t.Fatal(err)
	}

	cp = start(true)
	got, err := leasesOf(cp).Get(ctx, "edihub-leader", metav1.GetOptions{})
	if err != nil {
		cp.Close()
		t.Fatalf("after a restart with KeepData: get lease: %v", err)
	}
	if got.Spec.HolderIdentity == nil || *got.Spec.HolderIdentity != holder || got.ResourceVersion != lease.ResourceVersion {
		t.Errorf("after a restart with KeepData: lease holder %v, resourceVersion %s, want %q, %s", got.Spec.HolderIdentity, got.ResourceVersion, holder, lease.ResourceVersion)
	}
	next := "replica-next"
	got.Spec.HolderIdentity = &next
	updated, err := leasesOf(cp).Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		cp.Close()
		t.Fatalf("after a restart with KeepData: update lease: %v", err)
	}
	before, _ := strconv.ParseInt(lease.ResourceVersion, 10, 64)
	after, _ := strconv.ParseInt(updated.ResourceVersion, 10, 64)
	if after <= before {
		t.Errorf("after a restart with KeepData: resourceVersion %d, want above %d (before the restart)", after, before)
	}
	if err := cp.Close(); err != nil {
		t.Fatal(err)
	}

	cp = start(false)
	defer cp.Close()
	if _, err := leasesOf(cp).Get(ctx, "edihub-leader", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("after a restart without KeepData: get lease = %v, want not found", err)
	}
}
