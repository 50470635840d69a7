package connector

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// SFTPOptions configure an SFTP destination or source.
type SFTPOptions struct {
	Host string
	Port int // 22 when zero
	User string
	// Password and PrivateKey (an OpenSSH or PEM private key) are the
	// credentials; at least one is required. With both, the key is tried
	// first.
	Password   string
	PrivateKey []byte
	// HostKey pins the server's host key: an authorized_keys line
	// ("ssh-ed25519 AAAA...") or a known_hosts line as ssh-keyscan prints
	// it ("host ssh-ed25519 AAAA..."). Required: a server presenting any
	// other key is refused.
	HostKey string
	// Path is the root directory on the server that names are relative
	// to; empty is the login directory.
	Path string
	// Archive is the directory, relative to Path, that List leaves out
	// (where a source's taken files are moved); empty leaves out nothing.
	Archive string
	// DialTimeout bounds connecting and the SSH handshake; 15 s when zero.
	DialTimeout time.Duration
}

// SFTP is a Destination and a Source on an SFTP server. It keeps one SSH
// connection, shared by concurrent calls, and dials again on the next call
// after the connection broke.
//
// A call whose context ends while it waits on the server closes the shared
// connection, so the call returns at once; other calls in flight on it fail
// with ErrUnavailable and the next call dials again.
type SFTP struct {
	opts    SFTPOptions
	addr    string
	hostKey ssh.PublicKey
	auth    []ssh.AuthMethod

	mu     sync.Mutex
	conn   *ssh.Client
	client *sftp.Client
	closed bool

	// noPosixRename makes rename act as on a server without
	// posix-rename@openssh.com (tests of that path).
	noPosixRename bool
}

var _ interface {
	Destination
	Source
} = (*SFTP)(nil)

// sftpPosixRename is the OpenSSH extension that renames over an existing file
// in one step (rename(2)); plain SFTP rename fails when the target exists.
const sftpPosixRename = "posix-rename@openssh.com"

// NewSFTP validates o and returns an SFTP connector; it connects on first
// use.
func NewSFTP(o SFTPOptions) (*SFTP, error) {
	if o.Host == "" {
		return nil, errors.New("sftp: host is empty: set the connector's sftp.host")
	}
	if o.User == "" {
		return nil, errors.New("sftp: user is empty: set the connector's sftp.user")
	}
	if o.Port == 0 {
		o.Port = 22
	}
	if o.Port < 0 || o.Port > 65535 {
		return nil, fmt.Errorf("sftp: port %d out of range: set sftp.port to 1-65535", o.Port)
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = 15 * time.Second
	}
	key, err := sftpParseHostKey(o.HostKey)
	if err != nil {
		return nil, err
	}
	s := &SFTP{opts: o, addr: net.JoinHostPort(o.Host, strconv.Itoa(o.Port)), hostKey: key}
	if len(o.PrivateKey) > 0 {
		signer, err := ssh.ParsePrivateKey(o.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("sftp: the private key of key_secret does not parse (an unencrypted OpenSSH or PEM key is needed): %w", err)
		}
		s.auth = append(s.auth, ssh.PublicKeys(signer))
	}
	if o.Password != "" {
		s.auth = append(s.auth, ssh.Password(o.Password))
	}
	if len(s.auth) == 0 {
		return nil, errors.New("sftp: no credentials: set sftp.password_secret or sftp.key_secret")
	}
	return s, nil
}

func sftpParseHostKey(line string) (ssh.PublicKey, error) {
	line = strings.TrimSpace(line)
	if line == "" {
		return nil, errors.New("sftp: host_key is empty: pin the server's key (ssh-keyscan -t ed25519 -p PORT HOST prints it)")
	}
	if key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err == nil {
		return key, nil
	}
	if _, _, key, _, _, err := ssh.ParseKnownHosts([]byte(line)); err == nil {
		return key, nil
	}
	return nil, fmt.Errorf("sftp: host_key %q is not a public key line (\"ssh-ed25519 AAAA...\", as ssh-keyscan prints it)", sftpAbbreviate(line))
}

func sftpAbbreviate(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// dial returns the shared client, connecting when there is none.
func (s *SFTP) dial(ctx context.Context) (*sftp.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("sftp: connector closed")
	}
	if s.client != nil {
		return s.client, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.DialTimeout)
	defer cancel()
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", s.addr)
	if err != nil {
		return nil, fmt.Errorf("%w: sftp: connect to %s: %w", ErrUnavailable, s.addr, err)
	}
	// The handshake has no context: the connection's deadline bounds it.
	if dl, ok := ctx.Deadline(); ok {
		_ = raw.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Now()) })
	var mismatch error
	cfg := &ssh.ClientConfig{
		User:              s.opts.User,
		Auth:              s.auth,
		HostKeyAlgorithms: sftpHostKeyAlgorithms(s.hostKey),
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if bytes.Equal(key.Marshal(), s.hostKey.Marshal()) {
				return nil
			}
			mismatch = fmt.Errorf("%w: sftp: %s presented host key %s %s, host_key pins %s %s: if the server's key changed, check with its operator and set host_key to the new key",
				ErrRefused, s.addr, key.Type(), ssh.FingerprintSHA256(key), s.hostKey.Type(), ssh.FingerprintSHA256(s.hostKey))
			return mismatch
		},
	}
	c, chans, reqs, err := ssh.NewClientConn(raw, s.addr, cfg)
	stop()
	if err != nil {
		_ = raw.Close()
		switch {
		case mismatch != nil:
			return nil, mismatch
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, fmt.Errorf("%w: sftp: %s refused user %q's credentials: check sftp.user, password_secret and key_secret: %w", ErrRefused, s.addr, s.opts.User, err)
		}
		return nil, fmt.Errorf("%w: sftp: SSH handshake with %s: %w", ErrUnavailable, s.addr, err)
	}
	_ = raw.SetDeadline(time.Time{})
	conn := ssh.NewClient(c, chans, reqs)
	client, err := sftp.NewClient(conn, sftp.UseConcurrentWrites(true))
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("%w: sftp: start the SFTP subsystem on %s (is SFTP enabled for %q?): %w", ErrUnavailable, s.addr, s.opts.User, err)
	}
	s.conn, s.client = conn, client
	return client, nil
}

func sftpHostKeyAlgorithms(k ssh.PublicKey) []string {
	if k.Type() == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{k.Type()}
}

// drop closes c's connection if it is still the shared one, so the next
// call dials again.
func (s *SFTP) drop(c *sftp.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != c || c == nil {
		return
	}
	_ = s.client.Close()
	_ = s.conn.Close()
	s.client, s.conn = nil, nil
}

// do runs op on the shared client. A context ending during op closes the
// connection (pkg/sftp calls have no context); a broken connection is
// dropped so the next call dials again.
func (s *SFTP) do(ctx context.Context, op func(c *sftp.Client) error) error {
	c, err := s.dial(ctx)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { s.drop(c) })
	err = op(c)
	if !stop() && err != nil {
		err = fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
	}
	if err != nil && errors.Is(err, ErrUnavailable) {
		s.drop(c)
	}
	return err
}

// classify wraps err from an SFTP call on p with the sentinel that fits.
func (s *SFTP) classify(op, p string, err error) error {
	var status *sftp.StatusError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrRefused), errors.Is(err, ErrNotFound):
		return err
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: sftp %s %s on %s: %w", ErrNotFound, op, p, s.addr, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: sftp %s %s on %s: permission denied for user %q: %w", ErrRefused, op, p, s.addr, s.opts.User, err)
	case errors.As(err, &status) && status.FxCode() == sftp.ErrSSHFxOpUnsupported:
		return fmt.Errorf("%w: sftp %s %s on %s: the server does not support it: %w", ErrRefused, op, p, s.addr, err)
	}
	return fmt.Errorf("%w: sftp %s %s on %s: %w", ErrUnavailable, op, p, s.addr, err)
}

// full maps a name relative to the root to the server's path.
func (s *SFTP) full(name string) (string, error) {
	clean, err := remoteRelName(name)
	if err != nil {
		return "", err
	}
	if s.opts.Path == "" {
		return clean, nil
	}
	return path.Join(s.opts.Path, clean), nil
}

// remoteRelName checks a name relative to a root: forward slashes, no
// absolute path, no "..", not empty.
func remoteRelName(name string) (string, error) {
	clean := path.Clean(strings.TrimPrefix(name, "./"))
	if name == "" || clean == "." || path.IsAbs(name) || clean == ".." || strings.HasPrefix(clean, "../") || strings.Contains(name, "\\") {
		return "", fmt.Errorf("%w: name %q is not a relative path inside the root", ErrRefused, name)
	}
	return clean, nil
}

// remoteTempName is a name beside final that List leaves out (a dot name).
func remoteTempName(final string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	dir, base := path.Split(final)
	return dir + "." + base + ".tmp-" + hex.EncodeToString(b[:])
}

// Write stores p under p.Name, whole or not at all: it writes a temporary
// name beside it and renames it into place (posix-rename@openssh.com where
// the server offers it: one step; else remove, then rename, where a reader
// can see the name missing for a moment but never a partial file).
func (s *SFTP) Write(ctx context.Context, p Put) error {
	final, err := s.full(p.Name)
	if err != nil {
		return err
	}
	return s.do(ctx, func(c *sftp.Client) error {
		if err := c.MkdirAll(path.Dir(final)); err != nil {
			return s.classify("mkdir", path.Dir(final), err)
		}
		tmp := remoteTempName(final)
		if err := s.upload(c, tmp, p); err != nil {
			_ = c.Remove(tmp)
			return err
		}
		if err := s.rename(c, tmp, final); err != nil {
			_ = c.Remove(tmp)
			return err
		}
		return nil
	})
}

func (s *SFTP) upload(c *sftp.Client, tmp string, p Put) error {
	f, err := c.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
	if err != nil {
		return s.classify("create", tmp, err)
	}
	n, err := f.ReadFrom(p.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return s.classify("write", tmp, err)
	}
	if p.Size >= 0 && n != p.Size {
		return fmt.Errorf("%w: sftp write %s: the document had %d bytes, %d were expected", ErrUnavailable, p.Name, n, p.Size)
	}
	return nil
}

// rename moves from onto to, replacing to.
func (s *SFTP) rename(c *sftp.Client, from, to string) error {
	if _, ok := c.HasExtension(sftpPosixRename); ok && !s.noPosixRename {
		return s.classify("rename", to, c.PosixRename(from, to))
	}
	err := c.Rename(from, to)
	if err == nil {
		return nil
	}
	if _, serr := c.Stat(to); serr != nil {
		return s.classify("rename", to, err)
	}
	if err := c.Remove(to); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s.classify("remove", to, err)
	}
	return s.classify("rename", to, c.Rename(from, to))
}

// Check verifies the root is a directory the user can write: it creates
// and removes a dot file there.
func (s *SFTP) Check(ctx context.Context) error {
	root := s.opts.Path
	if root == "" {
		root = "."
	}
	return s.do(ctx, func(c *sftp.Client) error {
		fi, err := c.Stat(root)
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: sftp: %s does not exist on %s: check sftp.path", ErrRefused, root, s.addr)
		}
		if err != nil {
			return s.classify("stat", root, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: sftp: %s on %s is not a directory: check sftp.path", ErrRefused, root, s.addr)
		}
		probe := remoteTempName(path.Join(root, "edihub-check"))
		f, err := c.OpenFile(probe, os.O_WRONLY|os.O_CREATE|os.O_TRUNC)
		if err != nil {
			return s.classify("create", probe, err)
		}
		_ = f.Close()
		return s.classify("remove", probe, c.Remove(probe))
	})
}

// Close closes the connection; the connector is not used afterwards.
func (s *SFTP) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.client == nil {
		return nil
	}
	_ = s.client.Close()
	err := s.conn.Close()
	s.client, s.conn = nil, nil
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("sftp: close: %w", err)
	}
	return nil
}
