package connector

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// newFolder returns a Folder on a new directory "conn" below a new base,
// and the folder's directory.
func newFolder(t *testing.T, archive string) (*Folder, string) {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "conn")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := NewFolder(FolderOptions{Name: "test", Base: base, Path: "conn", Archive: archive})
	if err != nil {
		t.Fatal(err)
	}
	return f, dir
}

// files lists every entry below dir, hidden ones included, as slash
// paths.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var got []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		got = append(got, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNewFolderRefuses(t *testing.T) {
	tests := []struct {
		give FolderOptions
		want string
	}{
		{give: FolderOptions{Path: "erp"}, want: "EDIHUB_FOLDERS_DIR is not set"},
		{give: FolderOptions{Base: "/b", Path: ""}, want: "folder.path"},
		{give: FolderOptions{Base: "/b", Path: "/etc"}, want: "folder.path \"/etc\" must be a directory relative to EDIHUB_FOLDERS_DIR"},
		{give: FolderOptions{Base: "/b", Path: "../x"}, want: "without .."},
		{give: FolderOptions{Base: "/b", Path: "a/../../x"}, want: "without .."},
		{give: FolderOptions{Base: "/b", Path: "a", Archive: "../arch"}, want: "archive \"../arch\""},
		{give: FolderOptions{Base: "/b", Path: "a", Archive: "/arch"}, want: "archive \"/arch\""},
		{give: FolderOptions{Base: "/b", Path: "a", Archive: "./"}, want: "archive \"./\""},
	}
	for _, tt := range tests {
		_, err := NewFolder(tt.give)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewFolder(%+v) = %v, want an error with %q", tt.give, err, tt.want)
		}
	}
}

// blockingReader yields half of body, then signals reached and waits for
// release before yielding the rest.
type blockingReader struct {
	body    []byte
	off     int
	reached chan struct{}
	release chan struct{}
}

func (b *blockingReader) Read(p []byte) (int, error) {
	half := len(b.body) / 2
	if b.off == half && b.reached != nil {
		close(b.reached)
		b.reached = nil
		<-b.release
	}
	if b.off == len(b.body) {
		return 0, io.EOF
	}
	end := len(b.body)
	if b.off < half {
		end = half
	}
	n := copy(p, b.body[b.off:end])
	b.off += n
	return n, nil
}

// TestFolderWriteWholeOrNothing stops a 16 MiB write halfway and looks
// at the folder: the final name is absent (and List does not show the
// temporary file) until Write returns, then holds every byte.
func TestFolderWriteWholeOrNothing(t *testing.T) {
	f, dir := newFolder(t, "")
	body := bytes.Repeat([]byte("0123456789abcdef"), 1<<20)
	reached, release := make(chan struct{}), make(chan struct{})
	br := &blockingReader{body: body, reached: reached, release: release}
	done := make(chan error, 1)
	go func() {
		done <- f.Write(t.Context(), Put{Name: "acme/2026/po.edi", Body: br, Size: int64(len(body))})
	}()
	<-reached
	final := filepath.Join(dir, "acme", "2026", "po.edi")
	if _, err := os.Stat(final); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(final name) halfway through Write = %v, want it absent", err)
	}
	got := files(t, dir)
	if len(got) != 1 || !strings.HasPrefix(got[0], "acme/2026/.po.edi.tmp-") {
		t.Errorf("files halfway through Write = %v, want one acme/2026/.po.edi.tmp-RANDOM", got)
	}
	if objs, err := f.List(t.Context()); err != nil || len(objs) != 0 {
		t.Errorf("List halfway through Write = %v, %v, want nothing", objs, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Write = %v", err)
	}
	b, err := os.ReadFile(final)
	if err != nil || sha256.Sum256(b) != sha256.Sum256(body) {
		t.Errorf("ReadFile(final) = %d bytes, %v, want the %d bytes written", len(b), err, len(body))
	}
	if got := files(t, dir); !cmp.Equal(got, []string{"acme/2026/po.edi"}) {
		t.Errorf("files after Write = %v, want only the final name", got)
	}
}

func TestFolderWriteReplacesOnRetry(t *testing.T) {
	f, dir := newFolder(t, "")
	for _, body := range []string{"first attempt", "second"} {
		if err := f.Write(t.Context(), Put{Name: "po.edi", Body: strings.NewReader(body), Size: -1}); err != nil {
			t.Fatalf("Write(%q) = %v", body, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "po.edi"))
	if err != nil || string(b) != "second" {
		t.Errorf("ReadFile(po.edi) = %q, %v, want %q", b, err, "second")
	}
	if got := files(t, dir); !cmp.Equal(got, []string{"po.edi"}) {
		t.Errorf("files = %v, want [po.edi]", got)
	}
}

// TestFolderWriteLeavesNothingOnFailure: a body shorter than its Size, a
// failing body and a cancelled context leave no file at all.
func TestFolderWriteLeavesNothingOnFailure(t *testing.T) {
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	tests := []struct {
		name string
		ctx  context.Context
		put  Put
		want error
	}{
		{name: "short body", ctx: t.Context(), put: Put{Name: "a/po.edi", Body: strings.NewReader("12345"), Size: 10}, want: ErrUnavailable},
		{name: "body fails", ctx: t.Context(), put: Put{Name: "a/po.edi", Body: io.MultiReader(strings.NewReader("12"), iotestErr{}), Size: -1}, want: ErrRefused},
		{name: "cancelled", ctx: cancelled, put: Put{Name: "a/po.edi", Body: strings.NewReader("12345"), Size: 5}, want: ErrUnavailable},
	}
	for _, tt := range tests {
		f, dir := newFolder(t, "")
		err := f.Write(tt.ctx, tt.put)
		if !errors.Is(err, tt.want) {
			t.Errorf("%s: Write = %v, want %v", tt.name, err, tt.want)
		}
		if got := files(t, dir); len(got) != 0 {
			t.Errorf("%s: files after a failed Write = %v, want none", tt.name, got)
		}
	}
}

type iotestErr struct{}

func (iotestErr) Read([]byte) (int, error) { return 0, errors.New("spool read failed") }

// TestFolderRefusesEscapes: neither a name nor a symbolic link leads a
// write, read or archive outside the folder.
func TestFolderRefusesEscapes(t *testing.T) {
	f, dir := newFolder(t, "archive")
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "secret"), "s3cret")
	if err := os.Symlink(outside, filepath.Join(dir, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "secret.edi")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "archive")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "po.edi"), "po")
	ctx := t.Context()
	for _, name := range []string{"out/x.edi", "out/new/x.edi", "../x.edi", "/x.edi", "a/../../x.edi", ""} {
		if err := f.Write(ctx, Put{Name: name, Body: strings.NewReader("x"), Size: 1}); !errors.Is(err, ErrRefused) {
			t.Errorf("Write(%q) = %v, want ErrRefused", name, err)
		}
	}
	if r, err := f.Open(ctx, Object{Path: "secret.edi"}); !errors.Is(err, ErrRefused) {
		t.Errorf("Open(symbolic link out) = %v, %v, want ErrRefused", r, err)
	}
	if r, err := f.Open(ctx, Object{Path: "out/secret"}); !errors.Is(err, ErrRefused) {
		t.Errorf("Open(out/secret) = %v, %v, want ErrRefused", r, err)
	}
	if err := f.Archive(ctx, Object{Path: "po.edi", Size: 2}, "archive"); !errors.Is(err, ErrRefused) {
		t.Errorf("Archive(into a symbolic link out) = %v, want ErrRefused", err)
	}
	if err := f.Archive(ctx, Object{Path: "po.edi", Size: 2}, "../x"); !errors.Is(err, ErrRefused) {
		t.Errorf("Archive(to ../x) = %v, want ErrRefused", err)
	}
	if got := files(t, outside); !cmp.Equal(got, []string{"secret"}) {
		t.Errorf("files outside the folder = %v, want only [secret]", got)
	}
	objs, err := f.List(ctx)
	if err != nil || len(objs) != 1 || objs[0].Path != "po.edi" {
		t.Errorf("List = %v, %v, want only po.edi (no symbolic links)", objs, err)
	}

	// The connector's folder itself a symbolic link out of the base.
	base := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(base, "conn")); err != nil {
		t.Fatal(err)
	}
	g, err := NewFolder(FolderOptions{Name: "escape", Base: base, Path: "conn"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Write(ctx, Put{Name: "x.edi", Body: strings.NewReader("x"), Size: 1}); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "folder.path") {
		t.Errorf("Write into a folder that is a symbolic link out of EDIHUB_FOLDERS_DIR = %v, want ErrRefused naming folder.path", err)
	}
	if got := files(t, outside); !cmp.Equal(got, []string{"secret"}) {
		t.Errorf("files outside the base = %v, want only [secret]", got)
	}
}

func TestFolderMissing(t *testing.T) {
	tests := []struct {
		base string
		want string
	}{
		{base: t.TempDir(), want: "folder.path missing cannot be opened below EDIHUB_FOLDERS_DIR (create the directory"},
		{base: filepath.Join(t.TempDir(), "unmounted"), want: "EDIHUB_FOLDERS_DIR"},
	}
	for _, tt := range tests {
		f, err := NewFolder(FolderOptions{Name: "erp", Base: tt.base, Path: "missing"})
		if err != nil {
			t.Fatal(err)
		}
		ctx := t.Context()
		for what, err := range map[string]error{
			"Write": f.Write(ctx, Put{Name: "x", Body: strings.NewReader("x"), Size: 1}),
			"Check": f.Check(ctx),
			"List":  func() error { _, err := f.List(ctx); return err }(),
		} {
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("%s on a missing folder = %v, want ErrRefused with %q", what, err, tt.want)
			}
		}
	}
}

func TestFolderCheck(t *testing.T) {
	f, dir := newFolder(t, "")
	if err := f.Check(t.Context()); err != nil {
		t.Errorf("Check = %v, want nil", err)
	}
	if got := files(t, dir); len(got) != 0 {
		t.Errorf("files after Check = %v, want none", got)
	}
	// A file where the folder should be.
	writeFile(t, filepath.Join(filepath.Dir(dir), "file"), "x")
	g, err := NewFolder(FolderOptions{Name: "g", Base: filepath.Dir(dir), Path: "file"})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Check(t.Context()); !errors.Is(err, ErrRefused) {
		t.Errorf("Check of a folder that is a file = %v, want ErrRefused", err)
	}
}

func TestFolderList(t *testing.T) {
	f, dir := newFolder(t, "archive/")
	mtime := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for name, content := range map[string]string{
		"a.edi":                  "aaa",
		"sub/b.edi":              "bb",
		"sub/b.edi.done":         "",
		"archive/old.edi":        "old",
		"sub/archive/kept.edi":   "k",
		".c.edi.tmp-0123":        "partial",
		".hidden/x.edi":          "x",
		"z/.y.edi":               "y",
		"z/deep/er/most.xml.bin": "m",
	} {
		writeFile(t, filepath.Join(dir, name), content)
		if err := os.Chtimes(filepath.Join(dir, name), mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a.edi", filepath.Join(dir, "link.edi")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := f.List(t.Context())
	want := []Object{
		{Path: "a.edi", Size: 3, ModTime: mtime},
		{Path: "sub/archive/kept.edi", Size: 1, ModTime: mtime},
		{Path: "sub/b.edi", Size: 2, ModTime: mtime},
		{Path: "z/deep/er/most.xml.bin", Size: 1, ModTime: mtime},
	}
	if err != nil || !cmp.Equal(got, want) {
		t.Errorf("List = %v, %v, want %v", got, err, want)
	}

	f.o.MaxList = 2
	got, err = f.List(t.Context())
	if err != nil || !cmp.Equal(got, want[:2]) {
		t.Errorf("List with MaxList 2 = %v, %v, want %v", got, err, want[:2])
	}

	for _, tt := range []struct {
		give string
		want bool
	}{{give: "sub/b.edi", want: true}, {give: "a.edi", want: false}} {
		if has, err := HasMarker(t.Context(), f, Object{Path: tt.give}); err != nil || has != tt.want {
			t.Errorf("HasMarker(%s) = %v, %v, want %v", tt.give, has, err, tt.want)
		}
	}
}

func TestFolderOpen(t *testing.T) {
	f, dir := newFolder(t, "")
	writeFile(t, filepath.Join(dir, "sub", "po.edi"), "ISA*00~")
	r, err := f.Open(t.Context(), Object{Path: "sub/po.edi"})
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	b, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(b) != "ISA*00~" {
		t.Errorf("ReadAll(Open(sub/po.edi)) = %q, %v, want %q", b, err, "ISA*00~")
	}
	if _, err := f.Open(t.Context(), Object{Path: "gone.edi"}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Open(gone.edi) = %v, want ErrNotFound", err)
	}
	if _, err := f.Open(t.Context(), Object{Path: "sub"}); !errors.Is(err, ErrRefused) {
		t.Errorf("Open(a directory) = %v, want ErrRefused", err)
	}
}

func TestFolderArchive(t *testing.T) {
	f, dir := newFolder(t, "archive")
	ctx := t.Context()
	take := func(name, content string) Object {
		t.Helper()
		writeFile(t, filepath.Join(dir, name), content)
		objs, err := f.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.Path == name {
				return o
			}
		}
		t.Fatalf("List = %v, want %s in it", objs, name)
		return Object{}
	}
	steps := []struct {
		name    string
		content string
		to      string
		want    []string // files in the folder afterwards
	}{
		{name: "acme/po.edi", content: "one", to: "archive", want: []string{"archive/acme/po.edi"}},
		{name: "acme/po.edi", content: "two", to: "archive", want: []string{"archive/acme/po.edi", "archive/acme/po~1.edi"}},
		{name: "acme/po.edi", content: "three", to: "archive/", want: []string{"archive/acme/po.edi", "archive/acme/po~1.edi", "archive/acme/po~2.edi"}},
		{name: "README", content: "r", to: "archive", want: []string{"archive/README", "archive/acme/po.edi", "archive/acme/po~1.edi", "archive/acme/po~2.edi"}},
		{name: "README", content: "r2", to: "archive", want: []string{"archive/README", "archive/README~1", "archive/acme/po.edi", "archive/acme/po~1.edi", "archive/acme/po~2.edi"}},
		{name: "del.edi", content: "d", to: "", want: []string{"archive/README", "archive/README~1", "archive/acme/po.edi", "archive/acme/po~1.edi", "archive/acme/po~2.edi"}},
	}
	for _, s := range steps {
		o := take(s.name, s.content)
		if err := f.Archive(ctx, o, s.to); err != nil {
			t.Fatalf("Archive(%s, %q) = %v", s.name, s.to, err)
		}
		// The answer was lost: the poller archives again.
		if err := f.Archive(ctx, o, s.to); err != nil {
			t.Errorf("Archive(%s, %q) again = %v, want nil", s.name, s.to, err)
		}
		if got := files(t, dir); !cmp.Equal(got, s.want) {
			t.Errorf("after Archive(%s, %q): files = %v, want %v", s.name, s.to, got, s.want)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "archive", "acme", "po~1.edi"))
	if err != nil || string(b) != "two" {
		t.Errorf("archive/acme/po~1.edi = %q, %v, want %q", b, err, "two")
	}

	// A new file of the same name arrived after the first was moved: an
	// Archive repeated for the first leaves it in place.
	o := take("new.edi", "first")
	if err := f.Archive(ctx, o, ""); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "new.edi"), "second, longer")
	if err := f.Archive(ctx, o, ""); err != nil {
		t.Errorf("Archive of a file replaced since = %v, want nil", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "new.edi")); err != nil || string(b) != "second, longer" {
		t.Errorf("new.edi after a repeated Archive = %q, %v, want the new file kept", b, err)
	}
}

// TestFolderClassify: each kind of failure maps to the sentinel that
// says whether to retry (tests run as root, so permissions cannot be
// provoked on disk).
func TestFolderClassify(t *testing.T) {
	f, _ := newFolder(t, "")
	tests := []struct {
		give error
		want error
	}{
		{give: syscall.EACCES, want: ErrRefused},
		{give: syscall.EPERM, want: ErrRefused},
		{give: syscall.EROFS, want: ErrRefused},
		{give: syscall.ENOTDIR, want: ErrRefused},
		{give: syscall.ENOENT, want: ErrNotFound},
		{give: syscall.ENOSPC, want: ErrUnavailable},
		{give: syscall.EIO, want: ErrUnavailable},
		{give: syscall.ESTALE, want: ErrUnavailable},
		{give: context.Canceled, want: ErrUnavailable},
	}
	for _, tt := range tests {
		err := f.classify("write x", &fs.PathError{Op: "open", Path: "x", Err: tt.give})
		if !errors.Is(err, tt.want) || !errors.Is(err, tt.give) {
			t.Errorf("classify(%v) = %v, want %v wrapping it", tt.give, err, tt.want)
		}
	}
	if err := f.classify("write x", syscall.EACCES); !strings.Contains(err.Error(), "give edihub's user write access to folder.path conn") {
		t.Errorf("classify(EACCES) = %v, want the fix", err)
	}
}

func TestArchiveName(t *testing.T) {
	tests := []struct {
		to, p string
		n     int
		want  string
	}{
		{to: "archive", p: "acme/po.edi", n: 0, want: "archive/acme/po.edi"},
		{to: "archive/", p: "acme/po.edi", n: 2, want: "archive/acme/po~2.edi"},
		{to: "a", p: "po.tar.gz", n: 1, want: "a/po.tar~1.gz"},
		{to: "a", p: "README", n: 1, want: "a/README~1"},
		{to: "a", p: "x/.profile", n: 3, want: "a/x/.profile~3"},
	}
	for _, tt := range tests {
		if got := ArchiveName(tt.to, tt.p, tt.n); got != tt.want {
			t.Errorf("ArchiveName(%q, %q, %d) = %q, want %q", tt.to, tt.p, tt.n, got, tt.want)
		}
	}
}

// BenchmarkFolderWrite measures a 64 MiB document written whole (with
// both syncs) against writing and syncing the same bytes to a file
// directly.
func BenchmarkFolderWrite(b *testing.B) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 4<<20)
	b.Run("folder", func(b *testing.B) {
		base := b.TempDir()
		f, err := NewFolder(FolderOptions{Name: "bench", Base: base, Path: "."})
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if err := f.Write(b.Context(), Put{Name: "a/doc.edi", Body: bytes.NewReader(body), Size: int64(len(body))}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("direct", func(b *testing.B) {
		name := filepath.Join(b.TempDir(), "doc.edi")
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			file, err := os.Create(name)
			if err == nil {
				_, err = io.Copy(file, bytes.NewReader(body))
			}
			if err == nil {
				err = file.Sync()
			}
			if cerr := file.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				b.Fatal(err)
			}
		}
	})
}
