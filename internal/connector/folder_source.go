package connector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
)

// List walks the folder in lexical order and returns its regular files,
// at most MaxList of them. It leaves out the archive directory, hidden
// files and directories (Hidden: writers' temporary names), done markers
// (IsMarker), symbolic links and other special files. A file removed
// while the walk runs is left out rather than failing the list.
func (f *Folder) List(ctx context.Context) ([]Object, error) {
	r, err := f.root()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var objs []Object
	full := errors.New("list is full")
	err = fs.WalkDir(r.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p != "." && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		if d.IsDir() {
			if p == f.archive || Hidden(d.Name()) {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || Hidden(d.Name()) || IsMarker(p) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(objs) == f.o.MaxList {
			return full
		}
		objs = append(objs, Object{Path: p, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil && !errors.Is(err, full) {
		return nil, f.classify("list", err)
	}
	return objs, nil
}

// Open opens the file at o.Path for reading; ErrNotFound when it is gone.
func (f *Folder) Open(ctx context.Context, o Object) (io.ReadCloser, error) {
	if err := localName(o.Path); err != nil {
		return nil, fmt.Errorf("%w: folder connector %s: %w", ErrRefused, f.o.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, f.classify("open "+o.Path, err)
	}
	r, err := f.root()
	if err != nil {
		return nil, err
	}
	defer r.Close() // an open file outlives its Root
	file, err := r.Open(o.Path)
	if err != nil {
		return nil, f.classify("open "+o.Path, err)
	}
	info, err := file.Stat()
	if err == nil && !info.Mode().IsRegular() {
		err = fmt.Errorf("%w: %s is not a regular file", ErrRefused, o.Path)
	}
	if err != nil {
		file.Close()
		return nil, f.classify("open "+o.Path, err)
	}
	return file, nil
}

// Archive moves the file at o.Path into the directory to (see
// Source.Archive and ArchiveName), creating directories as needed and
// syncing the directory it left, or removes it when to is empty. A file
// that is gone, or whose size or modification time (when o has one) no
// longer match o, is the one an earlier Archive moved, replaced since by
// a new file of the same name: Archive leaves it and returns nil.
func (f *Folder) Archive(ctx context.Context, o Object, to string) error {
	if err := localName(o.Path); err != nil {
		return fmt.Errorf("%w: folder connector %s: %w", ErrRefused, f.o.Name, err)
	}
	if to != "" {
		if err := localName(path.Clean(to)); err != nil {
			return fmt.Errorf("%w: folder connector %s: archive: %w", ErrRefused, f.o.Name, err)
		}
		to = path.Clean(to)
	}
	if err := ctx.Err(); err != nil {
		return f.classify("archive "+o.Path, err)
	}
	r, err := f.root()
	if err != nil {
		return err
	}
	defer r.Close()
	info, err := r.Lstat(o.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return f.classify("archive "+o.Path, err)
	}
	if info.Size() != o.Size || !o.ModTime.IsZero() && !info.ModTime().Equal(o.ModTime) {
		return nil
	}
	if to == "" {
		if err := r.Remove(o.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return f.classify("remove "+o.Path, err)
		}
		return f.syncParent(r, o.Path)
	}
	target, err := freeName(r, to, o.Path)
	if err != nil {
		return f.classify("archive "+o.Path, err)
	}
	if dir := path.Dir(target); dir != "." {
		if err := r.MkdirAll(dir, f.o.FileMode|0o111); err != nil {
			return f.classify("create directory "+dir, err)
		}
	}
	if err := r.Rename(o.Path, target); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return f.classify("move "+o.Path+" to "+target, err)
	}
	if err := syncDir(r, path.Dir(target)); err != nil {
		return f.classify("sync directory "+path.Dir(target), err)
	}
	return f.syncParent(r, o.Path)
}

func (f *Folder) syncParent(r *os.Root, p string) error {
	if err := syncDir(r, path.Dir(p)); err != nil {
		return f.classify("sync directory "+path.Dir(p), err)
	}
	return nil
}

// maxArchiveSuffix bounds the search for a free archive name.
const maxArchiveSuffix = 10000

// freeName returns the first ArchiveName(to, p, n) nothing is at.
func freeName(r *os.Root, to, p string) (string, error) {
	for n := range maxArchiveSuffix {
		name := ArchiveName(to, p, n)
		_, err := r.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return name, nil
		}
		if err != nil {
			return "", err
		}
	}
	return "", fmt.Errorf("%w: %d files named %s in the archive already; clear the archive", ErrRefused, maxArchiveSuffix, path.Join(to, p))
}
