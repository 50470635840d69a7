package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// NewStandby prepares a streaming standby of primary (running) in
// opts.Dir: pg_basebackup copies the primary's data directory over the
// replication protocol with its WAL and writes standby.signal, so the
// server Start then starts is a hot standby. opts.Dir must not hold a
// cluster yet. Where it streams from is primary_conninfo: the primary's
// own address unless opts.Settings sets another (a proxy, so a test can
// cut the replication link).
//
// The copy leaves out the primary's synchronous_standby_names (set with
// ALTER SYSTEM), so a standby promoted later does not wait for a standby
// of its own that it does not have.
func NewStandby(ctx context.Context, primary *Server, opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("pgserver: Options.Dir is empty")
	}
	if opts.BinDir == "" {
		opts.BinDir = primary.bin
	}
	if _, err := os.Stat(filepath.Join(opts.Dir, "data", "PG_VERSION")); err == nil {
		return nil, fmt.Errorf("pgserver: %s already holds a cluster", opts.Dir)
	}
	s := &Server{opts: opts, bin: opts.BinDir, uid: primary.uid, gid: primary.gid, cred: primary.cred, port: opts.Port}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("pgserver: %w", err)
	}
	if err := s.chown(opts.Dir); err != nil {
		return nil, err
	}
	if err := s.checkReachable(opts.Dir); err != nil {
		return nil, err
	}
	cmd := s.command("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port()), "-U", "postgres",
		"-D", s.DataDir(), "-X", "stream", "-R", "--checkpoint=fast", "--no-sync")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runContext(ctx, cmd); err != nil {
		return nil, fmt.Errorf("pgserver: pg_basebackup from port %d:\n%s\n%w", primary.Port(), tail(out.Bytes(), 20), err)
	}
	if err := dropSetting(filepath.Join(s.DataDir(), "postgresql.auto.conf"), "synchronous_standby_names"); err != nil {
		return nil, err
	}
	return s, nil
}

// runContext runs cmd and kills its process group when ctx ends first.
func runContext(ctx context.Context, cmd *exec.Cmd) error {
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return ctx.Err()
	}
}

// dropSetting removes the lines setting name from a postgresql.auto.conf,
// keeping its owner.
func dropSetting(path, name string) error {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	var kept []string
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), name) {
			kept = append(kept, line)
		}
	}
	// WriteFile keeps the existing file's owner and mode.
	if err := os.WriteFile(path, []byte(strings.Join(kept, "\n")), 0o600); err != nil {
		return fmt.Errorf("pgserver: %w", err)
	}
	return nil
}

// Promote ends a standby's recovery (pg_ctl promote) and waits until it
// accepts writes.
func (s *Server) Promote(ctx context.Context) error {
	cmd := s.command("pg_ctl", "promote", "-w", "-t", "60", "-D", s.DataDir())
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := runContext(ctx, cmd); err != nil {
		return fmt.Errorf("pgserver: pg_ctl promote:\n%s\n%w", tail(out.Bytes(), 20), err)
	}
	return nil
}

// Kill ends the server at once, as a crash of its machine would: SIGKILL
// to the postmaster and every backend (its process group), without a
// shutdown checkpoint. Killing a stopped server is a no-op.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		return fmt.Errorf("pgserver: postgres (pid %d) did not exit after SIGKILL", s.cmd.Process.Pid)
	}
	s.cmd = nil
	return nil
}
