package receiver_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/receiver"
	"github.com/edihub/edihub/internal/spool"
)

// panicStore panics when it stores the message with Message-ID panicID.
type panicStore struct {
	receiver.Store
}

const panicID = "<panic@x>"

func (p panicStore) SaveInbound(ctx context.Context, m *postgres.InboundMessage) (int64, error) {
	if m.MessageID == panicID {
		panic("store failed")
	}
	return p.Store.SaveInbound(ctx, m)
}

// waitSpoolEmpty waits until the spool holds no file and no byte: the
// handler removes its files after it answered.
func waitSpoolEmpty(t *testing.T, e *env, after string) {
	t.Helper()
	for range 1000 {
		files, _ := filepath.Glob(filepath.Join(e.spool.Dir(), "f-*"))
		if len(files) == 0 && e.spool.Used() == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond) // stays: bounded poll, the spool signals no removal
	}
	files, _ := filepath.Glob(filepath.Join(e.spool.Dir(), "f-*"))
	t.Fatalf("after %s: spool holds %d bytes in %v, want nothing", after, e.spool.Used(), files)
}

// TestSpoolCleanedOnEveryPath receives through the spool and checks
// after each outcome (processed, chunked, decryption and signature
// failures, a duplicate, a body over the limit, a body not sent in time,
// a spool that fills up while unwrapping, a panic while storing) that
// the request's spool files are gone and their bytes given back.
func TestSpoolCleanedOnEveryPath(t *testing.T) {
	e := newEnv(t, envOptions{spool: true, spoolBytes: 1536 << 10, maxBody: 1 << 20, readTimeout: 500 * time.Millisecond,
		wrap: func(s receiver.Store) receiver.Store { return panicStore{s} }})
	good := buildOpenSSL(t, build{sign: "sha256", enc: "aes256", comp: "before"})
	stranger := buildOpenSSL(t, build{sign: "sha256", enc: "aes256", recipient: idC})
	tampered := buildOpenSSL(t, build{sign: "sha256"})
	tampered.body = bytes.Replace(tampered.body, []byte("BEG*00"), []byte("BEG*01"), 1)
	big := bytes.Repeat([]byte("0123456789ABCDEF"), (900<<10)/16)
	plain := func(id string) http.Header {
		h := as2Header(partnerACME, station, id, "sha-256")
		h.Set("Content-Type", "application/octet-stream")
		return h
	}
	disposition := func(id string, m opensslMessage, chunked bool) string {
		r := post(t, e.url, request(as2Header(partnerACME, station, id, "sha-256"), m), m.body, chunked)
		return parseMDN(t, r).Disposition.String()
	}
	steps := []struct {
		name string
		do   func(t *testing.T)
	}{
		{"processed", func(t *testing.T) { wantDisp(t, disposition("<ok@x>", good, false), processed) }},
		{"processed, chunked", func(t *testing.T) { wantDisp(t, disposition("<chunked@x>", good, true), processed) }},
		{"duplicate", func(t *testing.T) { wantDisp(t, disposition("<ok@x>", good, false), processed) }},
		{"decryption failed", func(t *testing.T) { wantDisp(t, disposition("<stranger@x>", stranger, false), "decryption-failed") }},
		{"signature altered", func(t *testing.T) {
			wantDisp(t, disposition("<tampered@x>", tampered, false), "integrity-check-failed")
		}},
		{"over the body limit, chunked", func(t *testing.T) {
			r := post(t, e.url, plain("<huge@x>"), bytes.Repeat(big, 2), true)
			wantStatus(t, r.status, http.StatusRequestEntityTooLarge)
		}},
		{"spool full while unwrapping", func(t *testing.T) {
			r := post(t, e.url, plain("<full@x>"), big, false)
			wantStatus(t, r.status, http.StatusServiceUnavailable)
		}},
		{"body not sent in time", func(t *testing.T) {
			resp, _ := rawRequest(t, e.url, "AS2-From: \"ACME CORP\"\r\nAS2-To: \"EDIHUB HUB\"\r\nMessage-ID: <slow@x>\r\nContent-Type: application/octet-stream\r\n", 1<<19, strings.Repeat("x", 1000))
			wantStatus(t, resp.StatusCode, http.StatusRequestTimeout)
		}},
		{"panic while storing", func(t *testing.T) {
			// The router's recovery answers 500.
			r := post(t, e.url, request(as2Header(partnerACME, station, panicID, "sha-256"), good), good.body, false)
			wantStatus(t, r.status, http.StatusInternalServerError)
		}},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			s.do(t)
			waitSpoolEmpty(t, e, s.name)
		})
	}
	if got, ok := gathered(t, e, "edihub_as2_spool_bytes"); !ok || got != 0 {
		t.Errorf("edihub_as2_spool_bytes = %v (exported: %v), want 0", got, ok)
	}
	if got := metricValue(e.reg, "edihub_as2_busy_total", map[string]string{"partner": partnerACME, "stage": "spool"}); got != 1 {
		t.Errorf("edihub_as2_busy_total{stage=spool} = %v, want 1 (the spool that filled up)", got)
	}
	if n := e.count(t, `SELECT count(*) FROM payloads WHERE chunked`); n != 2 {
		t.Errorf("payloads stored in pieces = %d, want 2 (the processed messages)", n)
	}
	if entries, _ := os.ReadDir(e.spool.Dir()); len(entries) != 1 { // the lock file
		t.Errorf("spool directory holds %d entries, want only its lock", len(entries))
	}
}

// gathered returns the value of the unlabelled gauge name, and whether
// it is exported.
func gathered(t *testing.T, e *env, name string) (float64, bool) {
	t.Helper()
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetGauge() != nil {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

func wantDisp(t *testing.T, got, want string) {
	t.Helper()
	if !strings.Contains(got, want) {
		t.Errorf("disposition = %q, want %q", got, want)
	}
}

func wantStatus(t *testing.T, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("status = %d, want %d", got, want)
	}
}

// TestSpooledStagedPayload: a spooled message's payload is stored as it
// is unwrapped (postgres.StagedPayload); a message refused half-way
// (signature, decryption) or resent leaves nothing of its stage, and the
// one processed has its payload once.
func TestSpooledStagedPayload(t *testing.T) {
	e := newEnv(t, envOptions{spool: true, spoolBytes: 64 << 20})
	good := buildOpenSSL(t, build{sign: "sha256", enc: "aes256", comp: "before"})
	stranger := buildOpenSSL(t, build{sign: "sha256", enc: "aes256", recipient: idC})
	tampered := buildOpenSSL(t, build{sign: "sha256", enc: "aes256"})
	tampered.body[len(tampered.body)/2] ^= 1
	send := func(id string, m opensslMessage, chunked bool) string {
		r := post(t, e.url, request(as2Header(partnerACME, station, id, "sha-256"), m), m.body, chunked)
		return parseMDN(t, r).Disposition.String()
	}
	wantDisp(t, send("<staged@x>", good, true), processed)
	wantDisp(t, send("<staged@x>", good, true), processed) // a resend: the first MDN
	wantDisp(t, send("<stranger@x>", stranger, true), "decryption-failed")
	wantDisp(t, send("<flipped@x>", tampered, true), "decryption-failed")
	waitSpoolEmpty(t, e, "the messages")
	if n := e.count(t, `SELECT count(*) FROM messages WHERE message_id LIKE 'edihub-staged-%'`); n != 0 {
		t.Errorf("placeholder rows = %d, want 0", n)
	}
	if n := e.count(t, `SELECT count(DISTINCT message_id) FROM payload_chunks`); n != 1 {
		t.Errorf("messages with payload pieces = %d, want 1 (the processed one)", n)
	}
	if n := e.count(t, `SELECT count(*) FROM payloads p JOIN messages m ON m.id = p.message_id WHERE m.message_id = '<staged@x>' AND p.chunked`); n != 1 {
		t.Errorf("payloads of the processed message = %d, want 1", n)
	}
}

// stageStore watches the stages of the receiver's payloads: it records
// the spool's use when a message is stored, and fails the stage (its
// context cancelled once it began) when failStage is set.
type stageStore struct {
	receiver.Store
	stager interface {
		StageInboundPayload(ctx context.Context, partner string) (*postgres.StagedPayload, error)
	}
	spool      *spool.Spool
	failStage  bool
	usedAtSave int64
}

func (s *stageStore) StageInboundPayload(ctx context.Context, partner string) (*postgres.StagedPayload, error) {
	if !s.failStage {
		return s.stager.StageInboundPayload(ctx, partner)
	}
	sctx, cancel := context.WithCancel(ctx)
	p, err := s.stager.StageInboundPayload(sctx, partner)
	cancel()
	return p, err
}

func (s *stageStore) SaveInbound(ctx context.Context, m *postgres.InboundMessage) (int64, error) {
	s.usedAtSave = s.spool.Used()
	return s.Store.SaveInbound(ctx, m)
}

// TestSpooledStagedPayloadOnce: a payload stored in the database as it
// is unwrapped is not written to the spool too (when the message is
// stored, the spool holds its body only), and a stage that fails, the
// payload's only copy, is answered as a failed store (503: nothing
// accepted, resend) with nothing stored and nothing left behind.
func TestSpooledStagedPayloadOnce(t *testing.T) {
	ss := &stageStore{}
	e := newEnv(t, envOptions{spool: true, spoolBytes: 64 << 20, wrap: func(s receiver.Store) receiver.Store {
		ss.Store, ss.stager = s, s.(*postgres.Store)
		return ss
	}})
	ss.spool = e.spool
	ignore := goleak.IgnoreCurrent()
	good := buildOpenSSL(t, build{sign: "sha256", enc: "aes256", comp: "before"})
	send := func(id string) reply {
		return post(t, e.url, request(as2Header(partnerACME, station, id, "sha-256"), good), good.body, true)
	}
	wantDisp(t, parseMDN(t, send("<once@x>")).Disposition.String(), processed)
	if ss.usedAtSave != int64(len(good.body)) {
		t.Errorf("spool use when stored = %d bytes, want the body's %d only", ss.usedAtSave, len(good.body))
	}
	ss.failStage = true
	r := send("<stage-failed@x>")
	wantStatus(t, r.status, http.StatusServiceUnavailable)
	waitSpoolEmpty(t, e, "the failed stage")
	if n := e.count(t, `SELECT count(*) FROM messages WHERE message_id IN ('<stage-failed@x>') OR message_id LIKE 'edihub-staged-%'`); n != 0 {
		t.Errorf("rows of the failed stage = %d, want 0", n)
	}
	if n := e.count(t, `SELECT count(DISTINCT message_id) FROM payload_chunks`); n != 1 {
		t.Errorf("messages with payload pieces = %d, want 1 (the processed one)", n)
	}
	// The partner's resend is received.
	ss.failStage = false
	wantDisp(t, parseMDN(t, send("<stage-failed@x>")).Disposition.String(), processed)
	http.DefaultClient.CloseIdleConnections()
	// The pool's new connections have their watchers (postgres.Open).
	goleak.VerifyNone(t, ignore, goleak.IgnoreTopFunction("github.com/edihub/edihub/internal/postgres.(*watchedConn).watch"))
}
