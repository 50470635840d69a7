package leader

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/postgres"
)

// enforceResourceVersions makes the fake clientset's Leases behave like the
// API server on writes: every create and update gets the next
// resourceVersion from one counter (like etcd's revision), and an update
// whose resourceVersion is not the stored one fails with Conflict. The
// stock fake is last-writer-wins and would hide lost races.
func enforceResourceVersions(cs *fake.Clientset) {
	var mu sync.Mutex
	var rev int64 = 100
	gvr := coordinationv1.SchemeGroupVersion.WithResource("leases")
	tracker := cs.Tracker()
	cs.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		obj := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		rev++
		obj.ResourceVersion = strconv.FormatInt(rev, 10)
		if err := tracker.Create(gvr, obj, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
	cs.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		obj := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		cur, err := tracker.Get(gvr, a.GetNamespace(), obj.Name)
		if err != nil {
			return true, nil, err
		}
		if got := cur.(*coordinationv1.Lease).ResourceVersion; obj.ResourceVersion != got {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), obj.Name,
				fmt.Errorf("the object has been modified (resourceVersion %s, stored %s)", obj.ResourceVersion, got))
		}
		rev++
		obj.ResourceVersion = strconv.FormatInt(rev, 10)
		if err := tracker.Update(gvr, obj, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
}

func TestReactorEnforcesResourceVersion(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	enforceResourceVersions(cs)
	leases := cs.CoordinationV1().Leases("ns")
	created, err := leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "l"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, b := created.DeepCopy(), created.DeepCopy()
	updated, err := leases.Update(ctx, a, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("first Update = %v", err)
	}
	if c, _ := strconv.Atoi(updated.ResourceVersion); c <= 101 {
		t.Errorf("resourceVersion after update = %s, want > 101", updated.ResourceVersion)
	}
	if _, err := leases.Update(ctx, b, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("Update with a stale resourceVersion = %v, want Conflict", err)
	}
}

func TestTokenOf(t *testing.T) {
	tests := []struct {
		give    string
		want    int64
		wantErr bool
	}{
		{give: "1", want: 1},
		{give: "9223372036854775807", want: 9223372036854775807},
		{give: "9223372036854775808", wantErr: true},
		{give: "0", wantErr: true},
		{give: "007", wantErr: true},
		{give: "", wantErr: true},
		{give: "abc", wantErr: true},
	}
	for _, tt := range tests {
		got, err := tokenOf(tt.give)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("tokenOf(%q) = %d, %v; want %d, error %v", tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}

// memTerms is an in-memory fence for electors sharing it.
type memTerms struct {
	mu     sync.Mutex
	token  int64
	opened []postgres.Fence
}

func (m *memTerms) OpenTerm(_ context.Context, f postgres.Fence, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f.Token <= m.token {
		return postgres.ErrStaleFence
	}
	m.token = f.Token
	m.opened = append(m.opened, f)
	return nil
}

// leading returns the identities whose status says they lead.
func leading(es []*Elector) []string {
	var out []string
	for _, e := range es {
		if st := e.Status(); st.IsLeader {
			out = append(out, st.Identity)
		}
	}
	return out
}

// TestKubernetesElectorsOnFakeClientset: three electors elect one leader;
// when it shuts down it releases the Lease and a follower takes it. The
// lease duration is long enough that it cannot expire while the test
// waits (each wait gives up at half of it): a successor proves that the
// release was taken, without timing the handoff, which is only logged.
func TestKubernetesElectorsOnFakeClientset(t *testing.T) {
	const leaseDuration = time.Minute
	cs := fake.NewClientset()
	enforceResourceVersions(cs)
	terms := &memTerms{}
	var es []*Elector
	var cancels []context.CancelFunc
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for i := range 3 {
		e, err := NewKubernetes(KubernetesOptions{Leases: cs.CoordinationV1(), Namespace: "ns"}, Options{
			LeaseName: "edihub-leader", Identity: fmt.Sprintf("r%d", i),
			LeaseDuration: leaseDuration, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
			WorkerStopTimeout: 800 * time.Millisecond,
			Terms:             terms, Logger: zaptest.NewLogger(t), Registerer: prometheus.NewRegistry(),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		es, cancels = append(es, e), append(cancels, cancel)
		wg.Add(1)
		go func() { defer wg.Done(); errs <- e.Run(ctx) }()
	}
	defer func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("Run = %v", err)
			}
		}
	}()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(leaseDuration / 2); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("no %s after %v, half the lease duration", what, leaseDuration/2)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("a leader", func() bool { return len(leading(es)) == 1 })
	time.Sleep(300 * time.Millisecond)
	if l := leading(es); len(l) != 1 {
		t.Fatalf("leaders = %v, want exactly one", l)
	}
	first := leading(es)[0]
	var idx int
	fmt.Sscanf(first, "r%d", &idx)
	firstToken := es[idx].Status().FencingToken

	// The leader shuts down: it releases, and a follower takes over
	// before the lease could expire (without the release a follower would
	// wait out the lease, longer than waitFor waits).
	began := time.Now()
	cancels[idx]()
	waitFor("successor (the release was not taken: a follower would wait out the lease)", func() bool { l := leading(es); return len(l) == 1 && l[0] != first })
	t.Logf("handoff took %s (retry period 100ms)", time.Since(began))
	next := leading(es)[0]
	fmt.Sscanf(next, "r%d", &idx)
	if tok := es[idx].Status().FencingToken; tok <= firstToken {
		t.Errorf("successor token %d, want > %d", tok, firstToken)
	}
	lease, err := cs.CoordinationV1().Leases("ns").Get(context.Background(), "edihub-leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := holderOf(lease); h != next || *lease.Spec.LeaseTransitions < 1 {
		t.Errorf("Lease holder %q, transitions %d; want %q, >= 1", h, *lease.Spec.LeaseTransitions, next)
	}
	terms.mu.Lock()
	defer terms.mu.Unlock()
	for i := 1; i < len(terms.opened); i++ {
		if terms.opened[i].Token <= terms.opened[i-1].Token {
			t.Errorf("terms opened out of order: %v", terms.opened)
		}
	}
}
