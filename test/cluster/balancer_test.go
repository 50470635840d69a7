package cluster

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// backend answers with its name and the body it got.
func backend(t *testing.T, name string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		io.WriteString(w, name+":"+r.Method+" "+r.URL.Path+" "+string(b))
	}))
	t.Cleanup(s.Close)
	return s
}

func post(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "text/plain", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestBalancer(t *testing.T) {
	a, b := backend(t, "a"), backend(t, "b")
	dead, err := FreeAddr() // nothing listens: connections are refused
	if err != nil {
		t.Fatal(err)
	}
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	lb, err := StartBalancer("127.0.0.1:0", host(a), dead, host(b))
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()

	got := map[string]int{}
	for range 6 {
		code, body := post(t, lb.URL()+"/as2", "doc")
		if code != http.StatusOK {
			t.Fatalf("POST through the balancer: %d %s", code, body)
		}
		name, rest, _ := strings.Cut(body, ":")
		if rest != "POST /as2 doc" {
			t.Errorf("backend %s got %q, want the request as sent", name, rest)
		}
		got[name]++
	}
	// Every request answered although a backend is dead: its turns go to
	// the next one (a, dead→b, a, dead→b, ...).
	if got["a"] != 3 || got["b"] != 3 {
		t.Errorf("requests per backend %v, want a:3 b:3 (round robin, the dead backend skipped)", got)
	}
	if s := lb.Served(); s[host(a)] != 3 || s[host(b)] != 3 || s[dead] != 0 {
		t.Errorf("Served() = %v", s)
	}

	// Held requests wait for Release.
	lb.Hold()
	done := make(chan string, 1)
	go func() {
		resp, err := http.Post(lb.URL()+"/x", "text/plain", strings.NewReader("held"))
		if err != nil {
			done <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		done <- string(b)
	}()
	select {
	case r := <-done:
		t.Fatalf("held request answered: %q", r)
	case <-time.After(300 * time.Millisecond):
	}
	lb.Release()
	select {
	case r := <-done:
		if !strings.HasSuffix(r, "POST /x held") {
			t.Errorf("released request: %q", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("released request not answered")
	}

	// No backend answers: 502.
	lb.SetBackends(dead)
	if code, body := post(t, lb.URL()+"/", ""); code != http.StatusBadGateway {
		t.Errorf("only a dead backend: %d %s, want 502", code, body)
	}
}

// TestBalancerWatch: with readiness checks and retries, a backend that
// answers 503 (cut from its database) and one that does not answer at all
// (frozen) cost no request: the first is retried on the next backend at
// once, the second after the try timeout, and both leave the rotation
// once their readiness checks fail, and come back once they pass.
func TestBalancerWatch(t *testing.T) {
	good := backend(t, "good")
	var cutOff, frozen atomic.Bool
	cutOff.Store(true)
	frozen.Store(true)
	release := make(chan struct{})
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cutOff.Load() {
			http.Error(w, "not stored", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "cut:back")
	}))
	t.Cleanup(cut.Close)
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if frozen.Load() && r.URL.Path != "/readyz" {
			<-release
		}
		if frozen.Load() {
			http.Error(w, "frozen", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "stuck:back")
	}))
	t.Cleanup(func() { close(release); stuck.Close() })
	host := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	lb, err := StartBalancer("127.0.0.1:0", host(cut), host(stuck), host(good))
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	lb.Watch(func(be string) string { return "http://" + be + "/readyz" }, 50*time.Millisecond, time.Second, 2, 300*time.Millisecond)

	for i := range 12 {
		if code, body := post(t, lb.URL()+"/as2", "doc"); code != http.StatusOK || !strings.HasPrefix(body, "good:") {
			t.Fatalf("request %d: %d %q, want good's answer", i, code, body)
		}
	}
	// Both failing backends leave the rotation: good answers every
	// request, each at once.
	deadline := time.Now().Add(10 * time.Second)
	for !lb.isUnready(host(cut)) || !lb.isUnready(host(stuck)) {
		if time.Now().After(deadline) {
			t.Fatal("the failing backends never left the rotation")
		}
		time.Sleep(20 * time.Millisecond) // stays: bounded poll, the balancer's real health probes run on their own period
	}
	cutOff.Store(false)
	frozen.Store(false)
	for time.Now().Before(deadline) && (lb.isUnready(host(cut)) || lb.isUnready(host(stuck))) {
		time.Sleep(20 * time.Millisecond) // stays: as above
	}
	got := map[string]bool{}
	for range 6 {
		_, body := post(t, lb.URL()+"/as2", "doc")
		name, _, _ := strings.Cut(body, ":")
		got[name] = true
	}
	if !got["cut"] || !got["stuck"] || !got["good"] {
		t.Errorf("after recovering, answers came from %v, want all three backends", got)
	}
}
