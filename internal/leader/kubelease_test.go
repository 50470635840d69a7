package leader

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/hub"
)

// enforceResourceVersions makes the fake clientset's Leases behave like the
// API server on writes: every create and update gets the next
// resourceVersion from one counter (like etcd's revision), and an update
// whose resourceVersion is not the stored one fails with Conflict. The
// stock fake is last-writer-wins and would hide lost races. restore on the
// returned fakeEtcd puts etcd back in time.
func enforceResourceVersions(cs *fake.Clientset) *fakeEtcd {
	fe := &fakeEtcd{rev: 100, tracker: cs.Tracker(), format: func(rev int64) string { return strconv.FormatInt(rev, 10) }}
	mu, tracker := &fe.mu, fe.tracker
	rev := &fe.rev
	gvr := leasesGVR
	cs.PrependReactor("create", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		obj := a.(k8stesting.CreateAction).GetObject().(*coordinationv1.Lease).DeepCopy()
		*rev++
		obj.ResourceVersion = fe.format(*rev)
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
		*rev++
		obj.ResourceVersion = fe.format(*rev)
		if err := tracker.Update(gvr, obj, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
	return fe
}

var leasesGVR = coordinationv1.SchemeGroupVersion.WithResource("leases")

// fakeEtcd is the revision counter behind enforceResourceVersions.
type fakeEtcd struct {
	mu      sync.Mutex
	rev     int64
	tracker k8stesting.ObjectTracker
	// format makes a resourceVersion of a revision; set it before use.
	format func(rev int64) string
}

// restore puts etcd back to a snapshot taken at revision rev, in which the
// Lease was snap (its resourceVersion is set to rev).
func (fe *fakeEtcd) restore(t *testing.T, ns string, snap *coordinationv1.Lease, rev int64) {
	t.Helper()
	fe.mu.Lock()
	defer fe.mu.Unlock()
	fe.rev = rev
	snap = snap.DeepCopy()
	snap.ResourceVersion = strconv.FormatInt(rev, 10)
	if err := fe.tracker.Update(leasesGVR, snap, ns); err != nil {
		t.Fatal(err)
	}
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
	opened []hub.Fence
}

func (m *memTerms) OpenTerm(_ context.Context, f hub.Fence, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f.Token <= m.token {
		return hub.ErrStaleFence
	}
	m.token = f.Token
	m.opened = append(m.opened, f)
	return nil
}

func (m *memTerms) CheckTerm(_ context.Context, f hub.Fence) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if f.Token != m.token {
		return hub.ErrStaleFence
	}
	return nil
}

func (m *memTerms) CurrentTerm(context.Context, string) (hub.Term, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return hub.Term{Token: m.token}, nil
}

func (m *memTerms) Ping(context.Context) error { return nil }

// signalOnLog returns a logger option and a channel it closes when the
// first entry whose message contains snippet has been written to the
// logger's core: a readiness signal for what a component only logs.
func signalOnLog(snippet string) (zap.Option, <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return zap.Hooks(func(e zapcore.Entry) error {
		if strings.Contains(e.Message, snippet) {
			once.Do(func() { close(ch) })
		}
		return nil
	}), ch
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
// The electors and the fake clientset run on synctest's clock.
func TestKubernetesElectorsOnFakeClientset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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

		// The electors signal no change of Status: poll it, bounded; the
		// sleeps advance synctest's clock.
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
		time.Sleep(300 * time.Millisecond) // virtual: three retry periods in which no second leader may appear
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
	})
}

// countGets counts the clientset's Lease reads.
func countGets(cs *fake.Clientset) *atomic.Int64 {
	var n atomic.Int64
	cs.PrependReactor("get", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		n.Add(1)
		return false, nil, nil
	})
	return &n
}

// TestResourceVersionGoingBackwards: etcd is restored from a snapshot
// under a running leader, so the Lease's resourceVersion falls below the
// one seen and below the fence. A quorum read's lower version is taken as
// the truth and logged as an error with the remedy; the replica takes the
// restored Lease when it expires, its terms are refused by the fence with
// a backoff between tries (no tight loop), and the first term whose token
// passes the fence opens: election resumes.
func TestResourceVersionGoingBackwards(t *testing.T) {
	cs := fake.NewClientset()
	fe := enforceResourceVersions(cs)
	gets := countGets(cs)
	terms := &memTerms{}
	core, logs := observer.New(zapcore.InfoLevel)
	started := make(chan int64, 16)
	e, err := NewKubernetes(KubernetesOptions{Leases: cs.CoordinationV1(), Namespace: "ns"}, Options{
		LeaseName: "edihub-leader", Identity: "r0",
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
		WorkerStopTimeout: 500 * time.Millisecond,
		Workers: map[string]Worker{"w": WorkerFunc(func(ctx context.Context) error {
			f, _ := FenceFrom(ctx)
			started <- f.Token
			<-ctx.Done()
			return nil
		})},
		Terms: terms, Logger: zap.New(core), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}()
	wait := func(what string) int64 {
		t.Helper()
		select {
		case tok := <-started:
			return tok
		case <-time.After(20 * time.Second):
			t.Fatalf("no term opened %s; logged %v", what, logs.All())
			return 0
		}
	}
	first := wait("at first")

	// The snapshot: taken when another replica held the Lease, 3 revisions
	// below our term's token, 4 below the fence.
	long := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	gone, one, zero := "replica-before-the-restore", int32(1), int32(0)
	fe.restore(t, "ns", &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "edihub-leader", Namespace: "ns"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &gone, LeaseDurationSeconds: &one, AcquireTime: &long, RenewTime: &long, LeaseTransitions: &zero},
	}, first-3)
	getsAtRestore := gets.Load()
	second := wait("after the restore")
	if second <= first {
		t.Errorf("term after the restore has token %d, want above the fence %d", second, first)
	}
	regress := logs.FilterMessageSnippet("resourceVersion went backwards").All()
	if len(regress) == 0 || regress[0].Level != zapcore.ErrorLevel || !strings.Contains(regress[0].ContextMap()["remedy"].(string), "--bump-revision") {
		t.Errorf("regression logged as %v, want an error with the remedy", regress)
	}
	refused := logs.FilterMessageSnippet("stepped down").All()
	if len(refused) == 0 {
		t.Errorf("no term was refused between the restore and token %d: the fence was not exercised", second)
	}
	// Without backoff the replica would have read the Lease thousands of
	// times: each refused term costs a pause (100, 200, 400 ms...), and a
	// handful of reads.
	if n := gets.Load() - getsAtRestore; n > 100 {
		t.Errorf("%d Lease reads between the restore and the next term, want a handful per refused term (%d refused)", n, len(refused))
	}
	t.Logf("restore → term %d: %d refused terms, %d Lease reads", second, len(refused), gets.Load()-getsAtRestore)
}

// TestUnusableResourceVersionReleasesAndFails: an API server whose
// resourceVersions cannot be fencing tokens makes the replica release the
// Lease at once and Run fail with ErrUnusableToken, instead of holding the
// Lease without ever opening a term.
func TestUnusableResourceVersionReleasesAndFails(t *testing.T) {
	tests := []struct {
		name   string
		format func(int64) string
	}{
		{"not an integer", func(rev int64) string { return fmt.Sprintf("kine-%d", rev) }},
		{"beyond 63 bits", func(rev int64) string { return fmt.Sprintf("%d0000000000000000000", rev) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := fake.NewClientset()
			fe := enforceResourceVersions(cs)
			fe.format = tt.format
			terms := &memTerms{}
			e, err := NewKubernetes(KubernetesOptions{Leases: cs.CoordinationV1(), Namespace: "ns"}, Options{
				LeaseName: "edihub-leader", Identity: "r0",
				LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
				WorkerStopTimeout: 500 * time.Millisecond,
				Terms:             terms, Logger: zaptest.NewLogger(t), Registerer: prometheus.NewRegistry(),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				cancel()
				<-done
				t.Fatal("Run still campaigning 10s after a write returned an unusable resourceVersion")
			}
			if !errors.Is(err, ErrUnusableToken) || !strings.Contains(err.Error(), tt.format(101)) || !strings.Contains(err.Error(), "released") {
				t.Errorf("Run = %v, want ErrUnusableToken naming resourceVersion %q and the release", err, tt.format(101))
			}
			lease, gerr := cs.CoordinationV1().Leases("ns").Get(context.Background(), "edihub-leader", metav1.GetOptions{})
			if gerr != nil {
				t.Fatal(gerr)
			}
			if h := holderOf(lease); h != "" {
				t.Errorf("Lease holder after the failure = %q, want released", h)
			}
			if len(terms.opened) != 0 {
				t.Errorf("terms opened: %v", terms.opened)
			}
		})
	}
}

// TestServerVersionIsChecked: at start the elector asks the API server's
// version and warns below Kubernetes 1.35, where resourceVersions are not
// guaranteed comparable.
func TestServerVersionIsChecked(t *testing.T) {
	tests := []struct {
		git  string
		warn bool
	}{
		{"v1.37.2", false},
		{"v1.35.0", false},
		{"v1.34.3", true},
		{"v1.30.0+k3s1", true},
		{"not-kubernetes", true},
	}
	for _, tt := range tests {
		t.Run(tt.git, func(t *testing.T) {
			cs := fake.NewClientset()
			enforceResourceVersions(cs)
			cs.Discovery().(*fakediscovery.FakeDiscovery).FakedServerVersion = &version.Info{GitVersion: tt.git}
			core, logs := observer.New(zapcore.InfoLevel)
			hook, campaigning := signalOnLog("campaigning")
			e, err := NewKubernetes(KubernetesOptions{Leases: cs.CoordinationV1(), Namespace: "ns", Version: cs.Discovery()}, Options{
				LeaseName: "edihub-leader", Identity: "r0",
				LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
				WorkerStopTimeout: 500 * time.Millisecond,
				Terms:             &memTerms{}, Logger: zap.New(core, hook), Registerer: prometheus.NewRegistry(),
			})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- e.Run(ctx) }()
			select {
			case <-campaigning: // logged after the version check
			case <-time.After(10 * time.Second):
				t.Fatal("not campaigning")
			}
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			var warned, named bool
			for _, en := range logs.All() {
				if en.ContextMap()["git_version"] == tt.git {
					named = true
					warned = warned || en.Level == zapcore.WarnLevel
				}
			}
			if !named || warned != tt.warn {
				t.Errorf("version %s: logged (named %v, warned %v), want warned %v: %v", tt.git, named, warned, tt.warn, logs.All())
			}
		})
	}
}

// TestObserveOvertakenReplyIsNoRegression: a reply to a Get or a write is
// the truth when it was served, but a watch event of a later write may be
// processed before it. A reply below a version seen only while the request
// was in flight is older, not an etcd restore; one below what was known
// when the request was sent is (logged as an error, taken as the truth).
func TestObserveOvertakenReplyIsNoRegression(t *testing.T) {
	core, logs := observer.New(zap.ErrorLevel)
	l := &kubeLease{log: zap.New(core)}
	at := func(rv string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "edihub-leader", ResourceVersion: rv}}
	}
	l.observe(at("203"), true, "")
	before := l.knownRV()                                       // a Get is sent now...
	l.observe(at("204"), false, "")                             // ...a watch event of the next write arrives...
	if _, older := l.observe(at("203"), true, before); !older { // ...then the Get's reply
		t.Errorf("a reply overtaken by a watch event was taken as new")
	}
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d error lines for an overtaken reply, want none: %v", n, logs.All()[0].Message)
	}
	if got := l.knownRV(); got != "204" {
		t.Errorf("known resourceVersion %s after an overtaken reply, want 204", got)
	}
	// etcd restored: a Get sent after 204 was seen answers 150.
	before = l.knownRV()
	if _, older := l.observe(at("150"), true, before); older {
		t.Errorf("a restored Lease was ignored as older")
	}
	if logs.Len() != 1 || l.knownRV() != "150" {
		t.Errorf("after a regression: %d error lines, known %s; want 1 and 150", logs.Len(), l.knownRV())
	}
}
