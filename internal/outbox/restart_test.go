package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/httpserver"
	"github.com/edihub/edihub/internal/receiver"
	"github.com/edihub/edihub/internal/spool"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// restartPartner is a fake AS2 partner that implements the receiving
// side of AS2 restart: it breaks the first POST off after cut bytes,
// keeping them, answers HEAD with headLength (-1: the bytes kept; -2:
// the first POST's whole Content-Length, as if it held every byte) and a
// resume with resumeStatus (0: it appends and answers 200). It records
// every request.
type restartPartner struct {
	*httptest.Server
	cut          int
	headLength   int
	resumeStatus int

	mu    sync.Mutex
	held  []byte
	total int64  // the first POST's Content-Length
	got   []byte // the message it assembled, once complete
	reqs  []restartRequest
}

type restartRequest struct {
	method string
	header http.Header
	n      int // body bytes read
}

func newRestartPartner(t *testing.T, cut, headLength, resumeStatus int) *restartPartner {
	p := &restartPartner{cut: cut, headLength: headLength, resumeStatus: resumeStatus}
	p.Server = httptest.NewServer(http.HandlerFunc(p.serve))
	t.Cleanup(p.Close)
	return p
}

func (p *restartPartner) serve(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	first := len(p.reqs) == 0
	rr := restartRequest{method: r.Method, header: r.Header.Clone()}
	switch {
	case r.Method == http.MethodHead:
		p.reqs = append(p.reqs, rr)
		n := int64(p.headLength)
		switch n {
		case -1:
			n = int64(len(p.held))
		case -2:
			n = p.total
		}
		w.Header().Set("Content-Length", fmt.Sprint(n))
		w.WriteHeader(http.StatusOK)
	case first && p.cut > 0:
		p.total = r.ContentLength
		buf := make([]byte, p.cut)
		rr.n, _ = io.ReadFull(r.Body, buf)
		p.held = buf[:rr.n]
		p.reqs = append(p.reqs, rr)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close() // the line breaks
		}
	default:
		body, _ := io.ReadAll(r.Body)
		rr.n = len(body)
		p.reqs = append(p.reqs, rr)
		if r.Header.Get("Content-Range") == "" {
			p.got = body
		} else if p.resumeStatus != 0 {
			w.WriteHeader(p.resumeStatus)
			return
		} else {
			p.got = append(bytes.Clone(p.held), body...)
		}
		w.WriteHeader(http.StatusOK)
	}
}

func (p *restartPartner) requests() ([]restartRequest, []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]restartRequest(nil), p.reqs...), p.got
}

// TestSendWithRestart sends a message larger than the restart threshold
// to partners whose line breaks after the first 3 MiB of the first
// POST: with as2_restart: true the retry asks HEAD and sends only the
// rest (Content-Range), or the whole body when the partner holds nothing,
// reports every byte held (there is no rest to send: an empty range is
// never posted) or refuses the resume; without it, the retry sends the
// whole body, no ETag and no HEAD. In every case the partner ends with exactly the
// body frozen in the outbox.
func TestSendWithRestart(t *testing.T) {
	const cut = 3 << 20
	tests := []struct {
		name         string
		restart      bool
		headLength   int // -1: what it holds; -2: every byte
		resumeStatus int
		want         []string // method and Content-Range of each request
	}{
		{"resumed", true, -1, 0, []string{"POST", "HEAD", fmt.Sprintf("POST bytes %d-", cut)}},
		{"partner holds nothing", true, 0, 0, []string{"POST", "HEAD", "POST"}},
		{"partner holds every byte", true, -2, 0, []string{"POST", "HEAD", "POST"}},
		{"resume refused", true, -1, http.StatusRequestedRangeNotSatisfiable, []string{"POST", "HEAD", fmt.Sprintf("POST bytes %d-", cut), "POST"}},
		{"profile without restart", false, -1, 0, []string{"POST", "POST"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := pgtest.URL(t)
			st := openStore(t, url)
			partner := newRestartPartner(t, cut, tt.headLength, tt.resumeStatus)
			extra := []string{"mdn: none"}
			if tt.restart {
				extra = append(extra, "as2_restart: true")
			}
			cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL, extra: extra})
			startDispatcher(t, dispatcherOpts(t, st, cfg, "replica"))
			payload := bytes.Repeat([]byte("ISA*00*restart test line of a large catalogue~\n"), (9<<20)/48)
			q := enqueue(t, st, cfg, partnerID, payload, "application/EDI-X12", "")
			if m := waitStatus(t, st, q.ID, "sent", "failed"); m.Status != "sent" {
				t.Fatalf("message status %q (%s), want sent", m.Status, m.Error)
			}
			conn, err := pgx.Connect(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			var body []byte
			if err := conn.QueryRow(context.Background(), `SELECT body FROM outbox WHERE message_id = $1`, q.ID).Scan(&body); err != nil {
				t.Fatal(err)
			}
			reqs, got := partner.requests()
			var seen []string
			for _, r := range reqs {
				s := r.method
				if cr := r.header.Get("Content-Range"); cr != "" {
					s += " " + cr[:strings.Index(cr, "-")+1]
				}
				seen = append(seen, s)
			}
			if fmt.Sprint(seen) != fmt.Sprint(tt.want) {
				t.Fatalf("requests = %q, want %q", seen, tt.want)
			}
			if !bytes.Equal(got, body) {
				t.Errorf("partner assembled %d bytes, want the %d frozen in the outbox, equal", len(got), len(body))
			}
			etag := reqs[0].header.Get("ETag")
			if tt.restart != (etag != "") {
				t.Errorf("first POST ETag = %q, want one only with as2_restart: true", etag)
			}
			for _, r := range reqs[1:] {
				if r.method == http.MethodHead || r.header.Get("Content-Range") != "" {
					if m := r.header.Get("If-Match"); m != etag || r.header.Get("AS2-From") == "" {
						t.Errorf("%s If-Match = %q, AS2-From %q; want the first POST's ETag %q and the AS2 fields", r.method, m, r.header.Get("AS2-From"), etag)
					}
				}
				if cr := r.header.Get("Content-Range"); cr != "" && cr != fmt.Sprintf("bytes %d-%d/%d", cut, len(body)-1, len(body)) {
					t.Errorf("Content-Range = %q, want bytes %d-%d/%d", cr, cut, len(body)-1, len(body))
				}
			}
		})
	}
}

// cuttingProxy forwards TCP connections to target. The first one it
// cuts: it forwards the first cut bytes the client sends, closes the
// target's side for writing, waits for the target's answer (the target
// has then stored what arrived) and closes both.
func cuttingProxy(t *testing.T, target string, cut int64) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for n := 0; ; n++ {
			client, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer client.Close()
				server, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer server.Close()
				if n == 0 {
					_, _ = io.CopyN(server, client, cut)
					_ = server.(*net.TCPConn).CloseWrite()
					_, _ = io.Copy(io.Discard, server)
					return
				}
				var both sync.WaitGroup
				both.Go(func() {
					_, _ = io.Copy(server, client)
					_ = server.(*net.TCPConn).CloseWrite()
				})
				_, _ = io.Copy(client, server)
				client.Close()
				both.Wait()
			})
		}
	})
	return l.Addr().String()
}

// TestSendWithRestartToEdihub sends a signed, encrypted 9 MiB message
// with a signed MDN requested from one edihub to another (the real
// receiver, over its own database) through a line that breaks after
// 4 MiB of the first request: the retry asks HEAD, sends the rest, and
// the message is delivered with its MDN verified; the receiver counts
// one transfer interrupted, resumed and completed, stores the message
// once and keeps no transfer.
func TestSendWithRestartToEdihub(t *testing.T) {
	for _, streamed := range []bool{false, true} {
		t.Run(map[bool]string{false: "built in memory", true: "built as a stream into the spool"}[streamed], func(t *testing.T) {
			sendWithRestartToEdihub(t, streamed)
		})
	}
}

// sendWithRestartToEdihub is TestSendWithRestartToEdihub with the
// message built in memory or, streamed, into the sender's spool.
func sendWithRestartToEdihub(t *testing.T, streamed bool) {
	k := keys(t)
	recvURL := pgtest.URL(t)
	recvStore := openStore(t, recvURL)
	dir := t.TempDir()
	recvYAML := fmt.Sprintf("station: {as2_id: %q, private_key: %q, certificate: %q}\npartners:\n  - {as2_id: \"EDIHUB TEST\", url: \"http://127.0.0.1:1/as2\", certificate: %q}\n",
		partnerID, k["partner"].keyPath, k["partner"].certPath, k["station"].certPath)
	recvCfg, err := config.Parse([]byte(recvYAML), dir, "receiver.yaml", config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sp, err := spool.New(dir, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	reg := prometheus.NewRegistry()
	h, err := receiver.New(receiver.Options{
		Store: recvStore, Partners: recvCfg, Station: receiver.StationFromConfig(recvCfg.Station),
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), Registerer: reg,
		Spool: sp, Restart: recvStore,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpserver.NewRouter(httpserver.RouterOptions{
		Logger: zap.NewNop(), Metrics: httpserver.NewMetrics(prometheus.NewRegistry()), MaxBodyBytes: 64 << 20, AS2: h,
	}))
	t.Cleanup(srv.Close)
	proxy := cuttingProxy(t, strings.TrimPrefix(srv.URL, "http://"), 4<<20)

	url := pgtest.URL(t)
	st := openStore(t, url)
	cfg := loadConfig(t, partnerYAML{id: partnerID, url: "http://" + proxy + "/as2",
		extra: []string{"sign: sha-256", "encrypt: aes256-cbc", "mdn: sync", "mdn_signed: true", "as2_restart: true"}})
	o := dispatcherOpts(t, st, cfg, "replica")
	if streamed {
		sendSpool, err := spool.New(t.TempDir(), 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sendSpool.Close() })
		o.Spool, o.SpoolFromBytes = sendSpool, 1<<20
	}
	startDispatcher(t, o)
	payload := bytes.Repeat([]byte("ISA*00*restart test line of a large catalogue~\n"), (9<<20)/48)
	q := enqueue(t, st, cfg, partnerID, payload, "application/EDI-X12", "")
	if m := waitStatus(t, st, q.ID, "delivered", "failed"); m.Status != "delivered" {
		t.Fatalf("message status %q (%s), want delivered", m.Status, m.Error)
	}
	sender, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close(context.Background())
	var chunked bool
	if err := sender.QueryRow(context.Background(), `SELECT body_chunked FROM outbox WHERE message_id = $1`, q.ID).Scan(&chunked); err != nil {
		t.Fatal(err)
	}
	if chunked != streamed {
		t.Fatalf("the built body is stored in pieces: %v, want %v (the build did not take the path under test)", chunked, streamed)
	}
	for _, event := range []string{"begun", "interrupted", "resumed", "completed"} {
		if got := counterValue(t, reg, "edihub_as2_restart_total", "event", event); got != 1 {
			t.Errorf("receiver edihub_as2_restart_total{event=%q} = %v, want 1", event, got)
		}
	}
	recv, err := pgx.Connect(context.Background(), recvURL)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close(context.Background())
	var stored, left int
	var got []byte
	if err := recv.QueryRow(context.Background(), `
SELECT (SELECT count(*) FROM messages WHERE direction = 'inbound' AND status = 'processed'),
       (SELECT count(*) FROM restart_transfers),
       (SELECT string_agg(c.data, ''::bytea ORDER BY c.seq) FROM payload_chunks c)`).Scan(&stored, &left, &got); err != nil {
		t.Fatal(err)
	}
	if stored != 1 || left != 0 || !bytes.Equal(got, payload) {
		t.Errorf("receiver: %d messages processed, %d transfers left, payload equal %v; want 1, 0, true", stored, left, bytes.Equal(got, payload))
	}
}
