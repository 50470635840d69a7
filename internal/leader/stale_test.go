package leader

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestKubernetesStaleFenceIsExplained: after an etcd restore the Lease's
// resourceVersions are below the fence in PostgreSQL and every term is
// refused. The elector says so in an error naming both tokens and the
// remedy, and starts no worker.
func TestKubernetesStaleFenceIsExplained(t *testing.T) {
	ctx := context.Background()
	store := pgtest.Store(t)
	const fenceToken = 1 << 40 // far above the fake API server's revisions
	if err := store.OpenTerm(ctx, hub.Fence{Lease: "edihub-leader", Token: fenceToken}, "before-the-restore"); err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	enforceResourceVersions(cs)
	core, logs := observer.New(zapcore.InfoLevel)
	hook, refused := signalOnLog("term refused")
	started := make(chan struct{}, 1)
	e, err := NewKubernetes(KubernetesOptions{Leases: cs.CoordinationV1(), Namespace: "ns"}, Options{
		LeaseName: "edihub-leader", Identity: "r0",
		LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
		WorkerStopTimeout: 500 * time.Millisecond,
		Workers: map[string]Worker{"w": WorkerFunc(func(ctx context.Context) error {
			started <- struct{}{}
			<-ctx.Done()
			return nil
		})},
		Terms: store, Logger: zap.New(core, hook), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(rctx) }()
	select {
	case <-refused:
	case <-time.After(10 * time.Second):
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	select {
	case <-started:
		t.Error("a worker started under a stale term")
	default:
	}
	entries := logs.FilterMessageSnippet("term refused").All()
	if len(entries) == 0 {
		t.Fatalf("no explanation of the stale term; logged %v", logs.All())
	}
	got := entries[0]
	f := got.ContextMap()
	our, _ := f["our_token"].(int64)
	remedy, _ := f["remedy"].(string)
	if got.Level != zapcore.ErrorLevel || f["fence_token"] != int64(fenceToken) || our <= 0 || our >= fenceToken ||
		!strings.Contains(remedy, "DELETE FROM leader_fence WHERE lease = 'edihub-leader'") || !strings.Contains(remedy, "etcd was restored") {
		t.Errorf("logged %s %q with %v", got.Level, got.Message, f)
	}
}
