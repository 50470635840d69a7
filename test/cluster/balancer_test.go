package cluster

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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
