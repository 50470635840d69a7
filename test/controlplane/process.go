package controlplane

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is one child process (etcd or kube-apiserver) in its own process
// group, logging to a file. Its zero value is not usable; see startProcess.
type process struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	done    chan struct{} // closed once cmd.Wait returned
	err     error         // cmd.Wait's result; read only after done is closed
}

// startProcess starts bin with args, appending its stdout and stderr to
// logPath. The child gets its own process group (so that signals reach
// anything it spawns, and a Ctrl-C in the terminal does not race our
// shutdown) and SIGKILL when the test process dies.
//
// Pdeathsig fires when the OS thread that forked the child exits, not the
// process. The Go runtime never ends its threads except one that a
// goroutine locked with runtime.LockOSThread and left locked, so callers must
// not start a control plane from such a goroutine.
func startProcess(name, bin string, args []string, logPath string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	fmt.Fprintf(logFile, "=== %s %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))

	cmd := exec.Command(bin, args...)
	cmd.Env = childEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	// The child holds its own descriptor now.
	logFile.Close()

	p := &process{name: name, cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// childEnv is the environment of the test process without variables that
// etcd reads as flags (ETCD_*), so that a developer's shell cannot change
// how the test control plane runs.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ETCD_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// pid returns the process id of the child.
func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the child has exited (and been reaped).
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError describes how the child ended; call only after done is closed.
func (p *process) exitError() error {
	if p.err == nil {
		return fmt.Errorf("%s exited with status 0", p.name)
	}
	return fmt.Errorf("%s exited: %w", p.name, p.err)
}

// stop sends SIGTERM to the child's process group, waits up to grace for it
// to exit, then sends SIGKILL and waits until it is reaped. It returns nil
// when the process was already gone; otherwise an error only if it could not
// be signalled. Stopping on purpose is not an error, whatever the exit code.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	// Signal the group while the leader has not been reaped yet, so its
	// process-group id cannot have been reused.
	if err := syscall.Kill(-p.pid(), syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop %s: %w", p.name, err)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.done:
		return nil
	case <-timer.C:
	}
	if err := syscall.Kill(-p.pid(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-p.done
	return nil
}

// logTail returns the last lines of the child's log, for error messages.
func (p *process) logTail() string {
	return tailFile(p.logPath, 40, 8<<10)
}

// tailFile returns at most maxLines lines and maxBytes bytes from the end of
// path, or a note saying why it cannot.
func tailFile(path string, maxLines int, maxBytes int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	off := max(info.Size()-maxBytes, 0)
	buf, err := io.ReadAll(io.NewSectionReader(f, off, info.Size()-off))
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := bytes.Split(bytes.TrimRight(buf, "\n"), []byte("\n"))
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first line is likely cut
	}
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
