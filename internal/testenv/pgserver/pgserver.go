// Package pgserver runs a private PostgreSQL server from the machine's own
// server binaries (initdb, postgres). The test harness and the local stack use
// it so that nothing but a PostgreSQL package has to be installed.
//
// When the current user is root, PostgreSQL refuses to run; the server is then
// started as the "postgres" system user, which owns the data directory.
package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edihub/edihub/internal/testenv/freeport"
)

// ErrNoBinaries reports that no PostgreSQL server binaries were found.
var ErrNoBinaries = errors.New("PostgreSQL server binaries (initdb, postgres) not found on PATH or under /usr/lib/postgresql/*/bin; " +
	"install the distribution's server, for example: apt-get install postgresql")

// libDir holds one <major>/bin directory per installed server version, as
// Debian and Ubuntu lay them out.
const libDir = "/usr/lib/postgresql"

// Options configure a Server.
type Options struct {
	// Dir holds the data directory ("data") and the socket and log files.
	// It is created when missing and reused when it already holds a cluster.
	Dir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Settings are extra "-c name=value" server settings.
	Settings map[string]string
	// BinDir overrides where initdb and postgres are looked up.
	BinDir string
}

// Server is a PostgreSQL server process. Its methods are safe for
// concurrent use.
type Server struct {
	opts   Options
	bin    string
	cred   *syscall.Credential
	uid    int
	gid    int
	port   int
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// FindBinDir returns the directory holding initdb and postgres: the one on
// PATH, else the newest /usr/lib/postgresql/<major>/bin of any major
// version.
func FindBinDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	return newestBinDir(libDir)
}

// newestBinDir returns the <major>/bin directory under lib with initdb and
// postgres of the highest major version (9.6 < 10 < 15 < 17).
func newestBinDir(lib string) (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(lib, "*", "bin"))
	sort.Slice(dirs, func(i, j int) bool { return versionLess(versionOf(dirs[j]), versionOf(dirs[i])) })
	for _, d := range dirs {
		if isFile(filepath.Join(d, "initdb")) && isFile(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNoBinaries
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// versionOf parses the major version directory above binDir ("17", "9.6");
// a name that is not a version parses as nil and sorts last.
func versionOf(binDir string) []int {
	var v []int
	for _, part := range strings.Split(filepath.Base(filepath.Dir(binDir)), ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return nil
		}
		v = append(v, n)
	}
	return v
}

func versionLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// New prepares a server in opts.Dir, running initdb when the directory holds
// no cluster yet. It does not start the server.
func New(opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("pgserver: Options.Dir is empty")
	}
	bin := opts.BinDir
	if bin == "" {
		var err error
		if bin, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	s := &Server{opts: opts, bin: bin, uid: -1, gid: -1}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root, PostgreSQL must run as the postgres user, which does not exist (install the postgresql package, which creates it): %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.uid, s.gid = uid, gid
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	if err := s.chown(opts.Dir); err != nil {
		return nil, err
	}
	if err := s.checkReachable(opts.Dir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(s.DataDir(), "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := s.initdb(); err != nil {
			return nil, err
		}
	}
	s.port = opts.Port
	return s, nil
}

// DataDir is the cluster's data directory.
func (s *Server) DataDir() string { return filepath.Join(s.opts.Dir, "data") }

// LogFile is the server's log file.
func (s *Server) LogFile() string { return filepath.Join(s.opts.Dir, "postgres.log") }

// Port is the TCP port the server listens on (known after Start).
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// URL is a connection URL for database db as the superuser "postgres".
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port(), db)
}

func (s *Server) chown(path string) error {
	if s.cred == nil {
		return nil
	}
	if err := os.Chown(path, s.uid, s.gid); err != nil {
		return fmt.Errorf("pgserver: give %s to the postgres user: %w", path, err)
	}
	return nil
}

// checkReachable makes sure the postgres user can walk down to dir: a data
// directory below a root-only folder fails later with a confusing message.
func (s *Server) checkReachable(dir string) error {
	if s.cred == nil {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pgserver: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if ok && fi.Mode().Perm()&0o001 == 0 && int(st.Uid) != s.uid {
			return fmt.Errorf("pgserver: the postgres user cannot reach %s because %s is not searchable by others (mode %v); run chmod o+x %s or use a directory outside it", abs, p, fi.Mode().Perm(), p)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.opts.Dir
	cmd.Env = []string{"LC_ALL=C", "LANG=C", "PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd
}

func (s *Server) initdb() error {
	cmd := s.command("initdb", "-D", s.DataDir(), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync", "--no-instructions")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgserver: initdb in %s:\n%s\n%w", s.DataDir(), tail(out.Bytes(), 20), err)
	}
	return nil
}

// Start starts the server and waits until it accepts connections. A stale
// postmaster.pid left by a killed server is removed first.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("pgserver: already running")
	}
	if s.port == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		s.port = p
	}
	_ = os.Remove(filepath.Join(s.DataDir(), "postmaster.pid"))
	logf, err := os.OpenFile(s.LogFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	defer logf.Close()
	args := []string{"-D", s.DataDir(), "-p", strconv.Itoa(s.port), "-h", "127.0.0.1", "-k", s.opts.Dir}
	settings := map[string]string{"max_connections": "300", "log_min_messages": "warning"}
	for k, v := range s.opts.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	cmd := s.command("postgres", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgserver: start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	if err := s.waitReady(ctx, exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		s.cmd = nil
		logTail, _ := os.ReadFile(s.LogFile())
		return fmt.Errorf("pgserver: postgres did not become ready on port %d:\n%s\n%w", s.port, tail(logTail, 20), err)
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	sock := filepath.Join(s.opts.Dir, ".s.PGSQL."+strconv.Itoa(s.port))
	for {
		// The socket file appears once the server accepts connections.
		if _, err := os.Stat(sock); err == nil {
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				if s.acceptsQueries(ctx) {
					return nil
				}
			}
		}
		select {
		case <-exited:
			return errors.New("server exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// acceptsQueries asks pg_isready-like questions through the log-free path:
// the startup packet answer. A server still recovering answers with an error.
func (s *Server) acceptsQueries(ctx context.Context) bool {
	d := net.Dialer{Timeout: time.Second}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)))
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	// StartupMessage: protocol 3.0, user=postgres, database=postgres.
	params := "user\x00postgres\x00database\x00postgres\x00\x00"
	msg := make([]byte, 8+len(params))
	putUint32(msg[0:], uint32(len(msg)))
	putUint32(msg[4:], 196608)
	copy(msg[8:], params)
	if _, err := c.Write(msg); err != nil {
		return false
	}
	buf := make([]byte, 1)
	if _, err := c.Read(buf); err != nil {
		return false
	}
	// 'R' is an authentication request (trust answers AuthenticationOk);
	// 'E' means the server is starting up or shutting down.
	return buf[0] == 'R'
}

func putUint32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

// Stop shuts the server down (fast mode: active sessions are ended) and waits
// for it to exit. Stopping a stopped server is a no-op.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	s.cmd = nil
	return nil
}

// Running reports whether the server process is up.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// PID is the postmaster's process ID, or 0 when stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

func freePort() (int, error) {
	p, err := freeport.Port()
	if err != nil {
		return 0, fmt.Errorf("pgserver: pick a free port: %w", err)
	}
	return p, nil
}

func tail(b []byte, lines int) string {
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
