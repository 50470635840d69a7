package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// hubStation is one edihub station of the hub-to-hub tests: a full serve
// (the same run main calls) with its own database, keys and config.
type hubStation struct {
	name     string // AS2 ID
	dir      string
	dbURL    string
	as2Addr  string
	opsAddr  string
	token    string
	logs     *hubLog
	stop     func()
	keyPath  string
	certPath string
	// extraEnv adds or overrides serve's environment.
	extraEnv []string
}

type hubLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *hubLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *hubLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func hubFreeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func newHubStation(t *testing.T, name string) *hubStation {
	t.Helper()
	s := &hubStation{name: name, dir: t.TempDir(), dbURL: pgtest.URL(t), as2Addr: hubFreeAddr(t), opsAddr: hubFreeAddr(t),
		token: "token-" + strings.ReplaceAll(name, " ", "-"), logs: &hubLog{}}
	id, err := devpki.New(name, devpki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.keyPath, s.certPath = filepath.Join(s.dir, "station.key"), filepath.Join(s.dir, "station.crt")
	if err := id.WriteFiles(s.keyPath, s.certPath); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *hubStation) as2URL() string { return "http://" + s.as2Addr + "/as2" }

// start writes the config naming peer as the only partner, with profile
// lines, and runs serve until the test ends.
func (s *hubStation) start(t *testing.T, peer *hubStation, profile ...string) {
	t.Helper()
	// Both stations run on 127.0.0.1: async MDNs to loopback must be
	// allowed explicitly.
	cfg := fmt.Sprintf("station: {as2_id: %q, private_key: station.key, certificate: station.crt, async_mdn_url: %q}\npartners:\n  - as2_id: %q\n    url: %q\n    certificate: %q\n    allow_private_mdn_targets: true\n",
		s.name, s.as2URL(), peer.name, peer.as2URL(), peer.certPath)
	for _, l := range profile {
		cfg += "    " + l + "\n"
	}
	path := filepath.Join(s.dir, "edihub.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The drain timeout is above net/http's 5 s grace for a connection that
	// was opened but has sent no request yet (a Go client's transport can
	// dial one it then leaves unused): Shutdown waits that long for it, so
	// a drain of 5 s could time out on such a connection.
	getenv := env(append([]string{
		"EDIHUB_DATABASE_URL", s.dbURL, "EDIHUB_CONFIG", path,
		"EDIHUB_HTTP_ADDR", s.as2Addr, "EDIHUB_OPS_ADDR", s.opsAddr,
		"EDIHUB_API_TOKEN", s.token, "EDIHUB_LEADER_BACKEND", "postgres",
		"EDIHUB_IDENTITY", strings.ReplaceAll(s.name, " ", "-"), "EDIHUB_SHUTDOWN_TIMEOUT", "10s",
		"EDIHUB_RETRY_BACKOFF", "200ms", "EDIHUB_RETRY_BACKOFF_MAX", "1s", "EDIHUB_LOG_LEVEL", "debug",
	}, s.extraEnv...)...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, getenv, io.Discard, s.logs) }()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: serve returned %v", s.name, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("%s: serve did not stop within 30s", s.name)
			}
		})
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("%s log:\n%s", s.name, s.logs.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("%s: serve exited early: %v\n%s", s.name, err, s.logs.String())
		default:
		}
		if resp, err := http.Get("http://" + s.as2Addr + "/"); err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not start:\n%s", s.name, s.logs.String())
}

func (s *hubStation) api(t *testing.T, method, path, ct string, body []byte, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.as2Addr+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil {
		if bp, ok := out.(*[]byte); ok {
			*bp = b
		} else if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

type hubMessage struct {
	ID          int64  `json:"id"`
	Direction   string `json:"direction"`
	Partner     string `json:"partner"`
	MessageID   string `json:"message_id"`
	Status      string `json:"status"`
	Disposition string `json:"disposition"`
	MIC         string `json:"mic"`
	Error       string `json:"error"`
	Location    string `json:"location"`
	Filename    string `json:"filename"`
	ContentType string `json:"content_type"`
}

// send queues doc at s for peer through the API and waits for one of the
// final statuses.
func (s *hubStation) send(t *testing.T, peer *hubStation, doc []byte, ct, filename string, want ...string) hubMessage {
	t.Helper()
	var q hubMessage
	path := "/api/v1/messages?partner=" + url.QueryEscape(peer.name) + "&filename=" + url.QueryEscape(filename)
	if c := s.api(t, "POST", path, ct, doc, &q); c != http.StatusAccepted {
		t.Fatalf("%s: POST %s = %d", s.name, path, c)
	}
	deadline := time.Now().Add(30 * time.Second)
	var m hubMessage
	for time.Now().Before(deadline) {
		s.api(t, "GET", q.Location, "", nil, &m)
		for _, w := range want {
			if m.Status == w {
				return m
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: message to %s has status %q (error %q), want one of %v", s.name, peer.name, m.Status, m.Error, want)
	return m
}

// received finds the inbound message with messageID at s.
func (s *hubStation) received(t *testing.T, messageID string) hubMessage {
	t.Helper()
	var l struct{ Messages []hubMessage }
	s.api(t, "GET", "/api/v1/messages?direction=inbound&limit=500", "", nil, &l)
	for _, m := range l.Messages {
		if m.MessageID == messageID {
			return m
		}
	}
	t.Fatalf("%s has no inbound message %s (has %+v)", s.name, messageID, l.Messages)
	return hubMessage{}
}

// TestHubToHub runs two edihub stations, each the other's partner, and
// exchanges documents in both directions with signed synchronous MDNs:
// delivered at the sender, received byte-exact at the receiver, with the
// same MIC on both sides.
func TestHubToHub(t *testing.T) {
	a, b := newHubStation(t, "HUB ALPHA"), newHubStation(t, "HUB-BRAVO")
	a.start(t, b, "sign: sha-256", "encrypt: aes256-cbc", "compress: true", "mdn: sync", "mdn_signed: true")
	b.start(t, a, "sign: sha-512", "encrypt: aes128-gcm", "key_encryption: rsa-oaep-sha256", "transfer_encoding: base64",
		"chunked: true", "compress: true", "compress_order: after-signing", "mdn: sync", "mdn_signed: true")

	for _, tt := range []struct {
		from, to *hubStation
		doc      []byte
		ct, name string
	}{
		{a, b, []byte("ISA*00*          *00*~\nGS*PO*ALPHA*BRAVO~\nlast line without CRLF\n"), "application/EDI-X12", "po-1.x12"},
		{b, a, bytes.Repeat([]byte("UNH+1+ORDERS:D:96A:UN'\r\n"), 2000), "application/EDIFACT", "orders 2.edi"},
		{a, b, []byte{0, 1, 2, 0xff, '\n', '\r', 0x80}, "application/octet-stream", ""},
	} {
		sent := tt.from.send(t, tt.to, tt.doc, tt.ct, tt.name, "delivered", "failed")
		if sent.Status != "delivered" || !strings.Contains(sent.Disposition, "processed") {
			t.Fatalf("%s → %s: status %q, disposition %q, error %q", tt.from.name, tt.to.name, sent.Status, sent.Disposition, sent.Error)
		}
		got := tt.to.received(t, sent.MessageID)
		if got.Partner != tt.from.name || got.MIC != sent.MIC || got.Filename != tt.name {
			t.Errorf("%s received %+v; sender MIC %q", tt.to.name, got, sent.MIC)
		}
		var payload []byte
		if c := tt.to.api(t, "GET", got.Location+"/payload", "", nil, &payload); c != 200 || !bytes.Equal(payload, tt.doc) {
			t.Errorf("%s payload = %d, %d bytes, want %d bytes byte-exact", tt.to.name, c, len(payload), len(tt.doc))
		}
		var mdnRaw []byte
		if c := tt.from.api(t, "GET", sent.Location+"/mdn", "", nil, &mdnRaw); c != 200 || !bytes.Contains(mdnRaw, []byte(sent.MessageID)) {
			t.Errorf("%s stored MDN = %d, %d bytes, without the Message-ID", tt.from.name, c, len(mdnRaw))
		}
	}
	m := a.metrics(t)
	for _, want := range []string{
		`edihub_as2_messages_sent_total{partner="HUB-BRAVO",result="delivered"} 2`,
		`edihub_outbox_due 0`,
		`edihub_outbox_in_flight 0`,
		`edihub_as2_send_duration_seconds_count{partner="HUB-BRAVO"} 2`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("%s /metrics lacks %s", a.name, want)
		}
	}
}

// hubMetrics returns the station's /metrics text.
func (s *hubStation) metrics(t *testing.T) string {
	t.Helper()
	resp, err := http.Get("http://" + s.opsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestHubToHubAsyncMDN: with an async MDN requested, the sender records
// awaiting-mdn, the receiver posts the MDN to the sender's /as2, where it
// lands in the MDN inbox, and the sender's leader (Postgres backend) runs
// the MDN poller, which applies it: the message ends delivered, the inbox
// MDN processed under the leader's fence.
func TestHubToHubAsyncMDN(t *testing.T) {
	a, b := newHubStation(t, "HUB ALPHA"), newHubStation(t, "HUB-BRAVO")
	a.start(t, b, "sign: sha-256", "encrypt: aes256-cbc", "mdn: async", "mdn_signed: true")
	b.start(t, a, "sign: sha-256", "mdn: async")

	sent := a.send(t, b, []byte("async please"), "application/EDI-X12", "a.x12", "awaiting-mdn", "delivered", "failed")
	if (sent.Status != "awaiting-mdn" && sent.Status != "delivered") || sent.MIC == "" {
		t.Fatalf("status %q (error %q), MIC %q; want awaiting-mdn (or delivered already) with a MIC", sent.Status, sent.Error, sent.MIC)
	}
	got := b.received(t, sent.MessageID)
	if got.MIC != sent.MIC {
		t.Errorf("receiver MIC %q, sender %q", got.MIC, sent.MIC)
	}

	var m hubMessage
	deadline := time.Now().Add(30 * time.Second)
	for m.Status != "delivered" && m.Status != "failed" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		a.api(t, "GET", sent.Location, "", nil, &m)
	}
	if m.Status != "delivered" || m.Disposition != "automatic-action/MDN-sent-automatically; processed" {
		t.Fatalf("after the async MDN: status %q, disposition %q, error %q; want delivered, processed", m.Status, m.Disposition, m.Error)
	}

	conn, err := pgx.Connect(context.Background(), a.dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	var state string
	var fence, token int64
	err = conn.QueryRow(context.Background(), `
SELECT count(*) OVER (), i.state, i.fence, f.token
  FROM mdn_inbox i, leader_fence f WHERE i.original_message_id = $1`, sent.MessageID).Scan(&n, &state, &fence, &token)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || state != "processed" || fence != token {
		t.Errorf("inbox: %d MDNs, state %q, fence %d; want 1, processed, the leader's token %d", n, state, fence, token)
	}
	var list struct {
		MDNs []struct {
			State   string `json:"state"`
			Message *int64 `json:"message"`
		} `json:"mdns"`
	}
	if c := a.api(t, "GET", "/api/v1/mdns?state=processed", "", nil, &list); c != http.StatusOK || len(list.MDNs) != 1 || list.MDNs[0].Message == nil || *list.MDNs[0].Message != sent.ID {
		t.Errorf("GET /api/v1/mdns?state=processed = %d %+v, want the one MDN, applied to message %d", c, list, sent.ID)
	}
	metrics := a.metrics(t)
	for _, want := range []string{
		`edihub_mdn_processed_total{partner="HUB-BRAVO",result="delivered"} 1`,
		`edihub_mdn_latency_seconds_count 1`,
		`edihub_worker_last_success_timestamp_seconds{worker="mdn-poller"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("sender metrics lack %s", want)
		}
	}
}

// TestResendCommand: edihub resend queues a failed message again, straight
// in the database, with the same Message-ID; the running station's
// dispatcher, woken by the requeue, delivers it. Messages that are not
// failed or overdue are refused.
func TestResendCommand(t *testing.T) {
	a, b := newHubStation(t, "HUB ALPHA"), newHubStation(t, "HUB-BRAVO")
	a.start(t, b, "sign: sha-256", "mdn: sync", "mdn_signed: true", "max_attempts: 1", "retry_window: 1ms")
	// BRAVO is not running yet: the one attempt fails.
	failed := a.send(t, b, []byte("ST*850*0002~\n"), "application/EDI-X12", "b.x12", "failed", "delivered")
	if failed.Status != "failed" {
		t.Fatalf("status %q, want failed while the partner is down", failed.Status)
	}
	b.start(t, a, "mdn: sync")
	getenv := env("EDIHUB_DATABASE_URL", a.dbURL)
	out, errOut, err := runCmd(t, getenv, "resend", strconv.FormatInt(failed.ID, 10))
	if err != nil {
		t.Fatalf("edihub resend = %v: %s", err, errOut)
	}
	var q hubMessage
	if err := json.Unmarshal([]byte(out), &q); err != nil || q.ID != failed.ID || q.MessageID != failed.MessageID || q.Status != "queued" {
		t.Fatalf("edihub resend printed %q (%v), want message %d queued with Message-ID %s", out, err, failed.ID, failed.MessageID)
	}
	// It prints what the API shows of the message: the same keys in the
	// same order, the Message-ID's <> as they are.
	var apiOut []byte
	a.api(t, "GET", failed.Location, "", nil, &apiOut)
	// (The message moves on meanwhile: keys left out while empty may
	// differ, their order may not.)
	got, want := jsonKeys(t, []byte(out)), jsonKeys(t, apiOut)
	if common := slices.DeleteFunc(slices.Clone(want), func(k string) bool { return !slices.Contains(got, k) }); len(got) < 10 || !slices.Equal(got, common) {
		t.Errorf("edihub resend printed the keys %v, want those of GET %s in its order: %v", got, failed.Location, want)
	}
	if !strings.Contains(out, `"message_id": "`+failed.MessageID+`"`) {
		t.Errorf("edihub resend printed %s, want the Message-ID %s unescaped", out, failed.MessageID)
	}
	var m hubMessage
	deadline := time.Now().Add(30 * time.Second)
	for m.Status != "delivered" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		a.api(t, "GET", failed.Location, "", nil, &m)
	}
	if m.Status != "delivered" || m.MessageID != failed.MessageID || m.MIC != failed.MIC {
		t.Fatalf("after edihub resend: %+v, want delivered with the same Message-ID and MIC", m)
	}
	b.received(t, failed.MessageID)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"delivered", []string{"resend", strconv.FormatInt(failed.ID, 10)}, "status is delivered"},
		{"unknown", []string{"resend", "999999"}, "no message 999999"},
		{"no id", []string{"resend"}, "exactly one message ID"},
		{"not an id", []string{"resend", "abc"}, "not a message id"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCmd(t, getenv, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("edihub %v = %v, want an error mentioning %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestSendCommand queues a file with edihub send (straight into the
// database) while a station runs; its dispatcher delivers it.
func TestSendCommand(t *testing.T) {
	a, b := newHubStation(t, "HUB ALPHA"), newHubStation(t, "HUB-BRAVO")
	a.start(t, b, "sign: sha-256", "encrypt: aes256-cbc", "mdn: sync", "mdn_signed: true")
	b.start(t, a, "mdn: sync")
	doc := []byte("ST*850*0001~\n")
	file := filepath.Join(t.TempDir(), "order 850.x12")
	if err := os.WriteFile(file, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := env("EDIHUB_DATABASE_URL", a.dbURL, "EDIHUB_CONFIG", filepath.Join(a.dir, "edihub.yaml"))
	out, errOut, err := runCmd(t, getenv, "send", "--partner", b.name, "--content-type", "application/EDI-X12", file)
	if err != nil {
		t.Fatalf("edihub send = %v: %s", err, errOut)
	}
	var q hubMessage
	if err := json.Unmarshal([]byte(out), &q); err != nil || q.ID == 0 || q.Status != "queued" || q.Location == "" {
		t.Fatalf("edihub send printed %q (%v)", out, err)
	}
	// It prints what POST /api/v1/messages answers, byte for byte but for
	// the message's own id and Message-ID: the same keys in the same
	// order, the same indentation, the Message-ID's <> unescaped.
	var apiOut []byte
	a.api(t, "POST", "/api/v1/messages?partner="+url.QueryEscape(b.name), "application/EDI-X12", doc, &apiOut)
	var viaAPI hubMessage
	if err := json.Unmarshal(apiOut, &viaAPI); err != nil || viaAPI.ID == 0 {
		t.Fatalf("POST /api/v1/messages answered %q (%v)", apiOut, err)
	}
	want := strings.NewReplacer(
		viaAPI.MessageID, q.MessageID,
		fmt.Sprintf(`"id": %d,`, viaAPI.ID), fmt.Sprintf(`"id": %d,`, q.ID),
		fmt.Sprintf(`/messages/%d"`, viaAPI.ID), fmt.Sprintf(`/messages/%d"`, q.ID),
	).Replace(string(apiOut))
	if diff := cmp.Diff(want, out); diff != "" {
		t.Errorf("edihub send printed another JSON than POST /api/v1/messages answers (-API +send):\n%s", diff)
	}
	deadline := time.Now().Add(30 * time.Second)
	var m hubMessage
	for m.Status != "delivered" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		a.api(t, "GET", q.Location, "", nil, &m)
	}
	if m.Status != "delivered" || m.Filename != "order 850.x12" || m.ContentType != "application/EDI-X12" {
		t.Fatalf("sent with edihub send: %+v", m)
	}
	var payload []byte
	b.api(t, "GET", b.received(t, m.MessageID).Location+"/payload", "", nil, &payload)
	if !bytes.Equal(payload, doc) {
		t.Errorf("received %q, want %q", payload, doc)
	}

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown partner", []string{"send", "-partner", "NOBODY", file}, `unknown partner "NOBODY"`},
		{"no file", []string{"send", "-partner", b.name}, "FILE"},
		{"missing file", []string{"send", "-partner", b.name, file + ".missing"}, "no such file"},
		{"no partner", []string{"send", file}, "-partner"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCmd(t, getenv, tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("edihub %v = %v, want an error mentioning %q", tt.args, err, tt.want)
			}
		})
	}
}

// jsonKeys are the keys of the JSON object b, in order.
func jsonKeys(t *testing.T, b []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%q is not a JSON object: %v", b, err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}
