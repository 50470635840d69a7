// Package s3server starts Versity's S3 gateway (versitygw, Apache-2.0) with
// its POSIX backend on a loopback port for tests: an S3-compatible server
// whose buckets are directories on disk, started as a child process and
// stopped on Close.
//
// The binary is built by scripts/versitygw-build.sh into
// .cache/versitygw/bin (scripts/test.sh runs it); EDIHUB_VERSITYGW_BIN names
// another directory holding it.
package s3server

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/edihub/edihub/internal/testenv/freeport"
)

// startTimeout bounds how long Start waits for the gateway to answer.
const startTimeout = 60 * time.Second

// Region is the region the gateway answers for.
const Region = "us-east-1"

// Server is a running gateway. Its fields do not change after Start.
type Server struct {
	// Endpoint is the gateway's URL, "http://127.0.0.1:PORT".
	Endpoint string
	// AccessKey and SecretKey are the gateway's root credentials.
	AccessKey, SecretKey string
	// Dir is the gateway's top directory: each bucket a directory in it.
	Dir string

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	stdin  io.Closer
	output *bytes.Buffer
	addr   string
	args   []string
}

// tether runs "$@" and stops it when its standard input closes, so the
// gateway never outlives the test process.
const tether = `exec 3<&0
"$@" </dev/null &
pid=$!
{ read -r _ <&3; kill -TERM "$pid" 2>/dev/null; } &
wait "$pid"`

// Binary returns the path of the versitygw binary: in
// $EDIHUB_VERSITYGW_BIN when set, else in the repository's
// .cache/versitygw/bin; an error naming the script that builds it.
func Binary() (string, error) {
	dir := os.Getenv("EDIHUB_VERSITYGW_BIN")
	if dir == "" {
		_, file, _, _ := runtime.Caller(0)
		dir = filepath.Join(filepath.Dir(file), "..", "..", "..", ".cache", "versitygw", "bin")
	}
	bin := filepath.Join(dir, "versitygw")
	if fi, err := os.Stat(bin); err != nil || fi.IsDir() {
		return "", fmt.Errorf("versitygw not found at %s: run scripts/versitygw-build.sh (or set EDIHUB_VERSITYGW_BIN to the directory holding it)", bin)
	}
	return bin, nil
}

// Start starts the gateway on a free loopback port, its buckets and
// metadata under dir (a test's t.TempDir()), and returns once it answers.
func Start(dir string) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	s := &Server{AccessKey: "edihub-test", SecretKey: randomHex(16), Dir: filepath.Join(dir, "buckets")}
	meta := filepath.Join(dir, "meta")
	for _, d := range []string{s.Dir, meta} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("s3server: %w", err)
		}
	}
	for try := 0; ; try++ {
		ports, err := freeport.Ports(1)
		if err != nil {
			return nil, fmt.Errorf("s3server: %w", err)
		}
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		s.Endpoint = "http://" + s.addr
		// The metadata (content type, user metadata, ETags) goes to a
		// sidecar directory: not every temporary file system keeps the
		// extended attributes the backend uses otherwise.
		s.args = []string{bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--region", Region,
			"--port", s.addr, "--quiet", "--keep-alive", "posix", "--sidecar", meta, s.Dir}
		err = s.Restart()
		if err == nil {
			return s, nil
		}
		if try == 2 || !strings.Contains(strings.ToLower(err.Error()), "address already in use") {
			return nil, err
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Restart starts the gateway again after Stop, on the same port with the
// same data; Start calls it the first time.
func (s *Server) Restart() error {
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return errors.New("s3server: Restart of a running gateway; Stop it first")
	}
	var out bytes.Buffer
	cmd := exec.Command("/bin/sh", append([]string{"-c", tether, "versitygw"}, s.args...)...)
	cmd.Stdout = &lockedWriter{w: &out, mu: &s.mu}
	cmd.Stderr = cmd.Stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("s3server: %w", err)
	}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("s3server: start versitygw: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.cmd, s.done, s.stdin, s.output = cmd, done, stdin, &out
	s.mu.Unlock()
	if err := s.waitReady(done); err != nil {
		_ = s.Stop()
		return fmt.Errorf("versitygw said %q: %w", strings.TrimSpace(s.Log()), err)
	}
	return nil
}

// waitReady polls until the gateway answers HTTP, exits, or startTimeout
// passes.
func (s *Server) waitReady(exited <-chan struct{}) error {
	client := &http.Client{Timeout: 5 * time.Second}
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(s.Endpoint + "/")
		if err == nil {
			_ = resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("s3server: versitygw exited before answering: %w", err)
		case <-deadline.C:
			return fmt.Errorf("s3server: versitygw did not answer within %s: %w", startTimeout, err)
		case <-tick.C:
		}
	}
}

// Stop stops the gateway and waits for it; its data stays for Restart.
func (s *Server) Stop() error {
	s.mu.Lock()
	cmd, done, stdin := s.cmd, s.done, s.stdin
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = stdin.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	return nil
}

// Close stops the gateway for good.
func (s *Server) Close() error { return s.Stop() }

// Log returns what the gateway printed since its last start.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.output == nil {
		return ""
	}
	return s.output.String()
}

// Client returns an S3 client for the gateway with its root credentials
// (path-style addressing). It keeps no idle connection, so it leaves no
// goroutine behind in a test that checks for leaks.
func (s *Server) Client() *s3.Client {
	return s3.New(s3.Options{
		HTTPClient:   &http.Client{Transport: &http.Transport{DisableKeepAlives: true}},
		Region:       Region,
		BaseEndpoint: aws.String(s.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(s.AccessKey, s.SecretKey, ""),
	})
}

// CreateBucket creates a bucket, named from prefix and random letters
// (bucket names are unique per server), and returns its name.
func (s *Server) CreateBucket(ctx context.Context, prefix string) (string, error) {
	name := strings.ToLower(prefix) + "-" + randomHex(4)
	if _, err := s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		return "", fmt.Errorf("s3server: create bucket %s: %w", name, err)
	}
	return name, nil
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
