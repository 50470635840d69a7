package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/testenv/pgtest"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// buildBinary builds the edihub binary once per test run.
func buildBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "edihub-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "edihub")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = &buildError{out: string(out), err: err}
		}
	})
	if binErr != nil {
		t.Fatalf("go build: %v", binErr)
	}
	return binPath
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// TestBinaryServe runs the built binary against a real database: migrate,
// serve on free ports, probe the ops endpoints, stop with SIGTERM.
func TestBinaryServe(t *testing.T) {
	bin := buildBinary(t)
	url := pgtest.EmptyURL(t)
	cfg := writeConfig(t, "")
	environ := append(os.Environ(), "EDIHUB_DATABASE_URL="+url, "EDIHUB_CONFIG="+cfg,
		"EDIHUB_HTTP_ADDR=127.0.0.1:0", "EDIHUB_OPS_ADDR=127.0.0.1:0", "EDIHUB_MIGRATE=true",
		"EDIHUB_LEADER_BACKEND=postgres", "EDIHUB_IDENTITY=e2e")

	cmd := exec.Command(bin, "serve")
	cmd.Env = environ
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// The JSON log's "edihub started" line names the bound addresses.
	started := make(chan map[string]any, 1)
	var logs strings.Builder
	var logMu sync.Mutex
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logMu.Lock()
			logs.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			var e map[string]any
			if json.Unmarshal(sc.Bytes(), &e) == nil && e["msg"] == "edihub started" {
				started <- e
			}
		}
	}()
	var ev map[string]any
	select {
	case ev = <-started:
	case <-time.After(60 * time.Second):
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("edihub serve did not start; log:\n%s", logs.String())
	}
	ops := "http://" + ev["ops_addr"].(string)
	as2 := "http://" + ev["as2_addr"].(string)

	for _, tc := range []struct {
		url, want string
	}{
		{ops + "/healthz", `"ok"`},
		{ops + "/readyz", `"ok"`},
		{ops + "/metrics", "edihub_http_requests_total"},
		{ops + "/metrics", "edihub_db_pool_max_conns"},
		{ops + "/metrics", "edihub_receipt_flush_receipts_bucket"},
		{ops + "/metrics", "go_goroutines"},
		{ops + "/metrics", "process_resident_memory_bytes"},
		{as2 + "/", `"service": "edihub"`},
	} {
		resp, err := http.Get(tc.url)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), tc.want) {
			t.Errorf("GET %s = %d, body lacks %q", tc.url, resp.StatusCode, tc.want)
		}
	}

	// The only replica leads within a few seconds and says so.
	var st struct {
		Identity     string `json:"identity"`
		IsLeader     bool   `json:"is_leader"`
		Holder       string `json:"holder"`
		FencingToken int64  `json:"fencing_token"`
		Backend      string `json:"backend"`
		LeaseName    string `json:"lease_name"`
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := http.Get(ops + "/leader")
		if err != nil {
			t.Fatalf("GET /leader: %v", err)
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("GET /leader: %v", err)
		}
		if st.IsLeader || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !st.IsLeader || st.Holder != st.Identity || !strings.HasPrefix(st.Identity, "e2e-") || st.FencingToken <= 0 || st.Backend != "postgres" || st.LeaseName != "edihub-leader" {
		t.Fatalf("GET /leader = %+v, want this replica leading on postgres with a token", st)
	}

	// The leader runs the report worker; without SMTP settings it stores
	// reports and says that it mails none. Its first cycle (no day due
	// yet: the lease's first term opened today) is a success.
	var metrics string
	for deadline := time.Now().Add(15 * time.Second); ; {
		resp, err := http.Get(ops + "/metrics")
		if err != nil {
			t.Fatalf("GET /metrics: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		metrics = string(b)
		if strings.Contains(metrics, `edihub_worker_running{worker="report"} 1`) && !strings.Contains(metrics, "edihub_report_last_success_timestamp_seconds 0") ||
			time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, want := range []string{`edihub_worker_running{worker="report"} 1`, "edihub_report_last_success_timestamp_seconds 1", `edihub_report_failures_total{cause="connect"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitErr := make(chan error, 1)
	go func() { <-logDone; waitErr <- cmd.Wait() }()
	select {
	case err := <-waitErr:
		if err != nil {
			t.Fatalf("edihub serve after SIGTERM exited with %v, want 0", err)
		}
	case <-ctx.Done():
		t.Fatal("edihub serve did not exit after SIGTERM")
	}
	logMu.Lock()
	defer logMu.Unlock()
	if !strings.Contains(logs.String(), "report mail not configured") {
		t.Errorf("log lacks the line saying reports are not mailed:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `"msg":"edihub stopped"`) {
		t.Errorf("log lacks the stop line:\n%s", logs.String())
	}
	// SIGTERM order: workers stopped and lease released before HTTP drains.
	released := strings.Index(logs.String(), `"msg":"released"`)
	draining := strings.Index(logs.String(), `"msg":"draining"`)
	if released < 0 || draining < 0 || released > draining {
		t.Errorf("log shows the lease released at %d and HTTP draining at %d; want release first:\n%s", released, draining, logs.String())
	}
}

// TestBinaryBrokenConfig checks what an operator sees: a non-zero exit and
// one message naming the file and the field.
func TestBinaryBrokenConfig(t *testing.T) {
	bin := buildBinary(t)
	cfg := writeConfig(t, "    sign: md5\n")
	// A duplicate key is itself a YAML error, so make the sign value bad by
	// rewriting it instead.
	b, _ := os.ReadFile(cfg)
	fixed := strings.Replace(string(b), "    sign: sha-256\n", "", 1)
	if err := os.WriteFile(cfg, []byte(fixed), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "EDIHUB_DATABASE_URL=postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG="+cfg)
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if err == nil || !asExit(err, &exitErr) || exitErr.ExitCode() == 0 {
		t.Fatalf("edihub serve with a broken config = %v, want a non-zero exit", err)
	}
	msg := string(out)
	for _, want := range []string{"edihub.yaml", "partners[0].sign", "md5"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q does not name %q", msg, want)
		}
	}
	if n := strings.Count(strings.TrimSpace(msg), "\n"); n != 0 {
		t.Errorf("message has %d extra lines, want one line:\n%s", n, msg)
	}
}

func asExit(err error, target **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	if ok {
		*target = e
	}
	return ok
}
