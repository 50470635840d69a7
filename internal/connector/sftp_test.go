package connector_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/testenv/sshserver"
)

// sharedSSH is one sshd for the package's SFTP tests; each test works in
// a directory of its own under its root. It stops when the test process
// ends (sshserver tethers it), and its directory is removed.
var sharedSSH struct {
	once sync.Once
	srv  *sshserver.Server
	err  error
}

func sshd(t *testing.T) *sshserver.Server {
	t.Helper()
	sharedSSH.once.Do(func() { sharedSSH.srv, sharedSSH.err = sshserver.StartTemp() })
	if sharedSSH.err != nil {
		t.Fatalf("start sshd: %v", sharedSSH.err)
	}
	return sharedSSH.srv
}

// newSFTP returns a connector on srv rooted at a fresh directory, and that
// directory on disk.
func newSFTP(t *testing.T, srv *sshserver.Server, edit func(*connector.SFTPOptions)) (*connector.SFTP, string) {
	t.Helper()
	dir, err := os.MkdirTemp(srv.Root, strings.ReplaceAll(t.Name(), "/", "_")+"-")
	if err != nil {
		t.Fatal(err)
	}
	o := connector.SFTPOptions{
		Host: srv.Host, Port: srv.Port, User: srv.User, PrivateKey: srv.UserKey,
		HostKey: srv.HostKey, Path: dir, Archive: "archive/",
	}
	if edit != nil {
		edit(&o)
	}
	c, err := connector.NewSFTP(o)
	if err != nil {
		t.Fatalf("NewSFTP: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, dir
}

func remotePut(name, body string) connector.Put {
	return connector.Put{Name: name, Body: strings.NewReader(body), Size: int64(len(body)), ContentType: "application/edi-x12"}
}

func TestSFTPWriteOverwriteAndRead(t *testing.T) {
	t.Parallel()
	c, dir := newSFTP(t, sshd(t), nil)
	ctx := t.Context()
	if err := c.Write(ctx, remotePut("acme/2026/x.edi", "first")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	// A retry after a lost answer writes the same name again: one file,
	// the second content.
	if err := c.Write(ctx, remotePut("acme/2026/x.edi", "second")); err != nil {
		t.Fatalf("Write again: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "acme/2026/x.edi"))
	if err != nil || string(got) != "second" {
		t.Fatalf("file = %q, %v; want %q", got, err, "second")
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "acme/2026"))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want 1 (no temporary file left): %v", len(entries), entries)
	}
	objs, err := c.List(ctx)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(objs) != 1 || objs[0].Path != "acme/2026/x.edi" || objs[0].Size != 6 {
		t.Fatalf("List = %+v, want acme/2026/x.edi of 6 bytes", objs)
	}
	r, err := c.Open(ctx, objs[0])
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	b, err := io.ReadAll(r)
	_ = r.Close()
	if err != nil || string(b) != "second" {
		t.Errorf("Open read %q, %v; want %q", b, err, "second")
	}
}

func TestSFTPWriteShortBodyLeavesNothing(t *testing.T) {
	t.Parallel()
	c, dir := newSFTP(t, sshd(t), nil)
	p := remotePut("short.edi", "abc")
	p.Size = 10
	err := c.Write(t.Context(), p)
	if !errors.Is(err, connector.ErrUnavailable) {
		t.Fatalf("Write of a body shorter than Size = %v, want ErrUnavailable", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("after a failed write the directory holds %v, want nothing", entries)
	}
}

func TestSFTPListSkipsArchiveTempAndMarkers(t *testing.T) {
	t.Parallel()
	c, dir := newSFTP(t, sshd(t), nil)
	for name, body := range map[string]string{
		"a.edi":                 "a",
		"sub/b.edi":             "bb",
		"sub/b.edi.done":        "",
		".c.edi.tmp-1234":       "partial",
		"archive/old.edi":       "old",
		"archive/sub/older.edi": "older",
		".hidden/d.edi":         "d",
	} {
		writeRemoteFile(t, filepath.Join(dir, name), body)
	}
	objs, done, err := c.ListMarkers(t.Context())
	if err != nil {
		t.Fatalf("ListMarkers: %v", err)
	}
	var paths []string
	for _, o := range objs {
		paths = append(paths, o.Path)
	}
	if diff := cmp.Diff([]string{"a.edi", "sub/b.edi"}, paths); diff != "" {
		t.Errorf("List paths (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]bool{"sub/b.edi": true}, done); diff != "" {
		t.Errorf("markers (-want +got):\n%s", diff)
	}
}

func writeRemoteFile(t *testing.T, name, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSFTPArchiveAndDelete(t *testing.T) {
	t.Parallel()
	c, dir := newSFTP(t, sshd(t), nil)
	ctx := t.Context()
	writeRemoteFile(t, filepath.Join(dir, "acme/x.edi"), "x")
	writeRemoteFile(t, filepath.Join(dir, "acme/x.edi.done"), "")
	writeRemoteFile(t, filepath.Join(dir, "y.edi"), "y")
	x := connector.Object{Path: "acme/x.edi"}
	if err := c.Archive(ctx, x, "archive/"); err != nil {
		t.Fatalf("Archive(acme/x.edi, archive/): %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "archive/acme/x.edi")); err != nil || string(b) != "x" {
		t.Errorf("archived file = %q, %v; want %q", b, err, "x")
	}
	for _, gone := range []string{"acme/x.edi", "acme/x.edi.done"} {
		if _, err := os.Stat(filepath.Join(dir, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Archive, %s: Stat err = %v, want not exist", gone, err)
		}
	}
	// The answer of the first archive was lost: the second finds the file
	// gone, and that is not an error.
	if err := c.Archive(ctx, x, "archive/"); err != nil {
		t.Errorf("Archive again = %v, want nil", err)
	}
	y := connector.Object{Path: "y.edi"}
	if err := c.Archive(ctx, y, ""); err != nil {
		t.Fatalf("Archive(y.edi, \"\") (delete): %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "y.edi")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after delete, Stat err = %v, want not exist", err)
	}
	if err := c.Archive(ctx, y, ""); err != nil {
		t.Errorf("delete again = %v, want nil", err)
	}
	if _, err := c.Open(ctx, y); !errors.Is(err, connector.ErrNotFound) {
		t.Errorf("Open of a deleted file = %v, want ErrNotFound", err)
	}
	if err := c.Check(ctx); err != nil {
		t.Errorf("Check = %v", err)
	}
	objs, err := c.List(ctx)
	if err != nil || len(objs) != 0 {
		t.Errorf("List after archive and delete = %+v, %v; want nothing (archive left out, no probe left by Check)", objs, err)
	}
}

func TestSFTPRefused(t *testing.T) {
	t.Parallel()
	srv := sshd(t)
	_, otherKey, err := sshserverKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		edit     func(*connector.SFTPOptions)
		wantText []string
	}{
		{
			name:     "host key mismatch",
			edit:     func(o *connector.SFTPOptions) { o.HostKey = otherKey },
			wantText: []string{"host_key", "SHA256:"},
		},
		{
			name:     "wrong password",
			edit:     func(o *connector.SFTPOptions) { o.PrivateKey, o.Password = nil, "not-the-password" },
			wantText: []string{"password_secret", srv.User},
		},
		{
			name: "unknown key",
			edit: func(o *connector.SFTPOptions) {
				priv, _, err := sshserverKeyPair()
				if err != nil {
					t.Fatal(err)
				}
				o.PrivateKey = priv
			},
			wantText: []string{"key_secret"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, dir := newSFTP(t, srv, tt.edit)
			err := c.Write(t.Context(), remotePut("x.edi", "x"))
			if !errors.Is(err, connector.ErrRefused) {
				t.Fatalf("Write = %v, want ErrRefused", err)
			}
			for _, w := range tt.wantText {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Write error %q does not name %q", err, w)
				}
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a refused write left %v", entries)
			}
		})
	}
}

// TestSFTPReconnects: with the server down a write fails as unavailable;
// back up, the same connector writes again (it dials anew).
func TestSFTPReconnects(t *testing.T) {
	t.Parallel()
	srv, err := sshserver.Start(t.TempDir())
	if err != nil {
		t.Fatalf("start sshd: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	c, dir := newSFTP(t, srv, nil)
	ctx := t.Context()
	if err := c.Write(ctx, remotePut("one.edi", "1")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, remotePut("two.edi", "2")); !errors.Is(err, connector.ErrUnavailable) {
		t.Fatalf("Write with sshd down = %v, want ErrUnavailable", err)
	}
	if _, err := c.List(ctx); !errors.Is(err, connector.ErrUnavailable) {
		t.Fatalf("List with sshd down = %v, want ErrUnavailable", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, remotePut("two.edi", "2")); err != nil {
		t.Fatalf("Write after sshd is back: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "two.edi")); err != nil || !bytes.Equal(b, []byte("2")) {
		t.Errorf("two.edi = %q, %v", b, err)
	}
}

func TestNewSFTPValidates(t *testing.T) {
	ok := connector.SFTPOptions{Host: "h", User: "u", Password: "p", HostKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"}
	tests := []struct {
		name string
		edit func(*connector.SFTPOptions)
		want string
	}{
		{"no host key", func(o *connector.SFTPOptions) { o.HostKey = "" }, "host_key"},
		{"bad host key", func(o *connector.SFTPOptions) { o.HostKey = "not a key" }, "host_key"},
		{"no credentials", func(o *connector.SFTPOptions) { o.Password = "" }, "password_secret"},
		{"bad private key", func(o *connector.SFTPOptions) { o.PrivateKey = []byte("junk") }, "key_secret"},
		{"no host", func(o *connector.SFTPOptions) { o.Host = "" }, "sftp.host"},
	}
	for _, tt := range tests {
		o := ok
		tt.edit(&o)
		_, err := connector.NewSFTP(o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewSFTP(%s) = %v, want an error naming %q", tt.name, err, tt.want)
		}
	}
	if _, err := connector.NewSFTP(ok); err != nil {
		t.Errorf("NewSFTP(valid) = %v", err)
	}
	o := ok
	o.HostKey = "sftp.example.com " + ok.HostKey // as ssh-keyscan prints it
	if _, err := connector.NewSFTP(o); err != nil {
		t.Errorf("NewSFTP(known_hosts line) = %v", err)
	}
}

// TestSFTPWriteWholeOrNothing: while a write is under way, the final name
// does not exist and List does not show the temporary one; afterwards the
// final name holds the whole document.
func TestSFTPWriteWholeOrNothing(t *testing.T) {
	t.Parallel()
	c, dir := newSFTP(t, sshd(t), nil)
	ctx := t.Context()
	half := strings.Repeat("A", 100_000)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- c.Write(ctx, connector.Put{Name: "in/doc.edi", Body: pr, Size: -1})
	}()
	if _, err := pw.Write([]byte(half)); err != nil { // returns once Write has read it
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "in/doc.edi")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("during the write, Stat(final name) err = %v, want not exist", err)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "in"))
	if len(entries) != 1 || !strings.HasPrefix(entries[0].Name(), ".doc.edi.tmp-") {
		t.Errorf("during the write the directory holds %v, want one .doc.edi.tmp-* file", entries)
	}
	objs, err := c.List(ctx)
	if err != nil || len(objs) != 0 {
		t.Errorf("List during the write = %+v, %v; want nothing", objs, err)
	}
	_, _ = pw.Write([]byte(half))
	_ = pw.Close()
	if err := <-done; err != nil {
		t.Fatalf("Write: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "in/doc.edi"))
	if err != nil || string(b) != half+half {
		t.Errorf("final file has %d bytes, %v; want %d", len(b), err, 2*len(half))
	}
}

// TestSFTPOverwriteWithoutPosixRename: on a server without
// posix-rename@openssh.com a second write of a name replaces the file
// (remove, then rename) and leaves no temporary file.
func TestSFTPOverwriteWithoutPosixRename(t *testing.T) {
	t.Parallel()
	c, dir := newSFTP(t, sshd(t), nil)
	c.WithoutPosixRename()
	for _, body := range []string{"first", "second"} {
		if err := c.Write(t.Context(), remotePut("x.edi", body)); err != nil {
			t.Fatalf("Write(%q): %v", body, err)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %v, want x.edi alone", entries)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "x.edi")); err != nil || string(b) != "second" {
		t.Errorf("x.edi = %q, %v; want %q", b, err, "second")
	}
}

// TestSFTPConcurrentWrites: one connector (one SSH connection) serves
// writes from many goroutines at once.
func TestSFTPConcurrentWrites(t *testing.T) {
	t.Parallel()
	c, dir := newSFTP(t, sshd(t), nil)
	const n = 16
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- c.Write(t.Context(), remotePut(fmt.Sprintf("p%d/doc-%d.edi", i%3, i), strings.Repeat("x", i*1000)))
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Write: %v", err)
		}
	}
	objs, err := c.List(t.Context())
	if err != nil || len(objs) != n {
		t.Fatalf("List = %d objects, %v; want %d", len(objs), err, n)
	}
	for i := range n {
		fi, err := os.Stat(filepath.Join(dir, fmt.Sprintf("p%d/doc-%d.edi", i%3, i)))
		if err != nil || fi.Size() != int64(i*1000) {
			t.Errorf("doc-%d: %v, %v; want %d bytes", i, fi, err, i*1000)
		}
	}
}

func TestSFTPCheckMissingRoot(t *testing.T) {
	t.Parallel()
	c, _ := newSFTP(t, sshd(t), func(o *connector.SFTPOptions) { o.Path += "/missing" })
	err := c.Check(t.Context())
	if !errors.Is(err, connector.ErrRefused) || !strings.Contains(err.Error(), "sftp.path") {
		t.Errorf("Check of a missing root = %v, want ErrRefused naming sftp.path", err)
	}
}

// TestSFTPSilentServerUnavailable: a server that accepts the connection
// and never speaks SSH makes the call fail as unavailable once the dial
// timeout passes.
func TestSFTPSilentServerUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() { // holds what it accepts until the listener closes
		var conns []net.Conn
		for {
			conn, err := ln.Accept()
			if err != nil {
				for _, c := range conns {
					_ = c.Close()
				}
				return
			}
			conns = append(conns, conn)
		}
	}()
	addr := ln.Addr().(*net.TCPAddr)
	_, hostKey, err := sshserverKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	c, err := connector.NewSFTP(connector.SFTPOptions{
		Host: "127.0.0.1", Port: addr.Port, User: "u", Password: "p", HostKey: hostKey, DialTimeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Write(t.Context(), remotePut("x.edi", "x")); !errors.Is(err, connector.ErrUnavailable) {
		t.Errorf("Write to a silent server = %v, want ErrUnavailable", err)
	}
}

// TestSFTPAndS3CloseLeaveNoGoroutine: after Close, nothing a connector
// started (the SSH connection's and the SFTP client's goroutines, the
// HTTP client's connections) is left running. Not parallel: it compares
// the process's goroutines before and after.
func TestSFTPAndS3CloseLeaveNoGoroutine(t *testing.T) {
	srv, gw := sshd(t), s3gw(t)
	ignore := goleak.IgnoreCurrent()
	sc, _ := newSFTP(t, srv, nil)
	s3c, _ := newS3(t, gw, nil)
	for _, d := range []connector.Destination{sc, s3c} {
		if err := d.Write(t.Context(), remotePut("x.edi", "x")); err != nil {
			t.Fatalf("Write: %v", err)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	goleak.VerifyNone(t, ignore)
}
