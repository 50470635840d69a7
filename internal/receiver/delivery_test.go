package receiver_test

import (
	"testing"

	"github.com/edihub/edihub/internal/mdn"
)

// TestReceiveDeliveryOptionTargets: Receipt-Delivery-Option is honoured,
// signed message or not, only for an http(s) URL whose host the partner's
// profile allows (the host of its URL by default) and, unless the profile
// sets allow_private_mdn_targets, not a non-public address; otherwise the
// MDN comes in the response and nothing is queued.
func TestReceiveDeliveryOptionTargets(t *testing.T) {
	e := newEnv(t, envOptions{})
	unsigned := buildOpenSSL(t, build{enc: "aes256"})
	stranger := buildOpenSSL(t, build{sign: "sha256", signer: idC})
	signed := buildOpenSSL(t, build{sign: "sha256"})
	good := buildOpenSSL(t, build{sign: "sha256", enc: "aes256"})
	tests := []struct {
		name    string
		partner string
		give    opensslMessage
		url     string
		want    mdn.Disposition
		async   bool
	}{
		// Item 9: an unsigned request gets its async MDN as asked.
		{"unsigned, allowed host", partnerACME, unsigned, "http://127.0.0.1:9/mdn", mdn.Processed(), true},
		{"unsigned, metadata address", partnerACME, unsigned, "http://169.254.169.254/latest", mdn.Processed(), false},
		{"signature does not verify, other host", partnerACME, stranger, "http://10.0.0.1/mdn", mdn.Errored("authentication-failed"), false},
		{"signed, host not listed", partnerACME, signed, "http://localhost:9/mdn", mdn.Processed(), false},
		{"not http", partnerACME, signed, "file:///etc/passwd", mdn.Processed(), false},
		{"no host", partnerACME, signed, "http:///mdn", mdn.Processed(), false},
		{"loopback not allowed by the profile", partnerDefault, good, "http://127.0.0.1:9/mdn", mdn.Processed(), false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := "<rdo-" + string(rune('a'+i)) + "@x>"
			h := request(as2Header(tt.partner, station, id, "sha-256"), tt.give)
			h.Set("Receipt-Delivery-Option", tt.url)
			r := post(t, e.url, h, tt.give.body, false)
			if tt.async {
				if r.status != 200 || len(r.body) != 0 {
					t.Fatalf("reply = %d %q, want an empty 200 (MDN queued)", r.status, r.body)
				}
				if n := e.count(t, `SELECT count(*) FROM outbox o JOIN messages m ON m.id = o.message_id WHERE m.message_id = $1 AND o.url = $2`, id, tt.url); n != 1 {
					t.Errorf("%d outbox rows to %s, want 1", n, tt.url)
				}
				return
			}
			if got := parseMDN(t, r); got.Disposition != tt.want {
				t.Errorf("MDN in the response = %q, want %q", got.Disposition, tt.want)
			}
			if n := e.count(t, `SELECT count(*) FROM outbox o JOIN messages m ON m.id = o.message_id WHERE m.message_id = $1`, id); n != 0 {
				t.Errorf("%d outbox rows, want 0", n)
			}
		})
	}
	if n := metricValue(e.reg, "edihub_as2_mdn_target_refused_total", map[string]string{"partner": partnerACME}); n != 5 {
		t.Errorf("edihub_as2_mdn_target_refused_total{partner=ACME} = %v, want 5", n)
	}
}

// TestReceiveDuplicateNeverRetargets: a resend of a stored message never
// sends the stored MDN to a new place: not to a refused host (answered in
// the response), not to another URL of an allowed host (the first URL).
func TestReceiveDuplicateNeverRetargets(t *testing.T) {
	e := newEnv(t, envOptions{})
	signed := buildOpenSSL(t, build{sign: "sha256", enc: "aes256"})
	unsigned := buildOpenSSL(t, build{enc: "aes256"})
	h := request(as2Header(partnerACME, station, "<rdo-dup@x>", "sha-256"), signed)
	h.Set("Receipt-Delivery-Option", "http://127.0.0.1:9/mdn")
	if r := post(t, e.url, h, signed.body, false); r.status != 200 || len(r.body) != 0 {
		t.Fatalf("first = %d %q, want 200 without body", r.status, r.body)
	}
	h2 := request(as2Header(partnerACME, station, "<rdo-dup@x>", "sha-256"), unsigned)
	h2.Set("Receipt-Delivery-Option", "http://169.254.169.254/steal")
	r := post(t, e.url, h2, unsigned.body, false)
	if got := parseMDN(t, r); got.Disposition != mdn.Processed() {
		t.Errorf("resend MDN = %q, want the stored processed MDN", got.Disposition)
	}
	// Same host, another URL: queued again, to the first URL.
	h.Set("Receipt-Delivery-Option", "http://127.0.0.1:10/other")
	if r := post(t, e.url, h, signed.body, false); r.status != 200 || len(r.body) != 0 {
		t.Fatalf("verified resend = %d %q, want 200 without body", r.status, r.body)
	}
	if n := e.count(t, `SELECT count(*) FROM outbox WHERE url <> 'http://127.0.0.1:9/mdn'`); n != 0 {
		t.Errorf("%d outbox rows to a resend's URL, want 0", n)
	}
	if n := e.count(t, `SELECT count(*) FROM outbox WHERE url = 'http://127.0.0.1:9/mdn'`); n != 2 {
		t.Errorf("%d outbox rows to the first URL, want 2", n)
	}

	// A message first answered in the response: a resend asking for an
	// async MDN gets the stored one in the response again.
	h3 := request(as2Header(partnerACME, station, "<sync-first@x>", "sha-256"), signed)
	if r := post(t, e.url, h3, signed.body, false); r.status != 200 || len(r.body) == 0 {
		t.Fatalf("first = %d, want the MDN in the response", r.status)
	}
	h3.Set("Receipt-Delivery-Option", "http://127.0.0.1:9/mdn")
	if got := parseMDN(t, post(t, e.url, h3, signed.body, false)); got.Disposition != mdn.Processed() {
		t.Errorf("resend = %q, want the stored MDN in the response", got.Disposition)
	}
	if n := e.count(t, `SELECT count(*) FROM outbox o JOIN messages m ON m.id = o.message_id WHERE m.message_id = '<sync-first@x>'`); n != 0 {
		t.Errorf("%d outbox rows for the sync-first message, want 0", n)
	}
}
