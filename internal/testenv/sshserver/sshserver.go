// Package sshserver starts a private OpenSSH sshd (Debian's openssh-server)
// on a loopback port for tests: its own configuration, a generated ed25519
// host key and user key, SFTP only (internal-sftp, forced), started as a
// child process and stopped on Close.
//
// Everything here runs as whatever user the test runs as (root on the test
// machines): the SFTP user is that user, logging in with the generated key.
// Password authentication is enabled but no password is accepted (the user
// has none sshd could check without PAM), so a password login shows how a
// refused password looks. The SFTP session starts in Root; paths are the
// real absolute paths on disk (no chroot: ChrootDirectory needs every parent
// root-owned and not writable by others, which a temporary directory is
// not).
package sshserver

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/edihub/edihub/internal/testenv/freeport"
)

// startTimeout bounds how long Start waits for sshd to accept a login.
const startTimeout = 30 * time.Second

// Server is a running private sshd. Its fields are set by Start and not
// changed afterwards, also across Stop and Restart (same port, same keys).
type Server struct {
	// Host and Port are where sshd listens (127.0.0.1 and a free port).
	Host string
	Port int
	// HostKey is the server's public host key as an authorized_keys
	// line ("ssh-ed25519 AAAA..."), what a client pins.
	HostKey string
	// User is the login name; UserKey its private key (OpenSSH PEM).
	User    string
	UserKey []byte
	// Root is the directory on disk the SFTP session starts in.
	Root string

	dir    string
	config string
	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	stderr *bytes.Buffer
	stdin  io.Closer
}

// tether runs "$@" and stops it when its standard input closes.
const tether = `exec 3<&0
"$@" </dev/null &
pid=$!
{ read -r _ <&3; kill -TERM "$pid" 2>/dev/null; } &
wait "$pid"`

// Addr is "host:port".
func (s *Server) Addr() string { return net.JoinHostPort(s.Host, strconv.Itoa(s.Port)) }

// Binary returns the path of sshd: /usr/sbin/sshd (Debian's, not on every
// PATH), else sshd on PATH; an error naming the script that installs it.
func Binary() (string, error) {
	if fi, err := os.Stat("/usr/sbin/sshd"); err == nil && !fi.IsDir() {
		return "/usr/sbin/sshd", nil
	}
	if p, err := exec.LookPath("sshd"); err == nil {
		return p, nil
	}
	return "", errors.New("sshd not found (/usr/sbin/sshd or on PATH): run scripts/deps.sh, which installs Debian's openssh-server")
}

// Start starts sshd with its keys, configuration and SFTP root under dir
// (which must exist and be empty; a test's t.TempDir()), and returns once
// sshd accepts a login with the user key. Close stops it.
func Start(dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	u, err := user.Current()
	if err != nil {
		return nil, fmt.Errorf("sshserver: current user: %w", err)
	}
	s := &Server{Host: "127.0.0.1", User: u.Username, dir: dir, Root: filepath.Join(dir, "root")}
	if err := s.writeFiles(); err != nil {
		return nil, err
	}
	// sshd checks its privilege separation directory exists; Debian's
	// package leaves it to the service start, which never ran here.
	if os.Geteuid() == 0 {
		if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
			return nil, fmt.Errorf("sshserver: privilege separation directory: %w", err)
		}
	}
	// A port picked free can be taken before sshd binds it: try a few.
	for try := 0; ; try++ {
		ports, err := freeport.Ports(1)
		if err != nil {
			return nil, fmt.Errorf("sshserver: %w", err)
		}
		s.Port = ports[0]
		if err := s.writeConfig(bin); err != nil {
			return nil, err
		}
		err = s.Restart()
		if err == nil {
			return s, nil
		}
		if try == 2 || !strings.Contains(err.Error(), "Address already in use") {
			return nil, err
		}
	}
}

func (s *Server) writeFiles() error {
	if err := os.MkdirAll(s.Root, 0o755); err != nil {
		return fmt.Errorf("sshserver: %w", err)
	}
	hostPub, hostPEM, err := newKey("edihub-test-host")
	if err != nil {
		return err
	}
	userPub, userPEM, err := newKey("edihub-test-user")
	if err != nil {
		return err
	}
	s.HostKey = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostPub)))
	s.UserKey = userPEM
	files := []struct {
		name string
		data []byte
	}{
		{"host_ed25519", hostPEM},
		{"user_ed25519", userPEM},
		{"authorized_keys", ssh.MarshalAuthorizedKey(userPub)},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(s.dir, f.name), f.data, 0o600); err != nil {
			return fmt.Errorf("sshserver: %w", err)
		}
	}
	return nil
}

func newKey(comment string) (ssh.PublicKey, []byte, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("sshserver: generate key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, nil, fmt.Errorf("sshserver: marshal key: %w", err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("sshserver: public key: %w", err)
	}
	return sshPub, pem.EncodeToMemory(block), nil
}

func (s *Server) writeConfig(bin string) error {
	s.config = filepath.Join(s.dir, "sshd_config")
	conf := fmt.Sprintf(`# private sshd of internal/testenv/sshserver (%s)
ListenAddress %s
Port %d
HostKey %s
PidFile %s
AuthorizedKeysFile %s
AllowUsers %s
StrictModes no
UsePAM no
PermitRootLogin yes
PubkeyAuthentication yes
PasswordAuthentication yes
PermitEmptyPasswords no
KbdInteractiveAuthentication no
AllowTcpForwarding no
X11Forwarding no
PermitTTY no
MaxStartups 100:30:200
MaxSessions 100
LogLevel INFO
Subsystem sftp internal-sftp
ForceCommand internal-sftp -d %s
`, bin, s.Host, s.Port, filepath.Join(s.dir, "host_ed25519"), filepath.Join(s.dir, "sshd.pid"),
		filepath.Join(s.dir, "authorized_keys"), s.User, s.Root)
	if err := os.WriteFile(s.config, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("sshserver: %w", err)
	}
	return nil
}

// Restart starts sshd again after Stop, on the same port with the same
// keys, and returns once it accepts a login. Start calls it the first time.
func (s *Server) Restart() error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("sshserver: Restart of a running sshd; Stop it first")
	}
	var stderr bytes.Buffer
	// sshd runs under a shell that holds a pipe from this process: when
	// the pipe closes (Stop, or this process ending without Close) the
	// shell stops sshd, so no sshd outlives its test.
	cmd := exec.Command("/bin/sh", "-c", tether, "sshd", bin, "-D", "-e", "-f", s.config)
	cmd.Stdout = &lockedWriter{w: &stderr, mu: &s.mu}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("sshserver: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("sshserver: start %s: %w", bin, err)
	}
	s.stdin = stdin
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done, s.stderr = cmd, done, &stderr
	s.mu.Unlock()
	err = s.waitReady(done)
	s.mu.Lock()
	if err != nil {
		s.stopLocked()
		return fmt.Errorf("sshd said %q: %w", strings.TrimSpace(stderr.String()), err)
	}
	return nil
}

// waitReady polls until a login with the user key succeeds, sshd exits,
// or startTimeout passes.
func (s *Server) waitReady(exited <-chan struct{}) error {
	signer, err := ssh.ParsePrivateKey(s.UserKey)
	if err != nil {
		return fmt.Errorf("sshserver: user key: %w", err)
	}
	cfg := &ssh.ClientConfig{
		User:            s.User,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(),
		Timeout:         5 * time.Second,
	}
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c, err := ssh.Dial("tcp", s.Addr(), cfg)
		if err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("sshserver: sshd exited before accepting a login: %w", err)
		case <-deadline.C:
			return fmt.Errorf("sshserver: sshd did not accept a login within %s: %w", startTimeout, err)
		case <-tick.C:
		}
	}
}

// Stop stops sshd and its sessions (open connections break), and waits
// for it to exit. Stopping a stopped server does nothing.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	return nil
}

func (s *Server) stopLocked() {
	if s.cmd == nil {
		return
	}
	// sshd's per-connection processes start sessions of their own: end
	// them first, so open connections break as when a server goes down.
	for _, pid := range descendants(s.cmd.Process.Pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = s.stdin.Close()
	done := s.done
	s.mu.Unlock()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	s.mu.Lock()
	s.cmd = nil
}

// descendants lists the processes below pid, deepest first.
func descendants(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			child, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			out = append(out, descendants(child)...)
			out = append(out, child)
		}
	}
	return out
}

// Close stops sshd for good.
func (s *Server) Close() error { return s.Stop() }

// Log returns what sshd wrote to its standard error since its last start.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stderr == nil {
		return ""
	}
	return s.stderr.String()
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
