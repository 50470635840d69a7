package httpserver_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/httpserver"
)

// TestChunkedWithContentLengthClosesConnection: a request carrying both
// Content-Length and Transfer-Encoding: chunked is answered, then the
// connection is closed (RFC 9112 §6.1), so that a request smuggled after
// its chunked body is never answered; a request framed by Content-Length
// alone keeps the connection for the next one.
func TestChunkedWithContentLengthClosesConnection(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, string(b))
		mu.Unlock()
		io.WriteString(w, "ok")
	})
	base := serve(t, "as2", httpserver.NewRouter(httpserver.RouterOptions{
		Logger: zap.NewNop(), Metrics: httpserver.NewMetrics(prometheus.NewRegistry()), MaxBodyBytes: 1 << 20, AS2: h,
	}))
	smuggled := "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\nsmuggled"
	tests := []struct {
		name       string
		first      string
		wantSecond bool
	}{
		{"Content-Length and chunked", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 48\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n0\r\n\r\n", false},
		{"chunked and Content-Length", "POST /as2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n5\r\nfirst\r\n0\r\n\r\n", false},
		{"Content-Length only", "POST /as2 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nfirst", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mu.Lock()
			seen = nil
			mu.Unlock()
			conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.WriteString(conn, tt.first+smuggled); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("first request: no answer: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(b) != "ok" {
				t.Fatalf("first request = %d %q, want 200 ok", resp.StatusCode, b)
			}
			if resp.Close == tt.wantSecond {
				t.Errorf("first answer's Connection: close = %v, want %v", resp.Close, !tt.wantSecond)
			}
			resp, err = http.ReadResponse(br, nil)
			if tt.wantSecond {
				if err != nil {
					t.Fatalf("second request on a Content-Length connection: no answer: %v", err)
				}
				resp.Body.Close()
			} else {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("the request after the chunked body was answered %d, want the connection closed", resp.StatusCode)
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					t.Fatalf("connection still open after the answer (read: %v), want it closed", err)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			want := []string{"first"}
			if tt.wantSecond {
				want = append(want, "smuggled")
			}
			if strings.Join(seen, ",") != strings.Join(want, ",") {
				t.Errorf("handler saw bodies %q, want %q", seen, want)
			}
		})
	}
}
