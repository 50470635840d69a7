// Package edioracle runs an independent EDI implementation for tests: the
// npm packages node-x12 (X12 parser and generator) and edifact (EDIFACT
// reader), driven by oracle.js under Node.js. New installs the packages
// once into a cache folder (npm install, pinned versions) and never skips:
// without node or npm the test fails with the command that installs them.
package edioracle

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
)

//go:embed oracle.js
var script []byte

// Packages are the pinned npm packages the oracle uses.
var Packages = []string{"node-x12@1.7.1", "edifact@1.2.12"}

// Oracle runs oracle.js in a folder where its packages are installed.
type Oracle struct {
	dir string
}

var (
	once      sync.Once
	shared    *Oracle
	sharedErr error
)

// New returns the oracle, installing its packages on first use into
// $EDIHUB_EDIORACLE_DIR or the user's cache folder. Concurrent test
// processes serialise the install with a file lock.
func New(t testing.TB) *Oracle {
	t.Helper()
	once.Do(func() { shared, sharedErr = install() })
	if sharedErr != nil {
		t.Fatalf("edioracle: %v", sharedErr)
	}
	return shared
}

func install() (*Oracle, error) {
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s not found: install Debian's nodejs and npm packages (apt-get install nodejs npm): %w", tool, err)
		}
	}
	base := os.Getenv("EDIHUB_EDIORACLE_DIR")
	if base == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			return nil, fmt.Errorf("cache folder (set EDIHUB_EDIORACLE_DIR): %w", err)
		}
		base = filepath.Join(c, "edihub", "edioracle")
	}
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	lock, err := os.OpenFile(filepath.Join(base, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return nil, fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	dir := filepath.Join(base, "node-x12-1.7.1_edifact-1.2.12")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "edifact", "reader.js")); err != nil {
		if err := npmInstall(base, dir); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "oracle.js"), script, 0o644); err != nil {
		return nil, err
	}
	return &Oracle{dir: dir}, nil
}

// npmInstall installs Packages into a fresh folder and renames it to dir,
// so a half-finished install is never taken for a finished one.
func npmInstall(base, dir string) error {
	tmp, err := os.MkdirTemp(base, "install-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"private": true}`), 0o644); err != nil {
		return err
	}
	args := append([]string{"install", "--no-audit", "--no-fund", "--loglevel=error"}, Packages...)
	cmd := exec.Command("npm", args...)
	cmd.Dir = tmp
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("npm install %v:\n%s\n%w", Packages, out, err)
	}
	_ = os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}

// Call sends req (which names its "op") to oracle.js and decodes the
// answer into resp. A failure of the oracle fails the test.
func (o *Oracle) Call(t testing.TB, req any, resp any) {
	t.Helper()
	in, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", "oracle.js")
	cmd.Dir = o.dir
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("edioracle: node oracle.js: %v\n%s", err, stderr.Bytes())
	}
	if err := json.Unmarshal(out, resp); err != nil {
		t.Fatalf("edioracle: answer %q: %v", out, err)
	}
}
