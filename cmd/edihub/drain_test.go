package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// replicaProc is a running edihub serve built from this package.
type replicaProc struct {
	cmd      *exec.Cmd
	ops, as2 string
	api      string // with EDIHUB_API_ADDR set
	mu       sync.Mutex
	logs     strings.Builder
	done     chan error
}

func (p *replicaProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// startReplica runs the built binary with a fresh database and the given
// extra environment, and waits for its "edihub started" line.
func startReplica(t *testing.T, extraEnv ...string) *replicaProc {
	t.Helper()
	bin := buildBinary(t)
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(os.Environ(), "EDIHUB_DATABASE_URL="+pgtest.URL(t), "EDIHUB_CONFIG="+writeConfig(t, ""),
		"EDIHUB_HTTP_ADDR=127.0.0.1:0", "EDIHUB_OPS_ADDR=127.0.0.1:0", "EDIHUB_LEADER_BACKEND=postgres")
	cmd.Env = append(cmd.Env, extraEnv...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &replicaProc{cmd: cmd, done: make(chan error, 1)}
	started := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs.WriteString(sc.Text() + "\n")
			p.mu.Unlock()
			var e map[string]any
			if json.Unmarshal(sc.Bytes(), &e) == nil && e["msg"] == "edihub started" {
				started <- e
			}
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
		}
	})
	select {
	case e := <-started:
		p.ops, p.as2 = "http://"+e["ops_addr"].(string), "http://"+e["as2_addr"].(string)
		if a, ok := e["api_addr"].(string); ok {
			p.api = "http://" + a
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("edihub serve did not start; log:\n%s", p.log())
	}
	return p
}

func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), nil
}

// TestBinaryShutdownDelay: after SIGTERM the replica releases the lease,
// then keeps serving AS2/API traffic for EDIHUB_SHUTDOWN_DELAY with /readyz
// failing (so load balancers drain it), then exits cleanly.
func TestBinaryShutdownDelay(t *testing.T) {
	p := startReplica(t, "EDIHUB_SHUTDOWN_DELAY=3s", "EDIHUB_IDENTITY=drain")
	if code, _, err := httpGet(p.ops + "/readyz"); err != nil || code != http.StatusOK {
		t.Fatalf("GET /readyz before SIGTERM = %d, %v; want 200", code, err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, b, err := httpGet(p.ops + "/leader"); err == nil && strings.Contains(b, `"is_leader": true`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the only replica did not lead; log:\n%s", p.log())
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var body string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		code, b, err := httpGet(p.ops + "/readyz")
		if err == nil && code == http.StatusServiceUnavailable {
			body = b
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /readyz never failed after SIGTERM (last %d, %v); log:\n%s", code, err, p.log())
		}
	}
	if !strings.Contains(body, "shutting down") {
		t.Errorf("GET /readyz while draining = %s, want reason shutting down", body)
	}
	if code, _, err := httpGet(p.as2 + "/"); err != nil || code != http.StatusOK {
		t.Errorf("GET / on the AS2 listener during the shutdown delay = %d, %v; want 200", code, err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			t.Fatalf("exit after SIGTERM = %v, want 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("edihub did not exit after the shutdown delay")
	}
	log := p.log()
	for _, order := range [][2]string{{`"msg":"released"`, `"msg":"serving on before draining"`}, {`"msg":"serving on before draining"`, `"msg":"draining"`}} {
		i, j := strings.Index(log, order[0]), strings.Index(log, order[1])
		if i < 0 || j < 0 || i > j {
			t.Errorf("log: want %s before %s; log:\n%s", order[0], order[1], log)
		}
	}
}

// TestBinaryMDNLimit: EDIHUB_MAX_MDN_BYTES reaches the AS2 receiver: an
// async MDN above it is refused with 413 naming the limit, one below it
// is taken.
func TestBinaryMDNLimit(t *testing.T) {
	p := startReplica(t, "EDIHUB_MAX_MDN_BYTES=4096")
	post := func(size int) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, p.as2+"/as2", strings.NewReader(strings.Repeat("j", size)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("AS2-From", `"ACME CORP"`)
		req.Header.Set("AS2-To", "EDIHUB")
		req.Header.Set("Message-ID", "<mdn@acme>")
		req.Header.Set("Content-Type", "multipart/report; report-type=disposition-notification; boundary=b")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post(8192); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "4096 bytes") {
		t.Errorf("MDN of 8192 bytes with EDIHUB_MAX_MDN_BYTES=4096: HTTP %d %q, want 413 naming 4096 bytes", code, body)
	}
	if code, body := post(1024); code != http.StatusOK {
		t.Errorf("MDN of 1024 bytes: HTTP %d %q, want 200 (stored for the poller)", code, body)
	}
}
