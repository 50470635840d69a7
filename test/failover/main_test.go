package failover_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgserver"
	"github.com/edihub/edihub/internal/testenv/pgtest"
	"github.com/edihub/edihub/test/controlplane"
	"github.com/edihub/edihub/test/failover"
)

// bin is edihub, built once for the package's tests.
var bin = failover.SharedBinary{Prefix: "edihub-failover-"}

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.After(bin.Remove), testenv.CheckLeaks()))
}

// binary builds edihub once per test binary.
func binary(t *testing.T) string { return bin.Path(t) }

// scenario is one test's cluster and its parts.
type scenario struct {
	cl *failover.Cluster
	cp *controlplane.ControlPlane // Kubernetes backend only
}

// setup options beyond the backend.
type setup struct {
	// databaseURL overrides the fresh database of the shared test server.
	databaseURL string
	// proxyDatabase: see failover.Options.ProxyDatabase.
	proxyDatabase bool
	// config overrides the generated station (failover.Options.Config).
	config string
	// env is added to every replica's environment.
	env []string
}

// start runs three replicas on backend with production timings: a
// control plane of its own (Kubernetes), a fresh database, and waits until
// every replica is ready. Everything stops at cleanup; on failure the
// replicas' logs are printed.
func start(t *testing.T, backend failover.Backend, s setup) *scenario {
	t.Helper()
	bin := binary(t)
	sc := &scenario{}
	o := failover.Options{Binary: bin, Backend: backend, DatabaseURL: s.databaseURL, Dir: t.TempDir(), ProxyDatabase: s.proxyDatabase, Config: s.config, Env: s.env}
	if o.DatabaseURL == "" {
		o.DatabaseURL = pgtest.URL(t)
	}
	if backend == failover.Kubernetes {
		sc.cp = controlplane.StartForTest(t, controlplane.Options{})
		o.Kubeconfig, o.Namespace = sc.cp.EdihubKubeconfig, sc.cp.Namespace
		o.APIServer = strings.TrimPrefix(sc.cp.URL, "https://")
	}
	cl, err := failover.Start(t.Context(), o)
	if err != nil {
		t.Fatalf("start replicas: %v", err)
	}
	sc.cl = cl
	t.Cleanup(func() {
		if err := cl.Close(); err != nil {
			t.Errorf("stop replicas: %v", err)
		}
		if t.Failed() {
			lines := cl.Recorder().Lines()
			if len(lines) > 400 {
				lines = lines[len(lines)-400:]
			}
			t.Logf("replica logs (last %d lines):\n%s", len(lines), strings.Join(lines, "\n"))
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatalf("replicas not ready: %v", err)
	}
	return sc
}

// dedicatedDatabase starts a PostgreSQL server of the test's own, migrates
// its postgres database, and returns the server and that database's URL.
func dedicatedDatabase(t *testing.T) (*pgserver.Server, string) {
	t.Helper()
	srv := pgtest.NewServer(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	url := srv.URL("postgres")
	st, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return srv, url
}
