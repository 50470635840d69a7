// Package peakrss measures the peak resident memory of a test's own
// process on Linux: VmHWM of /proc/self/status, reset to the current
// VmRSS before the work measured. The reset is process-wide, so tests
// that measure it must not run in parallel with others.
package peakrss

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// Reset sets the process's peak RSS (VmHWM) to its RSS now (clear_refs
// 5) and returns that RSS in bytes. It fails t when /proc refuses.
func Reset(t testing.TB) int64 {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS: %v", err)
	}
	return status(t, "VmRSS")
}

// Peak returns the process's peak RSS (VmHWM) in bytes: the highest
// since the last Reset.
func Peak(t testing.TB) int64 {
	t.Helper()
	return status(t, "VmHWM")
}

// WantAboveIdle checks that peak is at most limit above before (issue
// 22's target, given by the caller): an error when not, else it logs the
// figure, followed by note in parentheses when note is not empty.
func WantAboveIdle(t testing.TB, before, peak, limit int64, note string) {
	t.Helper()
	above := peak - before
	if above > limit {
		t.Errorf("peak RSS %d MiB above the %d MiB before the message, want under %d MiB", above>>20, before>>20, limit>>20)
		return
	}
	if note != "" {
		note = " (" + note + ")"
	}
	t.Logf("peak RSS %.1f MiB above the %d MiB before the message%s", float64(above)/(1<<20), before>>20, note)
}

// status reads a kB field of /proc/self/status, in bytes.
func status(t testing.TB, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("%s not in /proc/self/status", field)
	return 0
}
