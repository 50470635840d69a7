// Package cluster runs several edihub processes (replicas) from a built
// binary, as the local stack and the multi-replica tests need: it starts
// them, prefixes and collects their logs, signals single replicas (kill,
// stop, freeze) and stops them all, leaving no process behind. A Balancer
// spreads HTTP requests over the replicas, as a load balancer would.
package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/edihub/edihub/internal/testenv/freeport"
)

// ReplicaSpec describes one replica.
type ReplicaSpec struct {
	Name     string
	HTTPAddr string // host:port of the AS2/API listener
	OpsAddr  string // host:port of the ops listener
	Env      []string
}

// Options configure Start.
type Options struct {
	Binary   string   // path of the edihub binary
	Args     []string // arguments, default ["serve"]
	Env      []string // common environment (added to a minimal base)
	Replicas []ReplicaSpec
	// Output receives every replica's log lines, each prefixed with the
	// replica's name; nil discards them.
	Output io.Writer
	// OnExit is called when a replica exits on its own or by a signal.
	OnExit func(r *Replica, err error)
}

// Cluster is a set of running replicas.
type Cluster struct {
	opts     Options
	out      *lockedWriter
	mu       sync.Mutex
	replicas []*Replica
}

// Replica is one edihub process. Start starts it again after it exited.
type Replica struct {
	Spec   ReplicaSpec
	c      *Cluster
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) line(prefix, s string) {
	if l.w == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, "%s | %s\n", prefix, s)
}

// Start starts every replica. It does not wait for readiness: see
// WaitReady.
func Start(opts Options) (*Cluster, error) {
	if opts.Binary == "" {
		return nil, errors.New("cluster: Options.Binary is empty")
	}
	if len(opts.Args) == 0 {
		opts.Args = []string{"serve"}
	}
	c := &Cluster{opts: opts, out: &lockedWriter{w: opts.Output}}
	for _, spec := range opts.Replicas {
		r := &Replica{Spec: spec, c: c}
		if err := r.Start(); err != nil {
			_ = c.Stop(5 * time.Second)
			return nil, err
		}
		c.replicas = append(c.replicas, r)
	}
	return c, nil
}

// Replicas returns the replicas in start order.
func (c *Cluster) Replicas() []*Replica {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Replica(nil), c.replicas...)
}

// Start (re)starts the replica's process.
func (r *Replica) Start() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd != nil {
		select {
		case <-r.exited:
		default:
			return fmt.Errorf("cluster: %s is running", r.Spec.Name)
		}
	}
	cmd := exec.Command(r.c.opts.Binary, r.c.opts.Args...)
	cmd.Env = append(append(baseEnv(), r.c.opts.Env...), r.Spec.Env...)
	cmd.Env = append(cmd.Env, "EDIHUB_HTTP_ADDR="+r.Spec.HTTPAddr, "EDIHUB_OPS_ADDR="+r.Spec.OpsAddr)
	// Own process group: a Ctrl-C in the terminal reaches the parent only,
	// which then stops the replicas in order. Pdeathsig: nothing outlives
	// the parent.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cluster: start %s: %w", r.Spec.Name, err)
	}
	r.cmd, r.exited, r.err = cmd, make(chan struct{}), nil
	exited := r.exited
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			r.c.out.line(r.Spec.Name, sc.Text())
		}
		err := cmd.Wait()
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
		close(exited)
		if r.c.opts.OnExit != nil {
			r.c.opts.OnExit(r, err)
		}
	}()
	return nil
}

// baseEnv passes through only what a process needs from the parent, so a
// developer's EDIHUB_* variables do not leak into replicas unnoticed.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "TMPDIR", "TZ", "LANG"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// PID returns the process ID, or 0 when the replica is not running.
func (r *Replica) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil || r.cmd.Process == nil {
		return 0
	}
	select {
	case <-r.exited:
		return 0
	default:
		return r.cmd.Process.Pid
	}
}

// Signal sends sig to the replica's process.
func (r *Replica) Signal(sig syscall.Signal) error {
	pid := r.PID()
	if pid == 0 {
		return fmt.Errorf("cluster: %s is not running", r.Spec.Name)
	}
	return syscall.Kill(pid, sig)
}

// Exited is closed when the current process exits.
func (r *Replica) Exited() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exited
}

// Wait waits for the process to exit and returns its exit error.
func (r *Replica) Wait(ctx context.Context) error {
	select {
	case <-r.Exited():
	case <-ctx.Done():
		return ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Stop sends SIGTERM and waits up to timeout, then kills the process group.
// A frozen (SIGSTOPped) replica is continued first so it can shut down.
func (r *Replica) Stop(timeout time.Duration) error {
	pid := r.PID()
	if pid == 0 {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGCONT)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	select {
	case <-r.Exited():
		return nil
	case <-time.After(timeout):
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-r.Exited()
		return fmt.Errorf("cluster: %s did not stop within %s and was killed", r.Spec.Name, timeout)
	}
}

// Stop stops every replica in parallel, each within timeout.
func (c *Cluster) Stop(timeout time.Duration) error {
	var wg sync.WaitGroup
	errs := make([]error, len(c.Replicas()))
	for i, r := range c.Replicas() {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = r.Stop(timeout) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// WaitReady waits until the replica's /readyz answers 200.
func (r *Replica) WaitReady(ctx context.Context) error {
	return waitHTTP(ctx, "http://"+r.Spec.OpsAddr+"/readyz", r.Exited())
}

func waitHTTP(ctx context.Context, url string, exited <-chan struct{}) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", url, ctx.Err())
		case <-exited:
			return fmt.Errorf("waiting for %s: the process exited", url)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CheckFree returns an error naming every address in addrs that is taken.
func CheckFree(addrs ...string) error {
	var taken []string
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			taken = append(taken, a)
			continue
		}
		l.Close()
	}
	if len(taken) > 0 {
		return fmt.Errorf("address already in use: %s", strings.Join(taken, ", "))
	}
	return nil
}

// FreeAddr returns a free 127.0.0.1 address, never one returned before in
// this process (freeport.Addr).
func FreeAddr() (string, error) { return freeport.Addr() }
