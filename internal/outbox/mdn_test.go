package outbox_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestDispatchSyncMDN checks how the dispatcher judges the partner's answer:
// the MDN's signature, Original-Message-ID, disposition and MIC, and which
// HTTP outcomes are retried (with the same bytes and Message-ID) and which
// are final.
func TestDispatchSyncMDN(t *testing.T) {
	k := keys(t)
	good := func(t testing.TB, r request) (int, http.Header, []byte) {
		u := opensslUnpack(t, r, "sha-256")
		return signedMDN(t, r, mdn.Processed(), u.mic+", "+u.micAlg, k["partner"])
	}
	const wrongMIC = "Tm90IHRoZSBkaWdlc3Qgb2YgYW55dGhpbmcgYXQgYWxsISE=, sha-256" // 32 bytes, wrong
	tests := []struct {
		name      string
		answer    func(t testing.TB, n int, r request) (int, http.Header, []byte)
		want      string // final status
		wantReqs  int
		wantError string // substring of messages.error
		wantDisp  string // substring of messages.disposition
	}{
		{"good MDN", func(t testing.TB, _ int, r request) (int, http.Header, []byte) { return good(t, r) }, "delivered", 1, "", "processed"},
		{"MIC mismatch", func(t testing.TB, _ int, r request) (int, http.Header, []byte) {
			return signedMDN(t, r, mdn.Processed(), wrongMIC, k["partner"])
		}, "failed", 1, "MIC mismatch", "processed"},
		{"signed by a stranger", func(t testing.TB, _ int, r request) (int, http.Header, []byte) {
			u := opensslUnpack(t, r, "sha-256")
			return signedMDN(t, r, mdn.Processed(), u.mic+", "+u.micAlg, k["other"])
		}, "failed", 1, "signature", ""},
		{"tampered MDN", func(t testing.TB, _ int, r request) (int, http.Header, []byte) {
			s, h, b := good(t, r)
			return s, h, bytes.Replace(b, []byte("processed"), []byte("processeD"), 1)
		}, "failed", 1, "signature", ""},
		{"unsigned MDN when signed requested", func(t testing.TB, _ int, r request) (int, http.Header, []byte) {
			u := opensslUnpack(t, r, "sha-256")
			return signedMDN(t, r, mdn.Processed(), u.mic+", "+u.micAlg, nil)
		}, "failed", 1, "not signed", ""},
		{"signed MDN without MIC", func(t testing.TB, _ int, r request) (int, http.Header, []byte) {
			return signedMDN(t, r, mdn.Processed(), "", k["partner"])
		}, "failed", 1, "signed receipt without Received-content-MIC", "processed"},
		{"negative signed MDN", func(t testing.TB, _ int, r request) (int, http.Header, []byte) {
			return signedMDN(t, r, mdn.Errored("decryption-failed"), "", k["partner"])
		}, "failed", 1, "negative MDN", "decryption-failed"},
		{"MDN for another message", func(t testing.TB, _ int, r request) (int, http.Header, []byte) {
			r.header.Set("Message-ID", "<someone-else@x>")
			return good(t, r)
		}, "failed", 1, "MDN is for Message-ID \"<someone-else@x>\"", "processed"},
		{"garbage 200", func(testing.TB, int, request) (int, http.Header, []byte) {
			return 200, http.Header{"Content-Type": {"text/html"}}, []byte("<html>ok</html>")
		}, "failed", 1, "MDN rejected", ""},
		{"500 then good", func(t testing.TB, n int, r request) (int, http.Header, []byte) {
			if n == 1 {
				return 500, nil, []byte("busy")
			}
			return good(t, r)
		}, "delivered", 2, "", "processed"},
		{"429 then good", func(t testing.TB, n int, r request) (int, http.Header, []byte) {
			if n == 1 {
				return 429, nil, nil
			}
			return good(t, r)
		}, "delivered", 2, "", "processed"},
		{"timeout then good", func(t testing.TB, n int, r request) (int, http.Header, []byte) {
			if n == 1 {
				return -1, nil, nil
			}
			return good(t, r)
		}, "delivered", 2, "", "processed"},
		{"400 is final", func(testing.TB, int, request) (int, http.Header, []byte) { return 400, nil, []byte("no") }, "failed", 1, "HTTP 400", ""},
		{"403 is final", func(testing.TB, int, request) (int, http.Header, []byte) { return 403, nil, nil }, "failed", 1, "HTTP 403", ""},
		{"503 forever gives up", func(testing.TB, int, request) (int, http.Header, []byte) { return 503, nil, nil }, "failed", 3, "gave up after 3 attempts", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.URL(t)
			st := openStore(t, url)
			partner := newPartner(t, func(n int, r request) (int, http.Header, []byte) { return tt.answer(t, n, r) })
			cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL, extra: []string{
				"sign: sha-256", "mdn: sync", "mdn_signed: true", "max_attempts: 3", "timeout: 700ms",
			}})
			q := enqueue(t, st, cfg, partnerID, []byte("UNA:+.? 'UNB+UNOC:3+EDIHUB+ACME'"), "application/EDIFACT", "")
			o := dispatcherOpts(t, st, cfg, "d1")
			o.Lease = 5 * time.Second
			stop := startDispatcher(t, o)
			m := waitStatus(t, st, q.ID, "delivered", "failed")
			if m.Status != tt.want {
				t.Fatalf("status %q (error %q), want %q", m.Status, m.Error, tt.want)
			}
			if !strings.Contains(m.Error, tt.wantError) || (tt.wantError == "" && m.Error != "") {
				t.Errorf("error %q, want it to contain %q", m.Error, tt.wantError)
			}
			if !strings.Contains(m.Disposition, tt.wantDisp) {
				t.Errorf("disposition %q, want it to contain %q", m.Disposition, tt.wantDisp)
			}
			// Nothing more is sent: the outbox holds no row to send or in
			// flight, and once the dispatcher stopped no request is under way.
			if n := pendingOutbox(t, url); n != 0 {
				t.Errorf("outbox after a final status: %d rows pending, want none", n)
			}
			stop()
			reqs := partner.requests()
			if len(reqs) != tt.wantReqs {
				t.Fatalf("partner got %d requests, want %d", len(reqs), tt.wantReqs)
			}
			if m.Attempts != tt.wantReqs {
				t.Errorf("attempts %d, want %d", m.Attempts, tt.wantReqs)
			}
			for i, r := range reqs[1:] {
				if !bytes.Equal(r.body, reqs[0].body) {
					t.Errorf("request %d body differs from the first (%d vs %d bytes)", i+2, len(r.body), len(reqs[0].body))
				}
				if r.header.Get("Message-ID") != q.MessageID || reqs[0].header.Get("Message-ID") != q.MessageID {
					t.Errorf("request %d Message-ID %q, want %q", i+2, r.header.Get("Message-ID"), q.MessageID)
				}
				if r.header.Get("Date") != reqs[0].header.Get("Date") {
					t.Errorf("request %d headers were rebuilt", i+2)
				}
			}
		})
	}
}

// TestDispatchSyncUnsignedMDNWithoutMIC: a MIC is optional in unsigned
// receipts (RFC 4130 §7.4.3): an unsigned positive MDN without MIC, for a
// message that asked for no signed receipt, delivers it with the MIC
// recorded as unverified; with a MIC, the MIC is checked.
func TestDispatchSyncUnsignedMDNWithoutMIC(t *testing.T) {
	for _, tt := range []struct {
		name         string
		withMIC      bool
		wantVerified bool
	}{{"without MIC", false, false}, {"with MIC", true, true}} {
		t.Run(tt.name, func(t *testing.T) {
			st := pgtest.Store(t)
			partner := newPartner(t, func(_ int, r request) (int, http.Header, []byte) {
				mic := ""
				if tt.withMIC {
					u := opensslUnpack(t, r, "sha-256")
					mic = u.mic + ", " + u.micAlg
				}
				return signedMDN(t, r, mdn.Processed(), mic, nil)
			})
			cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL, extra: []string{"sign: sha-256", "mdn: sync", "mdn_signed: false"}})
			q := enqueue(t, st, cfg, partnerID, []byte("UNA:+.? 'UNB+UNOC:3+EDIHUB+ACME'"), "application/EDIFACT", "")
			startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
			m := waitStatus(t, st, q.ID, "delivered", "failed")
			if m.Status != "delivered" || m.MICVerified == nil || *m.MICVerified != tt.wantVerified {
				t.Errorf("status %q (error %q), mic_verified %v; want delivered, %v", m.Status, m.Error, m.MICVerified, tt.wantVerified)
			}
		})
	}
}
