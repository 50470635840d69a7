package connectors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/connector"
)

// ErrUnknown reports a destination or source name the document in force
// does not define (removed or renamed after work for it was queued).
var ErrUnknown = errors.New("connectors: no such entry in the connectors document")

// Runtime turns the document a replica serves into working connectors:
// the connector.Destination or connector.Source an entry describes is
// built when first asked for and kept while the entry stays as it is; a
// revision that changes or removes the entry closes it, and the next use
// builds the new one. Secrets are read from the secrets directory at
// build time, so a rotated secret is taken with the next change of the
// entry, or at the next start.
//
// A write in flight on a connector a revision closes fails, and is
// retried by the outbox under the same name. Runtime is safe for
// concurrent use.
type Runtime struct {
	current                func() *Snapshot
	secretsDir, foldersDir string
	log                    *zap.Logger

	mu    sync.Mutex
	built map[string]*builtEntry // "d/NAME" or "s/NAME"
}

// builtEntry is one connector built from one version of its entry.
type builtEntry struct {
	spec string // the entry as JSON: a change of any field rebuilds
	dest connector.Destination
	src  connector.Source
	opts connector.DeliverOptions
}

// NewRuntime builds connectors from the snapshots current returns (a
// Live's Current), with this replica's directories.
func NewRuntime(current func() *Snapshot, secretsDir, foldersDir string, log *zap.Logger) *Runtime {
	return &Runtime{current: current, secretsDir: secretsDir, foldersDir: foldersDir, log: log, built: map[string]*builtEntry{}}
}

// Route names the inbound route a received document takes and its
// destinations (first match wins); "" and none when no route takes it.
func (r *Runtime) Route(doc connector.Document) (string, []string) {
	return r.current().Connectors.DestinationsFor(doc)
}

// Destination returns the destination configured under name and how
// documents are written there (outbox.Destinations).
func (r *Runtime) Destination(name string) (connector.Destination, connector.DeliverOptions, error) {
	d, ok := r.current().Connectors.Destination(name)
	if !ok {
		return nil, connector.DeliverOptions{}, fmt.Errorf("%w: destination %q", ErrUnknown, name)
	}
	b, err := r.entry("d/"+name, d, func() (*builtEntry, error) { return r.buildDestination(d) })
	if err != nil {
		return nil, connector.DeliverOptions{}, err
	}
	return b.dest, b.opts, nil
}

// Source returns the source configured under name.
func (r *Runtime) Source(name string) (connector.Source, error) {
	s, ok := r.current().Connectors.Source(name)
	if !ok {
		return nil, fmt.Errorf("%w: source %q", ErrUnknown, name)
	}
	b, err := r.entry("s/"+name, s, func() (*builtEntry, error) { return r.buildSource(s) })
	if err != nil {
		return nil, err
	}
	return b.src, nil
}

// entry returns the connector built for spec under key, building it (and
// closing the one built from an earlier version of the entry) when spec
// changed.
func (r *Runtime) entry(key string, spec any, build func() (*builtEntry, error)) (*builtEntry, error) {
	js, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.built[key]; ok {
		if b.spec == string(js) {
			return b, nil
		}
		delete(r.built, key)
		r.close(key, b)
	}
	b, err := build()
	if err != nil {
		return nil, err
	}
	b.spec = string(js)
	r.built[key] = b
	return b, nil
}

func (r *Runtime) close(key string, b *builtEntry) {
	var err error
	if b.dest != nil {
		err = b.dest.Close()
	} else if b.src != nil {
		err = b.src.Close()
	}
	if err != nil {
		r.log.Warn("close a connector the connectors document changed", zap.String("entry", key), zap.Error(err))
	}
}

// Close closes every connector built.
func (r *Runtime) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, b := range r.built {
		r.close(k, b)
		delete(r.built, k)
	}
	return nil
}

func (r *Runtime) buildDestination(d config.Destination) (*builtEntry, error) {
	opts := connector.DeliverOptions{Sidecar: d.Sidecar, DoneMarker: d.DoneMarker}
	if d.FileName != "" {
		t, err := connector.ParseTemplate(d.FileName)
		if err != nil {
			return nil, fmt.Errorf("destination %q: file_name: %w", d.Name, err)
		}
		opts.Template = t
	}
	var dest connector.Destination
	var err error
	switch {
	case d.HTTP != nil:
		var secret []byte
		if secret, err = r.secret(d.Name, "http.secret", d.HTTP.Secret); err == nil {
			dest, err = connector.NewHTTP(connector.HTTPOptions{Name: d.Name, URL: d.HTTP.URL, Secret: secret})
		}
	default:
		var c interface {
			connector.Destination
			connector.Source
		}
		c, err = r.build(d.Name, d.Folder, d.SFTP, d.S3, "")
		dest = c
	}
	if err != nil {
		return nil, err
	}
	return &builtEntry{dest: dest, opts: opts}, nil
}

func (r *Runtime) buildSource(s config.PickupSource) (*builtEntry, error) {
	archive := s.Archive
	if s.After == config.AfterDelete {
		archive = ""
	}
	c, err := r.build(s.Name, s.Folder, s.SFTP, s.S3, archive)
	if err != nil {
		return nil, err
	}
	return &builtEntry{src: c}, nil
}

// build makes the folder, SFTP or S3 connector of an entry; archive is
// the directory its listing leaves out.
func (r *Runtime) build(name string, f *config.FolderSpec, sf *config.SFTPSpec, s3 *config.S3Spec, archive string) (interface {
	connector.Destination
	connector.Source
}, error) {
	switch {
	case f != nil:
		return connector.NewFolder(connector.FolderOptions{Name: name, Base: r.foldersDir, Path: f.Path, Archive: archive})
	case sf != nil:
		o := connector.SFTPOptions{Host: sf.Host, Port: sf.Port, User: sf.User, HostKey: sf.HostKey, Path: sf.Path, Archive: archive}
		if sf.PasswordSecret != "" {
			p, err := r.secret(name, "sftp.password_secret", sf.PasswordSecret)
			if err != nil {
				return nil, err
			}
			o.Password = strings.TrimRight(string(p), "\r\n")
		}
		if sf.KeySecret != "" {
			k, err := r.secret(name, "sftp.key_secret", sf.KeySecret)
			if err != nil {
				return nil, err
			}
			o.PrivateKey = k
		}
		return connector.NewSFTP(o)
	case s3 != nil:
		o := connector.S3Options{Endpoint: s3.Endpoint, Region: s3.Region, Bucket: s3.Bucket, Prefix: s3.Prefix, PathStyle: s3.PathStyle, Archive: archive}
		if s3.AccessKeySecret != "" {
			id, err := r.secret(name, "s3.access_key_secret", s3.AccessKeySecret)
			if err != nil {
				return nil, err
			}
			key, err := r.secret(name, "s3.secret_key_secret", s3.SecretKeySecret)
			if err != nil {
				return nil, err
			}
			o.AccessKey, o.SecretKey = strings.TrimSpace(string(id)), strings.TrimSpace(string(key))
		}
		return connector.NewS3(o)
	}
	return nil, fmt.Errorf("connector %q: no folder, sftp or s3 block", name)
}

// secret reads the secret named ref from the secrets directory, through
// an os.Root: no name leads out of it. The message names the entry, the
// field and the setting, never the file system's error.
func (r *Runtime) secret(entry, field, ref string) ([]byte, error) {
	if r.secretsDir == "" {
		return nil, fmt.Errorf("%w: connector %q: %s %q: no secrets directory is set on this replica (EDIHUB_SECRETS_DIR)", connector.ErrRefused, entry, field, ref)
	}
	root, err := os.OpenRoot(r.secretsDir)
	if err == nil {
		defer root.Close()
		var b []byte
		if b, err = root.ReadFile(ref); err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w: connector %q: %s %q: not readable in the secrets directory (EDIHUB_SECRETS_DIR); put a file of that name there on every replica", connector.ErrRefused, entry, field, ref)
}
