package outbox_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

const partnerID = "ACME CORP"

// signedMDN is the fake partner's answer: a signed MDN for the request,
// built with the partner's key.
func signedMDN(t testing.TB, r request, disp mdn.Disposition, mic string, signer *identity) (int, http.Header, []byte) {
	t.Helper()
	h, body, err := mdn.Build(mdn.Report{
		ReportingUA:       "fake partner",
		OriginalRecipient: partnerID, FinalRecipient: partnerID,
		OriginalMessageID: r.header.Get("Message-ID"),
		Disposition:       disp,
		MIC:               mic,
	}, buildOpts(signer))
	if err != nil {
		t.Errorf("mdn.Build: %v", err)
		return 500, nil, nil
	}
	return 200, h, body
}

// TestDispatchProfiles sends one document per partner profile to a partner
// that takes the request apart with openssl, and checks what the partner
// found: the payload byte for byte, the layers the profile asks for, the
// framing (chunked or Content-Length), the AS2 header fields, and that the
// MIC edihub stored equals openssl's digest of the signed part.
func TestDispatchProfiles(t *testing.T) {
	tests := []struct {
		name       string
		profile    []string
		wantLayers []string
		wantAlg    string
		chunked    bool
	}{
		{"sha256 plain", []string{"sign: sha-256"}, []string{"signed"}, "sha-256", false},
		{"sha384 aes128", []string{"sign: sha-384", "encrypt: aes128-cbc"}, []string{"encrypted", "signed"}, "sha-384", false},
		{"sha512 aes192 base64", []string{"sign: sha-512", "encrypt: aes192-cbc", "transfer_encoding: base64"}, []string{"encrypted", "signed"}, "sha-512", false},
		{"sha256 aes256 oaep chunked", []string{"sign: sha-256", "encrypt: aes256-cbc", "key_encryption: rsa-oaep-sha256", "chunked: true"}, []string{"encrypted", "signed"}, "sha-256", true},
		{"sha256 3des", []string{"sign: sha-256", "encrypt: 3des"}, []string{"encrypted", "signed"}, "sha-256", false},
		{"sha256 aes128-gcm", []string{"sign: sha-256", "encrypt: aes128-gcm"}, []string{"encrypted", "signed"}, "sha-256", false},
		{"compress before signing", []string{"sign: sha-256", "encrypt: aes256-cbc", "compress: true", "compress_order: before-signing"}, []string{"encrypted", "signed", "compressed"}, "sha-256", false},
		{"compress after signing base64 chunked", []string{"sign: sha-256", "encrypt: aes256-cbc", "compress: true", "compress_order: after-signing", "transfer_encoding: base64", "chunked: true"}, []string{"encrypted", "compressed", "signed"}, "sha-256", true},
		{"unsigned aes256", []string{"encrypt: aes256-cbc"}, []string{"encrypted"}, "sha-256", false},
		{"unsigned aes256 micalg sha-512", []string{"encrypt: aes256-cbc", "mdn_micalg: sha-512"}, []string{"encrypted"}, "sha-512", false},
	}
	payload := []byte("ISA*00*          *00*          *ZZ*EDIHUB         *ZZ*ACME           *260101*1200*U*00401*000000001*0*P*>~\nGS*PO*EDIHUB*ACME~\nbare LF at the end\n")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			k := keys(t)
			st := pgtest.Store(t)
			var got unpacked
			partner := newPartner(t, func(n int, r request) (int, http.Header, []byte) {
				got = opensslUnpack(t, r, tt.wantAlg)
				return signedMDN(t, r, mdn.Processed(), got.mic+", "+got.micAlg, k["partner"])
			})
			profile := append([]string{"mdn: sync", "mdn_signed: true"}, tt.profile...)
			cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL + "/as2", extra: profile})
			q := enqueue(t, st, cfg, partnerID, payload, "application/EDI-X12", "po 1.edi")
			startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
			m := waitStatus(t, st, q.ID, "delivered", "failed")
			if m.Status != "delivered" {
				t.Fatalf("status %q (error %q), want delivered", m.Status, m.Error)
			}
			reqs := partner.requests()
			if len(reqs) != 1 {
				t.Fatalf("partner got %d requests, want 1", len(reqs))
			}
			r := reqs[0]
			if !bytes.Equal(got.payload, payload) {
				t.Errorf("payload at the partner = %q, want %q", got.payload, payload)
			}
			if got.contentType != "application/EDI-X12" {
				t.Errorf("payload Content-Type = %q", got.contentType)
			}
			if diff := cmp.Diff(tt.wantLayers, got.layers); diff != "" {
				t.Errorf("layers (-want +got):\n%s", diff)
			}
			if want := got.mic + ", " + got.micAlg; m.MIC != want || m.MICAlg != tt.wantAlg {
				t.Errorf("stored MIC = %q (%s), openssl computed %q", m.MIC, m.MICAlg, want)
			}
			if r.chunked != tt.chunked {
				t.Errorf("chunked = %v, want %v", r.chunked, tt.chunked)
			}
			if !tt.chunked && r.length != int64(len(r.body)) {
				t.Errorf("Content-Length %d, body %d bytes", r.length, len(r.body))
			}
			for name, want := range map[string]string{
				"AS2-Version":                      "1.2",
				"AS2-From":                         `"EDIHUB TEST"`,
				"AS2-To":                           `"ACME CORP"`,
				"Message-ID":                       q.MessageID,
				"Disposition-Notification-Options": "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, " + tt.wantAlg,
				"Mime-Version":                     "1.0",
			} {
				if v := r.header.Values(name); len(v) != 1 || v[0] != want {
					t.Errorf("header %s = %q, want %q", name, v, want)
				}
			}
			if r.header.Get("Disposition-Notification-To") == "" || r.header.Get("Date") == "" || r.header.Get("Receipt-Delivery-Option") != "" {
				t.Errorf("MDN request headers: %v", r.header)
			}
			te := r.header.Get("Content-Transfer-Encoding")
			if base64 := strings.Contains(strings.Join(tt.profile, ","), "base64"); (te == "base64") != base64 {
				t.Errorf("Content-Transfer-Encoding = %q, base64 profile %v", te, base64)
			}
			stored, err := st.MessageMDN(context.Background(), q.ID)
			if err != nil {
				t.Fatalf("MessageMDN: %v", err)
			}
			if !stored.Signed || !strings.Contains(stored.Disposition, "processed") || len(stored.Body) == 0 {
				t.Errorf("stored MDN: signed %v, disposition %q, %d bytes", stored.Signed, stored.Disposition, len(stored.Body))
			}
			if m.Attempts != 1 || !m.Signed != !strings.Contains(fmt.Sprint(tt.profile), "sign:") {
				t.Errorf("attempts %d, signed %v", m.Attempts, m.Signed)
			}
		})
	}
}

// TestDispatchNoMDN: without an MDN a 2xx is the end: status sent.
func TestDispatchNoMDN(t *testing.T) {
	st := pgtest.Store(t)
	partner := newPartner(t, func(int, request) (int, http.Header, []byte) { return 204, nil, nil })
	cfg := loadConfig(t, partnerYAML{id: "PLAIN", url: partner.URL, extra: []string{"mdn: none"}})
	q := enqueue(t, st, cfg, "PLAIN", []byte("hello"), "", "")
	startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
	m := waitStatus(t, st, q.ID, "sent", "failed")
	if m.Status != "sent" || m.CompletedAt == nil {
		t.Fatalf("status %q, completed %v, want sent", m.Status, m.CompletedAt)
	}
	r := partner.requests()[0]
	if r.header.Get("Disposition-Notification-To") != "" || r.header.Get("AS2-From") != `"EDIHUB TEST"` || r.header.Get("AS2-To") != "PLAIN" {
		t.Errorf("headers %v", r.header)
	}
	if _, err := st.MessageMDN(context.Background(), q.ID); err == nil {
		t.Error("an MDN is stored for a message that asked for none")
	}
}

// TestDispatchAsyncMDN: with an async MDN requested, a 2xx leaves the
// message awaiting its MDN, with the MIC kept and a due time set.
func TestDispatchAsyncMDN(t *testing.T) {
	st := pgtest.Store(t)
	partner := newPartner(t, func(int, request) (int, http.Header, []byte) { return 200, nil, nil })
	cfg := loadConfig(t, partnerYAML{id: "ASYNC", url: partner.URL, extra: []string{"mdn: async", "mdn_signed: true", "sign: sha-256", "async_mdn_url: http://edihub.example/as2"}})
	q := enqueue(t, st, cfg, "ASYNC", []byte("hello"), "application/EDIFACT", "")
	startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
	m := waitStatus(t, st, q.ID, "awaiting-mdn", "failed")
	if m.MDNDueAt == nil || m.MIC == "" || m.CompletedAt != nil {
		t.Errorf("awaiting message: due %v, MIC %q, completed %v", m.MDNDueAt, m.MIC, m.CompletedAt)
	}
	r := partner.requests()[0]
	if got := r.header.Get("Receipt-Delivery-Option"); got != "http://edihub.example/as2" {
		t.Errorf("Receipt-Delivery-Option = %q", got)
	}
}

func buildOpts(signer *identity) mdn.BuildOptions {
	if signer == nil {
		return mdn.BuildOptions{}
	}
	return mdn.BuildOptions{Sign: true, Key: signer.key, Cert: signer.cert}
}

// TestDispatchRedirectIsFinal: a partner answering 301 (say, http moved to
// https) is not followed: following would turn the POST into a GET and,
// with mdn none, record the 200 of a status page as sent. The message fails
// at once, and the error names the new location and the fix.
func TestDispatchRedirectIsFinal(t *testing.T) {
	st := pgtest.Store(t)
	statusPage := newPartner(t, func(int, request) (int, http.Header, []byte) { return 200, nil, []byte("<html>status</html>") })
	moved := statusPage.URL + "/as2"
	partner := newPartner(t, func(int, request) (int, http.Header, []byte) {
		return http.StatusMovedPermanently, http.Header{"Location": {moved}}, nil
	})
	cfg := loadConfig(t, partnerYAML{id: "MOVED", url: partner.URL + "/as2", extra: []string{"mdn: none", "max_attempts: 5"}})
	q := enqueue(t, st, cfg, "MOVED", []byte("hello"), "", "")
	startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
	m := waitStatus(t, st, q.ID, "sent", "failed")
	if m.Status != "failed" {
		t.Fatalf("status %q, want failed", m.Status)
	}
	for _, want := range []string{"HTTP 301", moved, "url"} {
		if !strings.Contains(m.Error, want) {
			t.Errorf("error %q does not contain %q", m.Error, want)
		}
	}
	if n := len(partner.requests()); n != 1 || m.Attempts != 1 {
		t.Errorf("partner got %d requests, %d attempts; want 1 (a redirect is final)", n, m.Attempts)
	}
	if n := len(statusPage.requests()); n != 0 {
		t.Errorf("the redirect was followed: the new location got %d requests", n)
	}
}

// TestDispatchGivesUpOnPoisonItem: an item whose every attempt was claimed
// and never finished (each one killed its dispatcher) is failed at the next
// claim, not sent again.
func TestDispatchGivesUpOnPoisonItem(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	partner := newPartner(t, func(int, request) (int, http.Header, []byte) { return 204, nil, nil })
	cfg := loadConfig(t, partnerYAML{id: "POISON", url: partner.URL, extra: []string{"mdn: none", "max_attempts: 2"}})
	q := enqueue(t, st, cfg, "POISON", []byte("hello"), "", "")
	for n := 1; n <= 2; n++ {
		// A lease over before it is taken: the claim has expired unfinished.
		if items, err := st.ClaimOutbox(ctx, fmt.Sprintf("killed-%d", n), -time.Second, 10); err != nil || len(items) != 1 {
			t.Fatalf("claim %d = %d items, %v", n, len(items), err)
		}
	}
	startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
	m := waitStatus(t, st, q.ID, "sent", "failed")
	if m.Status != "failed" || !strings.Contains(m.Error, "gave up after 2 attempts") {
		t.Errorf("status %q, error %q; want failed, gave up after 2 attempts", m.Status, m.Error)
	}
	if n := len(partner.requests()); n != 0 {
		t.Errorf("partner got %d requests, want 0", n)
	}
}

// TestDispatchMissingPayloadIsFinal: a message whose payload is gone cannot
// be built by any attempt: it fails at once instead of being claimed until
// max_attempts runs out by claim expiry.
func TestDispatchMissingPayloadIsFinal(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	partner := newPartner(t, func(int, request) (int, http.Header, []byte) { return 204, nil, nil })
	cfg := loadConfig(t, partnerYAML{id: "GONE", url: partner.URL, extra: []string{"mdn: none", "max_attempts: 5"}})
	q := enqueue(t, st, cfg, "GONE", []byte("hello"), "", "")
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `DELETE FROM payloads WHERE message_id = $1`, q.ID); err != nil {
		t.Fatal(err)
	}
	startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
	m := waitStatus(t, st, q.ID, "sent", "failed")
	if m.Status != "failed" || m.Attempts != 1 || !strings.Contains(m.Error, "not found") {
		t.Errorf("status %q, attempts %d, error %q; want failed at the first attempt", m.Status, m.Attempts, m.Error)
	}
	if n := len(partner.requests()); n != 0 {
		t.Errorf("partner got %d requests, want 0", n)
	}
}
