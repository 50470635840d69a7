package s3server

import (
	"fmt"
	"os"
	"os/exec"
)

// StartTemp is Start in a new temporary directory that is removed when
// this process ends: for a server shared by a package's tests, which has
// no test to clean up after it.
func StartTemp() (*Server, error) {
	dir, err := os.MkdirTemp("", "edihub-s3server-")
	if err != nil {
		return nil, fmt.Errorf("s3server: %w", err)
	}
	if err := removeAtExit(dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return Start(dir)
}

// removeAtExit starts a shell that removes dir once its standard input,
// a pipe this process holds open for its whole life, closes.
func removeAtExit(dir string) error {
	cmd := exec.Command("/bin/sh", "-c", `read -r _; rm -rf "$1"`, "janitor", dir)
	w, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("s3server: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("s3server: start the janitor of %s: %w", dir, err)
	}
	janitors = append(janitors, w) // never closed: the process's end closes it
	go func() { _ = cmd.Wait() }()
	return nil
}

// janitors keeps the pipes of removeAtExit reachable (a collected pipe
// would be closed by its finalizer).
var janitors []any
