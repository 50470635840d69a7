package pgfill

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/edihub/edihub/internal/testenv/pgtest"
)

var (
	sharedMu   sync.Mutex
	sharedData *Data
)

// EnvURL names the variable that points Shared at a database Fill filled
// earlier, to try queries without waiting for a fill each run.
const EnvURL = "EDIHUB_PGFILL_URL"

// Shared returns the URL of a database filled with DefaultMessages
// messages and its Data, filled once per test binary on pgtest's server
// (about a minute on two busy cores) and shared by the tests and
// benchmarks that ask for it. They must only read it. Use it from a
// package whose TestMain runs pgtest.Main (or testenv.Main).
func Shared(t testing.TB) (string, *Data) {
	t.Helper()
	if url := os.Getenv(EnvURL); url != "" {
		d, err := Load(context.Background(), url)
		if err != nil {
			t.Fatalf("%s: %v", EnvURL, err)
		}
		return url, d
	}
	url := pgtest.Shared(t, "pgfill", func(ctx context.Context, url string) error {
		d, err := Fill(ctx, url, Options{})
		if err != nil {
			return err
		}
		sharedMu.Lock()
		sharedData = d
		sharedMu.Unlock()
		t.Logf("pgfill: %d messages written in %s", d.Messages, d.Duration.Round(100_000_000))
		return nil
	})
	sharedMu.Lock()
	defer sharedMu.Unlock()
	return url, sharedData
}
