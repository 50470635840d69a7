package exittemp_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/testenv/exittemp"
)

// TestDirRemovedAtExit: a child process makes a directory with Dir and
// exits; the directory is gone after, and was there while it ran.
func TestDirRemovedAtExit(t *testing.T) {
	if os.Getenv("EXITTEMP_CHILD") != "" {
		dir, err := exittemp.Dir("exittemp-test-")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(os.Getenv("EXITTEMP_CHILD"), []byte(dir), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	note := filepath.Join(t.TempDir(), "dir")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestDirRemovedAtExit$")
	cmd.Env = append(os.Environ(), "EXITTEMP_CHILD="+note)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	dir, err := os.ReadFile(note)
	if err != nil || len(dir) == 0 {
		t.Fatalf("child wrote no directory: %v", err)
	}
	// The janitor runs after the child's exit closes its pipe: a bounded
	// poll, as nothing signals its end.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(string(dir)); os.IsNotExist(err) {
			return
		}
	}
	t.Fatalf("%s still there 10s after the process that made it ended", dir)
}
