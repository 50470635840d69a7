package pickup_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/pickup"
)

// testDirSource is a test-only connector.Source over a real directory
// (through os.Root, as the folder connector does): it lists files
// recursively, leaving out the archive directory and marker files, and
// archives by rename. It stands in for the folder connector in these
// tests.
type testDirSource struct {
	root    *os.Root
	dir     string
	archive string // the archive directory, relative, with a trailing slash
}

func newTestDirSource(t *testing.T) *testDirSource {
	t.Helper()
	dir := t.TempDir()
	r, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	return &testDirSource{root: r, dir: dir, archive: pickup.DefaultArchive}
}

func (d *testDirSource) List(ctx context.Context) ([]connector.Object, error) {
	var out []connector.Object
	err := fs.WalkDir(d.root.FS(), ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if p+"/" == d.archive {
				return fs.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, pickup.MarkerSuffix) {
			return nil
		}
		fi, err := e.Info()
		if err != nil {
			return err
		}
		out = append(out, connector.Object{Path: p, Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	return out, err
}

func (d *testDirSource) Open(ctx context.Context, o connector.Object) (io.ReadCloser, error) {
	f, err := d.root.Open(o.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, connector.ErrNotFound
	}
	return f, err
}

func (d *testDirSource) Archive(ctx context.Context, o connector.Object, to string) error {
	var err error
	if to == "" {
		err = d.root.Remove(o.Path)
	} else {
		if err = d.root.MkdirAll(path.Dir(to), 0o755); err != nil {
			return err
		}
		err = d.root.Rename(o.Path, to)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func (d *testDirSource) Check(context.Context) error { return nil }
func (d *testDirSource) Close() error                { return nil }

// write writes a file under the source's directory with the given
// modification time.
func (d *testDirSource) write(t *testing.T, name string, body []byte, mtime time.Time) {
	t.Helper()
	p := filepath.Join(d.dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, body, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

// exists reports whether name exists under the source's directory.
func (d *testDirSource) exists(name string) bool {
	_, err := os.Stat(filepath.Join(d.dir, filepath.FromSlash(name)))
	return err == nil
}

// fakeSource is an in-memory connector.Source whose archive can fail and
// whose reads can be held, for the failure cases.
type fakeSource struct {
	mu    sync.Mutex
	files map[string]fakeFile
	// archiveErr, when set, is returned by Archive.
	archiveErr error
	archived   []string
	// hold, when set, is received from after the first piece of a read:
	// the read waits there (reading signals started first).
	hold      chan struct{}
	started   chan struct{}
	startOnce sync.Once
	// counter, when set, counts the bytes read.
	counter *atomic.Int64
}

type fakeFile struct {
	body  []byte
	mtime time.Time
}

func newFakeSource() *fakeSource { return &fakeSource{files: map[string]fakeFile{}} }

func (s *fakeSource) put(name string, body []byte, mtime time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[name] = fakeFile{body: body, mtime: mtime}
}

func (s *fakeSource) List(context.Context) ([]connector.Object, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []connector.Object
	for name, f := range s.files {
		out = append(out, connector.Object{Path: name, Size: int64(len(f.body)), ModTime: f.mtime})
	}
	slices.SortFunc(out, func(a, b connector.Object) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

func (s *fakeSource) Open(ctx context.Context, o connector.Object) (io.ReadCloser, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files[o.Path]
	if !ok {
		return nil, connector.ErrNotFound
	}
	var r io.Reader = bytes.NewReader(f.body)
	if s.hold != nil {
		r = &heldReader{r: r, hold: s.hold, signal: func() { s.startOnce.Do(func() { close(s.started) }) }, counter: s.counter}
	}
	return io.NopCloser(r), nil
}

func (s *fakeSource) Archive(ctx context.Context, o connector.Object, to string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.archiveErr != nil {
		return s.archiveErr
	}
	delete(s.files, o.Path)
	s.archived = append(s.archived, o.Path+" -> "+to)
	return nil
}

func (s *fakeSource) Check(context.Context) error { return nil }
func (s *fakeSource) Close() error                { return nil }

// heldReader gives 4 KiB, then signals started (once) and waits for hold
// before it gives the rest.
type heldReader struct {
	r       io.Reader
	hold    chan struct{}
	signal  func()
	n       int
	waited  bool
	counter *atomic.Int64
}

func (h *heldReader) Read(b []byte) (int, error) {
	if h.n >= 4096 && !h.waited {
		h.waited = true
		h.signal()
		<-h.hold
	}
	if len(b) > 4096 {
		b = b[:4096]
	}
	n, err := h.r.Read(b)
	h.n += n
	if h.counter != nil {
		h.counter.Add(int64(n))
	}
	return n, err
}
