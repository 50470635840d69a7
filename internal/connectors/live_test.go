package connectors_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/connectors"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// never is a resync that does not happen during a test.
const never = time.Hour

// served is how long a change may take to be served (the contract).
const served = 2 * time.Second

// deaf is a LiveStore whose notifications are lost: it listens without
// ever waking, so that only the resync brings a change.
type deaf struct{ *postgres.Store }

func (deaf) ListenConnectors(ctx context.Context, _ func()) error {
	<-ctx.Done()
	return nil
}

func newLive(t *testing.T, st connectors.LiveStore, identity string, resync time.Duration) (*connectors.Live, *prometheus.Registry) {
	t.Helper()
	secrets, folders := dirs(t)
	reg := prometheus.NewRegistry()
	l, err := connectors.NewLive(context.Background(), connectors.LiveOptions{Store: st, SecretsDir: secrets, FoldersDir: folders,
		Logger: zaptest.NewLogger(t), Registerer: reg, Identity: identity, Resync: resync})
	if err != nil {
		t.Fatalf("NewLive: %v", err)
	}
	return l, reg
}

// run runs l until the test ends, then stops it and waits for it.
func run(t *testing.T, l *connectors.Live) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Live.Run after cancel = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Live.Run did not return within 10s of its context ending")
		}
	})
}

// waitRevision polls l until it serves rev, for at most within.
func waitRevision(t *testing.T, l *connectors.Live, rev int64, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for l.Current().Revision != rev {
		if time.Since(start) > within {
			t.Fatalf("Live serves revision %d after %v, want %d within %v", l.Current().Revision, time.Since(start), rev, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// TestLiveNotify: a change applied through one store is served by a
// replica on another connection within 2 s, by notification alone (its
// resync never comes), whole: the snapshot taken before is unchanged.
func TestLiveNotify(t *testing.T) {
	url := pgtest.URL(t)
	open := func() *postgres.Store {
		st, err := postgres.Open(context.Background(), url, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.Close)
		return st
	}
	writer, reader := open(), open()
	svc := newService(t, writer)
	apply(t, svc, docV1, 0)

	l, reg := newLive(t, reader, "replica-b", never)
	before := l.Current()
	if before.Revision != 1 || len(before.Connectors.Destinations) != 1 {
		t.Fatalf("first snapshot = revision %d, %+v; want revision 1 with one destination", before.Revision, before.Connectors)
	}
	run(t, l)
	// Run listens before it applies anything; a change made before the
	// listener is up is read on its first wake, so no barrier is needed.
	apply(t, svc, docV2, 1)
	took := waitRevision(t, l, 2, served)
	t.Logf("revision 2 served %v after it was applied", took.Round(time.Millisecond))
	if got := l.Current(); len(got.Connectors.Destinations) != 2 || got.Connectors.Routes[0].Name != "acme" {
		t.Errorf("snapshot 2 = %+v, want v2", got.Connectors)
	}
	if len(before.Connectors.Destinations) != 1 || before.Revision != 1 {
		t.Errorf("the snapshot taken before changed: %+v", before)
	}
	if v := testutil.ToFloat64(gaugeOf(t, reg, "edihub_connectors_revision")); v != 2 {
		t.Errorf("edihub_connectors_revision = %v, want 2", v)
	}
	// The replica recorded what it serves.
	deadline := time.Now().Add(served)
	for {
		rr, err := writer.ServedConnectors(context.Background(), time.Minute)
		if err == nil && len(rr) == 1 && rr[0].Identity == "replica-b" && rr[0].Revision == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ServedConnectors = %+v, %v, want replica-b at revision 2", rr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLiveResync: with notifications lost, the resync brings the change.
func TestLiveResync(t *testing.T) {
	st := pgtest.Store(t)
	svc := newService(t, st)
	l, _ := newLive(t, deaf{st}, "replica-c", 200*time.Millisecond)
	if l.Current().Revision != 0 || len(l.Current().Connectors.Routes) != 0 {
		t.Fatalf("first snapshot of an empty database = %+v, want revision 0, empty", l.Current())
	}
	run(t, l)
	apply(t, svc, docV1, 0)
	waitRevision(t, l, 1, served)
}

// TestLiveKeepsRevisionThatParses: a stored revision that does not parse
// here leaves the one before in service and sets the load error gauge;
// the next good one clears it.
func TestLiveKeepsRevisionThatParses(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	svc := newService(t, st)
	apply(t, svc, docV1, 0)
	l, reg := newLive(t, st, "replica-d", never)
	// Written past the Service, as a newer edihub with a key this one
	// does not know would.
	if _, err := st.ChangeConnectors(ctx, postgres.ConnectorsChange{Document: docV1 + "notifications: []\n", Expect: 1,
		Audit: postgres.AuditEntry{Actor: "user:alice", Action: "connectors.apply", Target: "connectors"}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := l.Current().Revision; got != 1 {
		t.Errorf("serving revision %d after a revision that does not parse, want 1", got)
	}
	if v := testutil.ToFloat64(gaugeOf(t, reg, "edihub_connectors_load_errors")); v != 1 {
		t.Errorf("edihub_connectors_load_errors = %v, want 1", v)
	}
	apply(t, svc, docV2, 2)
	if err := l.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := l.Current().Revision; got != 3 {
		t.Errorf("serving revision %d, want 3", got)
	}
	if v := testutil.ToFloat64(gaugeOf(t, reg, "edihub_connectors_load_errors")); v != 0 {
		t.Errorf("edihub_connectors_load_errors = %v, want 0", v)
	}
}

// gaugeOf finds the registered collector called name.
func gaugeOf(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: "copy"})
			g.Set(mf.GetMetric()[0].GetGauge().GetValue())
			return g
		}
	}
	t.Fatalf("no metric %s", name)
	return nil
}
