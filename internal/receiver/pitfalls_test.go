package receiver_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/edihub/edihub/internal/mdn"
)

// TestReceivePitfalls covers what AS2.md lists partners getting wrong.
func TestReceivePitfalls(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name    string
		from    string
		fromRaw string // AS2-From as sent, when not the formatted name
		toRaw   string
		msgID   string
		payload string
		chunked bool
		build   build
	}{
		{name: "name with spaces and quotes", from: partnerQuoted, msgID: "<q@x>", build: build{sign: "sha256", enc: "aes128"}},
		{name: "unquoted name with spaces", from: partnerACME, fromRaw: "ACME CORP", toRaw: "EDIHUB HUB", msgID: "<unq@x>", build: build{sign: "sha256"}},
		{name: "Message-ID without @", from: partnerACME, msgID: "<no-at-sign>", build: build{sign: "sha256"}},
		{name: "Message-ID without brackets", from: partnerACME, msgID: "bare-id-123", build: build{sign: "sha256"}},
		{name: "payload ending in a bare LF, plain", from: partnerACME, msgID: "<lf-plain@x>", payload: "line one\nline two\n"},
		{name: "payload ending in a bare LF, signed", from: partnerACME, msgID: "<lf-signed@x>", payload: "line one\nline two\n", build: build{sign: "sha256"}},
		{name: "Content-Length", from: partnerACME, msgID: "<cl@x>", build: build{sign: "sha256", enc: "aes256"}},
		{name: "chunked", from: partnerACME, msgID: "<chunked@x>", chunked: true, build: build{sign: "sha256", enc: "aes256"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.build
			b.payload = tt.payload
			m := buildOpenSSL(t, b)
			h := request(as2Header(tt.from, station, tt.msgID, "sha-256"), m)
			if tt.fromRaw != "" {
				h.Set("AS2-From", tt.fromRaw)
				h.Set("AS2-To", tt.toRaw)
			}
			r := post(t, e.url, h, m.body, tt.chunked)
			got := parseMDN(t, r)
			opensslVerifyMDN(t, r)
			if got.Disposition != mdn.Processed() || got.OriginalMessageID != tt.msgID {
				t.Errorf("MDN = %q for %q, want processed for %q", got.Disposition, got.OriginalMessageID, tt.msgID)
			}
			if want := dgst(t, "sha256", m.micFile); got.MIC != want {
				t.Errorf("MIC = %q, want %q", got.MIC, want)
			}
			if got.FinalRecipient != station {
				t.Errorf("Final-Recipient = %q, want %q", got.FinalRecipient, station)
			}
			wantTo := map[string]string{partnerQuoted: `"Q \"Quoted\" \\ Co"`, partnerACME: `"ACME CORP"`}[tt.from]
			if r.header.Get("AS2-To") != wantTo || r.header.Get("AS2-From") != `"EDIHUB HUB"` {
				t.Errorf("MDN AS2-From %q AS2-To %q, want %q %q", r.header.Get("AS2-From"), r.header.Get("AS2-To"), `"EDIHUB HUB"`, wantTo)
			}
			want := or(tt.payload, doc)
			if p := e.payload(t, tt.from, tt.msgID); string(p) != want {
				t.Errorf("payload = %q, want %q", p, want)
			}
		})
	}
}

// TestReceiveMDNIntake posts an async MDN (as a partner returns it for a
// message we sent): stored raw in the inbox, 200 at once, not processed.
func TestReceiveMDNIntake(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name string
		sign bool
	}{{"unsigned", false}, {"signed", true}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "<out-" + tt.name + "@edihub.test>"
			hdr, body, err := mdn.Build(mdn.Report{
				ReportingUA: "partner AS2", OriginalRecipient: "ACME CORP", FinalRecipient: "ACME CORP",
				OriginalMessageID: id, Disposition: mdn.Processed(), MIC: "dGVzdA==, sha-256",
			}, mdn.BuildOptions{Sign: tt.sign, MICAlg: crypto.SHA256, Key: idA.Key, Cert: idA.Cert})
			if err != nil {
				t.Fatal(err)
			}
			h := as2Header(partnerACME, station, "<mdn-msg-"+tt.name+"@acme>", "")
			h.Del("Disposition-Notification-To")
			h.Set("Authorization", "Basic c2VjcmV0")
			for k, v := range hdr {
				h[k] = v
			}
			r := post(t, e.url, h, body, false)
			if r.status != http.StatusOK {
				t.Fatalf("reply = %d %q", r.status, r.body)
			}
			var (
				from, orig, processed string
				storedHdr, storedBody []byte
			)
			if err := e.db.QueryRow(context.Background(), `
SELECT as2_from, original_message_id, headers, body, coalesce(processed_at::text, '') FROM mdn_inbox WHERE original_message_id = $1`, id).
				Scan(&from, &orig, &storedHdr, &storedBody, &processed); err != nil {
				t.Fatalf("inbox row: %v", err)
			}
			var sh http.Header
			if err := json.Unmarshal(storedHdr, &sh); err != nil {
				t.Fatal(err)
			}
			if from != partnerACME || string(storedBody) != string(body) || processed != "" || sh.Get("Content-Type") != hdr.Get("Content-Type") {
				t.Errorf("inbox row: from %q body equal %v processed %q", from, string(storedBody) == string(body), processed)
			}
			if sh.Get("Authorization") != "" {
				t.Errorf("credentials stored with the MDN")
			}
			// The stored MDN verifies with the partner's certificate.
			if m, err := mdn.Parse(sh, storedBody, mdn.ParseOptions{PartnerCerts: []*x509.Certificate{idA.Cert}}); err != nil || m.Signed != tt.sign {
				t.Errorf("stored MDN: %v", err)
			}
		})
	}
	if n := e.count(t, `SELECT count(*) FROM messages`); n != 0 {
		t.Errorf("MDNs were taken for messages: %d rows", n)
	}
	if n := metricValue(e.reg, "edihub_as2_mdn_inbox_received_total", map[string]string{"partner": partnerACME}); n != 2 {
		t.Errorf("inbox counter = %v, want 2", n)
	}
}

// TestReceiveLargePayload goes through the streamed store path (above 8
// MiB), chunked and with Content-Length, and a resend of it.
func TestReceiveLargePayload(t *testing.T) {
	e := newEnv(t, envOptions{maxBody: 64 << 20})
	payload := make([]byte, 9<<20+17)
	for i := range payload {
		payload[i] = byte(i*7 + i>>11)
	}
	for _, chunked := range []bool{false, true} {
		id := "<large-" + map[bool]string{false: "cl", true: "chunked"}[chunked] + "@x>"
		h := as2Header(partnerACME, station, id, "sha-256")
		h.Set("Content-Type", "application/octet-stream")
		r := post(t, e.url, h, payload, chunked)
		got := parseMDN(t, r)
		if got.Disposition != mdn.Processed() {
			t.Fatalf("%s: %q", id, got.Disposition)
		}
		if p := e.payload(t, partnerACME, id); !bytes.Equal(p, payload) {
			t.Errorf("%s: stored payload differs (%d bytes, want %d)", id, len(p), len(payload))
		}
		again := post(t, e.url, h, payload, chunked)
		sameMDN(t, again, r)
	}
	if n := e.count(t, `SELECT count(*) FROM pg_largeobject_metadata`); n != 0 {
		t.Errorf("%d large objects left behind", n)
	}
}
