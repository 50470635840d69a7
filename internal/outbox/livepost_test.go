package outbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/spool"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestSendLargeWhileBuilding: the first attempt of a large message that
// is not compressed, unsigned or signed with the station's RSA key, is
// posted as it is built, with no spool file: the partner gets one
// request whose Content-Length (computed before the build) is its
// length, openssl decrypts it and verifies its signature, the payload
// inside is the one queued, and the outbox row records the inputs and
// the body's SHA-256 (the partner's) and the MIC (openssl's).
func TestSendLargeWhileBuilding(t *testing.T) {
	tests := []struct {
		name    string
		profile []string
		signed  bool
	}{
		{"sha-256 aes256-cbc", []string{"sign: sha-256", "encrypt: aes256-cbc"}, true},
		{"sha-512 aes128-gcm", []string{"sign: sha-512", "encrypt: aes128-gcm"}, true},
		{"sha-384 3des base64", []string{"sign: sha-384", "encrypt: 3des", "transfer_encoding: base64"}, true},
		{"unsigned aes192-cbc", []string{"encrypt: aes192-cbc"}, false},
		{"sha-256 not encrypted", []string{"sign: sha-256"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dbURL := pgtest.URL(t)
			st, conn := openStore(t, dbURL), pgtest.Conn(t, dbURL)
			sink := newBodySink(t, nil)
			cfg := loadConfig(t, partnerYAML{id: "BIG PARTNER", url: sink.URL, extra: append(tt.profile, "mdn: none")})
			sp, err := spool.New(t.TempDir(), 1<<20) // too small for the body: the spool path would fail
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sp.Close() })
			o := dispatcherOpts(t, st, cfg, "live")
			core, logs := observer.New(zap.InfoLevel)
			o.Logger, o.Spool, o.SpoolFromBytes = zap.New(core), sp, 1<<20
			q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			path, payloadSum := writeLargePayload(t, t.TempDir(), 3<<20+5)
			id := enqueueFile(t, q, "BIG PARTNER", path).ID
			stop := startDispatcher(t, o)
			m := waitStatus(t, st, id, "sent", "failed")
			stop()
			if m.Status != "sent" {
				t.Fatalf("status %q (error %q), want sent", m.Status, m.Error)
			}
			if n := logs.FilterMessage("built as a stream").FilterField(zap.Bool("posted_while_built", true)).Len(); n != 1 {
				t.Errorf("%d builds logged as posted while built, want 1", n)
			}
			r := sink.oneRequest(t)
			wantFrozenInputs(t, conn, id)
			var sum []byte
			var size int64
			if err := conn.QueryRow(context.Background(), `SELECT body_sha256, body_size FROM outbox WHERE message_id = $1`, id).Scan(&sum, &size); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(sum, r.sha256[:]) || size != r.size {
				t.Errorf("outbox row records a body of %d bytes, SHA-256 %x; the partner got %d bytes, %x", size, sum, r.size, r.sha256)
			}
			if tt.signed && strings.Contains(strings.Join(tt.profile, " "), "encrypt") {
				checkUncompressedWithOpenSSL(t, r, m.MIC, payloadSum)
			}
		})
	}
}

// checkUncompressedWithOpenSSL has openssl decrypt the body r received
// and verify its signature, compares openssl's MIC of the signed entity
// with mic and the payload in it with payloadSum.
func checkUncompressedWithOpenSSL(t *testing.T, r sunk, mic string, payloadSum []byte) {
	t.Helper()
	if strings.EqualFold(r.header.Get("Content-Transfer-Encoding"), "base64") {
		raw, err := os.ReadFile(r.path)
		if err != nil {
			t.Fatal(err)
		}
		r.path = filepath.Join(t.TempDir(), "body.der")
		if err := os.WriteFile(r.path, decodeBase64Lines(t, raw), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	part1, got := openSigned(t, keys(t), r)
	if !strings.HasSuffix(mic, ", sha-256") {
		mic = got // another digest: the signature verified is the check
	}
	if got != mic {
		t.Errorf("openssl's SHA-256 of the signed entity = %s, edihub's MIC %s", got, mic)
	}
	e := splitEntity(t, part1)
	body := e.body
	if strings.EqualFold(e.header["content-transfer-encoding"], "base64") {
		body = decodeBase64Lines(t, body)
	}
	if h := sha256.Sum256(body); !bytes.Equal(h[:], payloadSum) {
		t.Errorf("the payload openssl's peer finds (%d bytes) differs from the one queued", len(body))
	}
}

// TestSendLargeWhileBuildingRetry: a message posted as it was built and
// answered 503 is built again for its retry, into the spool, from the
// inputs its first attempt recorded: the partner gets the same bytes
// twice and no rebuild is reported as differing.
func TestSendLargeWhileBuildingRetry(t *testing.T) {
	r := firstAttemptFailsWith(t, "live-retry", "sign: sha-256", "encrypt: aes256-cbc")
	wantFrozenInputs(t, r.conn, r.id)
	r.retry(t)
	checkReadable(t, r.wantSameBytesTwice(t))
}

// TestSendLargeWhileBuildingWrongLength: when the body built comes out
// longer or shorter than the Content-Length announced for it (the test
// skews the computed length), the attempt fails with an error logged,
// the partner never gets a whole request, and the retry, built into the
// spool, is sent and readable.
func TestSendLargeWhileBuildingWrongLength(t *testing.T) {
	for _, delta := range []int{+64, -64} {
		t.Run(map[int]string{64: "body shorter than announced", -64: "body longer than announced"}[delta], func(t *testing.T) {
			dbURL := pgtest.URL(t)
			st, conn := openStore(t, dbURL), pgtest.Conn(t, dbURL)
			sink := newBodySink(t, nil)
			cfg := loadConfig(t, partnerYAML{id: "BIG PARTNER", url: sink.URL,
				extra: []string{"sign: sha-256", "encrypt: aes256-cbc", "mdn: none", "max_attempts: 3"}})
			sp, err := spool.New(t.TempDir(), 64<<20)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sp.Close() })
			o := dispatcherOpts(t, st, cfg, "wrong-length")
			core, logs := observer.New(zap.WarnLevel)
			o.Logger, o.Spool, o.SpoolFromBytes = zap.New(core), sp, 1<<20
			o.BackoffBase, o.BackoffMax = time.Hour, time.Hour
			o.Jitter = func() float64 { return 0.5 }
			q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			path, payloadSum := writeLargePayload(t, t.TempDir(), 3<<20)
			id := enqueueFile(t, q, "BIG PARTNER", path).ID
			skewed := o
			outbox.SetLiveSizeSkew(&skewed, int64(delta))
			stop := startDispatcher(t, skewed)
			m := waitStatus(t, st, id, "retrying", "failed")
			stop()
			if m.Status != "retrying" || !strings.Contains(m.Error, "differs in length") {
				t.Fatalf("status %q (error %q), want retrying after a body of the wrong length", m.Status, m.Error)
			}
			if n := logs.FilterLevelExact(zap.ErrorLevel).FilterMessageSnippet("differs in length").Len(); n != 1 {
				t.Errorf("%d errors logged for the wrong length, want 1", n)
			}
			for i, r := range sink.requests() {
				if r.size != 0 {
					t.Errorf("request %d reached the partner whole (%d bytes)", i+1, r.size)
				}
			}
			if _, err := conn.Exec(context.Background(), `UPDATE outbox SET next_attempt_at = now(), claimed_until = NULL, claimed_by = '' WHERE message_id = $1`, id); err != nil {
				t.Fatal(err)
			}
			stop = startDispatcher(t, o)
			m = waitStatus(t, st, id, "sent", "failed")
			stop()
			if m.Status != "sent" {
				t.Fatalf("retry: status %q (error %q), want sent", m.Status, m.Error)
			}
			reqs := sink.requests()
			last := reqs[len(reqs)-1]
			if last.length != last.size {
				t.Errorf("retry: Content-Length %d for a body of %d bytes", last.length, last.size)
			}
			checkUncompressedWithOpenSSL(t, last, m.MIC, payloadSum)
			wantFrozenInputs(t, conn, id)
		})
	}
}

// decodeBase64Lines decodes a base64 body in lines.
func decodeBase64Lines(t *testing.T, b []byte) []byte {
	t.Helper()
	out, err := base64.StdEncoding.DecodeString(strings.NewReplacer("\r", "", "\n", "").Replace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return out
}
