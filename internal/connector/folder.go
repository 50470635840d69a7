package connector

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"
)

// DefaultMaxList bounds the files one Folder.List returns (the first in
// lexical order); the rest are listed once those are archived.
const DefaultMaxList = 10000

// FolderOptions configure NewFolder.
type FolderOptions struct {
	// Name names the connector in errors.
	Name string
	// Base is the operator's folders directory (EDIHUB_FOLDERS_DIR):
	// every folder connector lives below it, and nothing it does reaches
	// outside it.
	Base string
	// Path is the connector's folder (folder.path), relative to Base,
	// with forward slashes; no absolute path and no "..".
	Path string
	// Archive is the directory, relative to the folder, that List leaves
	// out: a source's archive ("archive/"); empty when there is none.
	Archive string
	// MaxList bounds the files one List returns (DefaultMaxList).
	MaxList int
	// FileMode is the permission of written files (0o644) before the
	// process's umask; directories get it with the execute bits added.
	FileMode fs.FileMode
}

// Folder is a directory on a mounted volume (a PVC, an NFS or SMB share),
// as a Destination and as a Source. Every path is resolved through an
// os.Root opened on the folder, so neither a name with "..", an absolute
// name nor a symbolic link inside the folder leads outside it: such a
// write is refused with ErrRefused.
//
// The folder is opened anew for each call, so a volume mounted after the
// connector was applied, or remounted, is used without a restart. Folder
// is safe for concurrent use; Close is a no-op.
type Folder struct {
	o       FolderOptions
	path    string // o.Path, cleaned, in the OS's form
	archive string // o.Archive, cleaned; "" when none
}

// NewFolder validates o: Base must be set and Path (and Archive) must be
// relative without "..". It does not touch the disk; Check does.
func NewFolder(o FolderOptions) (*Folder, error) {
	if o.Base == "" {
		return nil, fmt.Errorf("folder connector %s: EDIHUB_FOLDERS_DIR is not set; set it to the directory the folder connectors live under (a mounted volume)", o.Name)
	}
	p := path.Clean(o.Path)
	if o.Path == "" || !filepath.IsLocal(filepath.FromSlash(p)) {
		return nil, fmt.Errorf("folder connector %s: folder.path %q must be a directory relative to EDIHUB_FOLDERS_DIR, without .. and not absolute (for example erp/inbox)", o.Name, o.Path)
	}
	f := &Folder{o: o, path: filepath.FromSlash(p)}
	if o.Archive != "" {
		a := path.Clean(o.Archive)
		if a == "." || !filepath.IsLocal(filepath.FromSlash(a)) {
			return nil, fmt.Errorf("folder connector %s: archive %q must be a directory relative to the folder, without .. and not absolute (for example archive/)", o.Name, o.Archive)
		}
		f.archive = a
	}
	if f.o.MaxList <= 0 {
		f.o.MaxList = DefaultMaxList
	}
	if f.o.FileMode == 0 {
		f.o.FileMode = 0o644
	}
	return f, nil
}

// root opens the folder. A missing folder is ErrRefused with the fix.
func (f *Folder) root() (*os.Root, error) {
	base, err := os.OpenRoot(f.o.Base)
	if err != nil {
		return nil, fmt.Errorf("%w: folder connector %s: EDIHUB_FOLDERS_DIR %s cannot be opened (mount the volume there or fix the setting): %w", ErrRefused, f.o.Name, f.o.Base, err)
	}
	defer base.Close()
	r, err := base.OpenRoot(f.path)
	if err != nil {
		return nil, fmt.Errorf("%w: folder connector %s: folder.path %s cannot be opened below EDIHUB_FOLDERS_DIR (create the directory, or fix folder.path; a symbolic link must not lead outside EDIHUB_FOLDERS_DIR): %w", ErrRefused, f.o.Name, filepath.ToSlash(f.path), err)
	}
	return r, nil
}

// Write stores p.Body under p.Name: it writes ".NAME.tmp-RANDOM" in the
// target directory (created as needed), syncs it, renames it over NAME
// and syncs the directory, so a reader sees no file or the whole one and
// a crash after Write returned keeps the file. When p.Size is not -1 and
// the body's length differs, nothing is written. On any failure, and
// when ctx ends, the temporary file is removed.
func (f *Folder) Write(ctx context.Context, p Put) error {
	if err := localName(p.Name); err != nil {
		return fmt.Errorf("%w: folder connector %s: %w", ErrRefused, f.o.Name, err)
	}
	r, err := f.root()
	if err != nil {
		return err
	}
	defer r.Close()
	dir, base := path.Split(p.Name)
	dir = path.Clean(dir)
	if dir != "." {
		if err := r.MkdirAll(dir, f.o.FileMode|0o111); err != nil {
			return f.classify("create directory "+dir, err)
		}
	}
	tmp := path.Join(dir, "."+base+".tmp-"+randomHex())
	if err := f.writeTemp(ctx, r, tmp, p); err != nil {
		_ = r.Remove(tmp)
		return err
	}
	if err := r.Rename(tmp, p.Name); err != nil {
		_ = r.Remove(tmp)
		return f.classify("rename to "+p.Name, err)
	}
	if err := syncDir(r, dir); err != nil {
		return f.classify("sync directory "+dir, err)
	}
	return nil
}

// writeTemp writes p.Body to the new file tmp and syncs it.
func (f *Folder) writeTemp(ctx context.Context, r *os.Root, tmp string, p Put) error {
	file, err := r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.o.FileMode)
	if err != nil {
		return f.classify("create "+tmp, err)
	}
	n, err := io.CopyBuffer(file, ctxReader{ctx: ctx, r: p.Body}, make([]byte, 256<<10))
	if err == nil && p.Size >= 0 && n != p.Size {
		err = fmt.Errorf("%w: body has %d bytes, want %d", ErrUnavailable, n, p.Size)
	}
	if err == nil {
		err = file.Sync()
	}
	if cerr := file.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return f.classify("write "+p.Name, err)
	}
	return nil
}

// Check opens the folder, lists it and creates and removes a hidden file
// in it: the folder is there and the process may list and write it.
func (f *Folder) Check(ctx context.Context) error {
	r, err := f.root()
	if err != nil {
		return err
	}
	defer r.Close()
	if _, err := fs.ReadDir(r.FS(), "."); err != nil {
		return f.classify("list", err)
	}
	name := ".edihub-check-" + randomHex()
	file, err := r.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, f.o.FileMode)
	if err != nil {
		return f.classify("create a test file", err)
	}
	err = file.Close()
	if rerr := r.Remove(name); err == nil {
		err = rerr
	}
	if err != nil {
		return f.classify("remove the test file "+name, err)
	}
	return ctx.Err()
}

// Close does nothing: the folder is opened per call.
func (f *Folder) Close() error { return nil }

// localName refuses a name that is not a clean relative slash path.
func localName(name string) error {
	if name == "" || path.Clean(name) != name || !filepath.IsLocal(filepath.FromSlash(name)) {
		return fmt.Errorf("name %q is not a clean relative path", name)
	}
	return nil
}

func syncDir(r *os.Root, dir string) error {
	d, err := r.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func randomHex() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// ctxReader stops a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// classify wraps err with the sentinel that says what to do about it.
func (f *Folder) classify(op string, err error) error {
	var class error
	switch {
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrRefused), errors.Is(err, ErrNotFound):
		return fmt.Errorf("folder connector %s: %s: %w", f.o.Name, op, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		class = ErrUnavailable
	case errors.Is(err, fs.ErrNotExist):
		class = ErrNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return fmt.Errorf("%w: folder connector %s: %s: give edihub's user write access to folder.path %s: %w",
			ErrRefused, f.o.Name, op, filepath.ToSlash(f.path), err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EIO),
		errors.Is(err, syscall.ESTALE), errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EBUSY),
		errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, syscall.EINTR), errors.Is(err, syscall.ENOTCONN),
		errors.Is(err, syscall.EHOSTDOWN):
		class = ErrUnavailable
	default:
		// A symbolic link out of the folder, a file where a directory
		// should be, a name too long: a person has to look.
		class = ErrRefused
	}
	return fmt.Errorf("%w: folder connector %s: %s: %w", class, f.o.Name, op, err)
}
