package failover

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"
)

// SharedBinary builds edihub once for the tests of a test binary: Path
// builds it on first use (into a temporary directory named after Prefix),
// Remove deletes it (from TestMain, after the tests).
type SharedBinary struct {
	Prefix string

	once      sync.Once
	dir, path string
	err       error
}

// Path returns the built binary's path; a build that fails fails t.
func (b *SharedBinary) Path(t testing.TB) string {
	t.Helper()
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", b.Prefix); b.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		b.path, b.err = BuildBinary(ctx, b.dir)
	})
	if b.err != nil {
		t.Fatalf("build edihub: %v", b.err)
	}
	return b.path
}

// Remove deletes the binary's directory, if it was built.
func (b *SharedBinary) Remove() {
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}
