// Package spool keeps bodies and payloads too large for memory in files
// of a bounded directory: an AS2 request body as it arrives, the payload
// unwrapped from it, an outbound message as it is built.
//
// Each process spools into a directory of its own, created under the
// configured one and locked (flock) for its life; a directory left by a
// process that died (its lock gone) is removed when the next one starts
// under the same parent, and the process removes its own on Close. Every
// File counts its bytes against one budget per Spool, on disk: a write
// that would take the spool past its limit fails with ErrFull and writes
// nothing, and closing a File removes it and gives its bytes back. Close
// every File on every path (defer it: deferred calls run on panics too).
package spool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
)

// ErrFull means a write would take the spool past its limit. Match it
// with errors.Is; the request that met it is refused and may be resent.
var ErrFull = errors.New("spool full")

// dirPrefix names the per-process directories.
const dirPrefix = "edihub-spool-"

// Spool is a bounded directory of temporary files. It is safe for
// concurrent use.
type Spool struct {
	dir  string
	lock *os.File
	max  int64
	used atomic.Int64
}

// New creates this process's spool directory under parent (os.TempDir()
// when empty), holding at most maxBytes bytes in all its files, and
// removes the directories of processes that died under parent.
func New(parent string, maxBytes int64) (*Spool, error) {
	if maxBytes <= 0 {
		return nil, fmt.Errorf("spool: limit %d bytes: want a positive size", maxBytes)
	}
	if parent == "" {
		parent = os.TempDir()
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("spool: create %s: %w", parent, err)
	}
	removeAbandoned(parent)
	dir, err := os.MkdirTemp(parent, dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	lock, err := os.Create(filepath.Join(dir, ".lock"))
	if err == nil {
		err = syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("spool: lock %s: %w", dir, err)
	}
	return &Spool{dir: dir, lock: lock, max: maxBytes}, nil
}

// removeAbandoned removes the spool directories under parent whose
// process is gone (their lock can be taken). Failures are left for the
// next start: they cost disk space, not correctness.
func removeAbandoned(parent string) {
	entries, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), dirPrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		f, err := os.Open(filepath.Join(dir, ".lock"))
		if err != nil {
			continue // being created, or not ours
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			os.RemoveAll(dir)
		}
		f.Close()
	}
}

// Dir is this process's spool directory.
func (s *Spool) Dir() string { return s.dir }

// Limit is the most bytes the spool holds.
func (s *Spool) Limit() int64 { return s.max }

// Used is the bytes the spool's open files hold now.
func (s *Spool) Used() int64 { return s.used.Load() }

// Fits reports whether n more bytes fit now (a request's Content-Length,
// checked before its body is read).
func (s *Spool) Fits(n int64) bool { return s.used.Load()+n <= s.max }

// Close removes the spool directory and every file still in it.
func (s *Spool) Close() error {
	err := os.RemoveAll(s.dir)
	s.lock.Close()
	return err
}

// Create returns a new, empty file in the spool.
func (s *Spool) Create() (*File, error) {
	f, err := os.CreateTemp(s.dir, "f-")
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	return &File{f: f, s: s}, nil
}

// File is a spooled file: written once, from the start, then read any
// number of times. It is not safe for concurrent writes.
type File struct {
	f    *os.File
	s    *Spool
	size int64
}

// Write appends p, or nothing and ErrFull when p would take the spool
// past its limit.
func (f *File) Write(p []byte) (int, error) {
	n := int64(len(p))
	if f.s.used.Add(n) > f.s.max {
		f.s.used.Add(-n)
		return 0, fmt.Errorf("%w: %d of %d bytes in use; raise EDIHUB_SPOOL_MAX_BYTES or wait for messages in flight to finish", ErrFull, f.s.used.Load(), f.s.max)
	}
	w, err := f.f.Write(p)
	f.size += int64(w)
	f.s.used.Add(int64(w) - n)
	return w, err
}

// Size is the bytes written.
func (f *File) Size() int64 { return f.size }

// Reader reads the file from its start; each call an independent reader.
func (f *File) Reader() io.Reader { return io.NewSectionReader(f.f, 0, f.size) }

// Open returns the bytes written as a read-only *os.File of its own,
// from the start: a body net/http posts with sendfile(2), without
// copying it through the process. The caller closes it; removing the
// spool file (Close) does not disturb it.
func (f *File) Open() (*os.File, error) {
	if f.f == nil {
		return nil, os.ErrClosed
	}
	return os.Open(f.f.Name())
}

// ReadAt reads the bytes written from off (io.ReaderAt); safe for
// concurrent use.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	return io.NewSectionReader(f.f, 0, f.size).ReadAt(p, off)
}

// Close removes the file and gives its bytes back to the spool. It is
// safe to call more than once.
func (f *File) Close() error {
	if f.f == nil {
		return nil
	}
	name := f.f.Name()
	err := f.f.Close()
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	f.s.used.Add(-f.size)
	f.f, f.size = nil, 0
	return err
}
