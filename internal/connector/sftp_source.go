package connector

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/pkg/sftp"
)

// remoteMarkerSuffix ends the name of a marker file: a writer that creates
// NAME.done after NAME says NAME is complete (a source's "stable: marker").
const remoteMarkerSuffix = ".done"

// remoteListed sorts one relative path of a source: a file to list, a marker
// (returned as the path it marks), or neither (a dot name: a writer's
// temporary file, or inside the archive directory).
func remoteListed(rel, archive string) (file, marked string) {
	if archive != "" {
		a := strings.Trim(archive, "/") + "/"
		if strings.HasPrefix(rel+"/", a) {
			return "", ""
		}
	}
	for _, part := range strings.Split(rel, "/") {
		if strings.HasPrefix(part, ".") {
			return "", ""
		}
	}
	if m, ok := strings.CutSuffix(rel, remoteMarkerSuffix); ok && m != "" && !strings.HasSuffix(m, "/") {
		return "", m
	}
	return rel, ""
}

// remoteArchivePath resolves a source's archive path for o: to ending in "/"
// is a directory the file keeps its relative path under; else it is the
// file's new name.
func remoteArchivePath(o Object, to string) string {
	if strings.HasSuffix(to, "/") {
		return to + o.Path
	}
	return to
}

// List returns the files under the root, recursively, leaving out the
// Archive directory, dot names (a writer's temporary files, ours
// included) and markers (NAME.done; see ListMarkers).
func (s *SFTP) List(ctx context.Context) ([]Object, error) {
	objs, _, err := s.ListMarkers(ctx)
	return objs, err
}

// ListMarkers is List, and also the set of listed paths whose marker
// (NAME.done) is present, for a source that waits for markers.
func (s *SFTP) ListMarkers(ctx context.Context) ([]Object, map[string]bool, error) {
	root := s.opts.Path
	if root == "" {
		root = "."
	}
	var objs []Object
	done := map[string]bool{}
	err := s.do(ctx, func(c *sftp.Client) error {
		objs, done = nil, map[string]bool{}
		w := c.Walk(root)
		for w.Step() {
			if err := w.Err(); err != nil {
				if w.Path() == root {
					return s.classify("list", root, err)
				}
				continue // removed while listing
			}
			if w.Path() == root {
				continue
			}
			rel := strings.TrimPrefix(strings.TrimPrefix(w.Path(), root), "/")
			if root == "." {
				rel = strings.TrimPrefix(w.Path(), "./")
			}
			fi := w.Stat()
			file, marked := remoteListed(rel, s.opts.Archive)
			switch {
			case fi.IsDir():
				if file == "" && marked == "" {
					w.SkipDir()
				}
			case !fi.Mode().IsRegular():
			case marked != "":
				done[marked] = true
			case file != "":
				objs = append(objs, Object{Path: file, Size: fi.Size(), ModTime: fi.ModTime()})
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return objs, done, nil
}

// Open reads o from its start. The context bounds the whole read: when it
// ends, reading fails.
func (s *SFTP) Open(ctx context.Context, o Object) (io.ReadCloser, error) {
	p, err := s.full(o.Path)
	if err != nil {
		return nil, err
	}
	c, err := s.dial(ctx)
	if err != nil {
		return nil, err
	}
	f, err := c.Open(p)
	if err != nil {
		err = s.classify("open", p, err)
		if errors.Is(err, ErrUnavailable) {
			s.drop(c)
		}
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { _ = f.Close() })
	return &sftpReader{f: f, stop: stop, s: s, p: p}, nil
}

type sftpReader struct {
	f    *sftp.File
	stop func() bool
	s    *SFTP
	p    string
}

func (r *sftpReader) Read(b []byte) (int, error) {
	n, err := r.f.Read(b)
	if err != nil && err != io.EOF {
		err = r.s.classify("read", r.p, err)
	}
	return n, err
}

// WriteTo lets io.Copy use pkg/sftp's concurrent reads.
func (r *sftpReader) WriteTo(w io.Writer) (int64, error) {
	n, err := r.f.WriteTo(w)
	if err != nil {
		err = r.s.classify("read", r.p, err)
	}
	return n, err
}

func (r *sftpReader) Close() error {
	r.stop()
	if err := r.f.Close(); err != nil && !errors.Is(err, fs.ErrClosed) && !strings.Contains(err.Error(), "closed") {
		return r.s.classify("close", r.p, err)
	}
	return nil
}

// Archive moves o to the archive path to (see remoteArchivePath), creating
// directories, replacing a file of that name; with to empty it removes o.
// Its marker (NAME.done), if any, is removed too. A file already gone is
// not an error.
func (s *SFTP) Archive(ctx context.Context, o Object, to string) error {
	from, err := s.full(o.Path)
	if err != nil {
		return err
	}
	target := ""
	if to != "" {
		if target, err = s.full(remoteArchivePath(o, to)); err != nil {
			return err
		}
	}
	return s.do(ctx, func(c *sftp.Client) error {
		if target == "" {
			if err := c.Remove(from); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return s.classify("remove", from, err)
			}
		} else {
			if err := c.MkdirAll(path.Dir(target)); err != nil {
				return s.classify("mkdir", path.Dir(target), err)
			}
			if _, err := c.Lstat(from); errors.Is(err, fs.ErrNotExist) {
				return s.removeMarker(c, from)
			}
			if err := s.rename(c, from, target); err != nil {
				return fmt.Errorf("archive %s to %s: %w", o.Path, to, err)
			}
		}
		return s.removeMarker(c, from)
	})
}

func (s *SFTP) removeMarker(c *sftp.Client, from string) error {
	if err := c.Remove(from + remoteMarkerSuffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s.classify("remove", from+remoteMarkerSuffix, err)
	}
	return nil
}
