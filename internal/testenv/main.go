package testenv

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/edihub/edihub/internal/testenv/browser"
	"github.com/edihub/edihub/internal/testenv/openssltest"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// Option adds a step to Main.
type Option func(*options)

type options struct {
	leaks bool
	after []func()
}

// CheckLeaks makes Main fail a passing run that left goroutines running
// (go.uber.org/goleak), for packages that start goroutines.
func CheckLeaks() Option { return func(o *options) { o.leaks = true } }

// After runs f once the tests ran, before the leak check.
func After(f func()) Option { return func(o *options) { o.after = append(o.after, f) } }

// Main runs m's tests, then stops what the wing started for them (the
// shared PostgreSQL of pgtest, the shared Chromium of browser, openssltest's
// throwaway keys) and runs the steps opts add. It returns the exit code: call it as
// os.Exit(testenv.Main(m)) from TestMain.
func Main(m *testing.M, opts ...Option) int {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	code := pgtest.Main(m)
	browser.Stop()
	openssltest.Cleanup()
	for _, f := range o.after {
		f()
	}
	if code == 0 && o.leaks {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	return code
}

// Together runs f(0) … f(n-1) in n goroutines released at the same moment
// (so that they race, as concurrent requests do) and returns when all
// returned.
func Together(n int, f func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			f(i)
		})
	}
	close(start)
	wg.Wait()
}
