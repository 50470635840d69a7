// Package exittemp makes temporary directories that are removed when the
// process that made them ends, however it ends: for servers a package's
// tests share (started from TestMain or a sync.Once), which no single test
// cleans up after.
package exittemp

import (
	"fmt"
	"os"
	"os/exec"
	"sync"
)

// Dir makes a new temporary directory named with prefix and starts a
// shell that removes it once its standard input, a pipe this process
// holds open for its whole life, closes: at exit, a crash or a kill.
func Dir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("exittemp: %w", err)
	}
	cmd := exec.Command("/bin/sh", "-c", `read -r _; rm -rf "$1"`, "janitor", dir)
	w, err := cmd.StdinPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("exittemp: start the janitor of %s: %w", dir, err)
	}
	mu.Lock()
	janitors = append(janitors, w) // never closed: the process's end closes it
	mu.Unlock()
	go func() { _ = cmd.Wait() }()
	return dir, nil
}

// janitors keeps the pipes of Dir reachable (a collected pipe would be
// closed by its finalizer, and the directory removed early).
var (
	mu       sync.Mutex
	janitors []any
)
