package receiver_test

import (
	"testing"

	"github.com/edihub/edihub/internal/mdn"
)

// TestReceiveDeliveryOptionNeedsSignature: Receipt-Delivery-Option is
// honoured only for a message whose signature verified, and only for an
// http(s) URL with a host; otherwise the MDN comes in the response and
// nothing is queued.
func TestReceiveDeliveryOptionNeedsSignature(t *testing.T) {
	e := newEnv(t, envOptions{})
	unsigned := buildOpenSSL(t, build{enc: "aes256"})
	stranger := buildOpenSSL(t, build{sign: "sha256", signer: idC})
	signed := buildOpenSSL(t, build{sign: "sha256"})
	tests := []struct {
		name string
		give opensslMessage
		url  string
		want mdn.Disposition
	}{
		{"unsigned", unsigned, "http://169.254.169.254/latest", mdn.Processed()},
		{"signature does not verify", stranger, "http://10.0.0.1/mdn", mdn.Errored("authentication-failed")},
		{"not http", signed, "file:///etc/passwd", mdn.Processed()},
		{"no host", signed, "http:///mdn", mdn.Processed()},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := request(as2Header(partnerACME, station, "<rdo-"+string(rune('a'+i))+"@x>", "sha-256"), tt.give)
			h.Set("Receipt-Delivery-Option", tt.url)
			r := post(t, e.url, h, tt.give.body, false)
			if got := parseMDN(t, r); got.Disposition != tt.want {
				t.Errorf("MDN in the response = %q, want %q", got.Disposition, tt.want)
			}
		})
	}
	if n := e.count(t, `SELECT count(*) FROM outbox`); n != 0 {
		t.Errorf("%d outbox rows, want 0", n)
	}
	if n := e.count(t, `SELECT count(*) FROM messages WHERE mdn_mode <> 'sync'`); n != 0 {
		t.Errorf("%d messages with an async MDN mode, want 0", n)
	}
}

// TestReceiveDuplicateRequeueNeedsSignature: a resend that does not verify
// cannot send the stored MDN elsewhere; it gets it in the response.
func TestReceiveDuplicateRequeueNeedsSignature(t *testing.T) {
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
	if n := e.count(t, `SELECT count(*) FROM outbox WHERE url <> 'http://127.0.0.1:9/mdn'`); n != 0 {
		t.Errorf("%d outbox rows to the resend's URL, want 0", n)
	}
	// A verified resend may ask for the MDN at a new URL.
	h.Set("Receipt-Delivery-Option", "http://127.0.0.1:10/mdn")
	if r := post(t, e.url, h, signed.body, false); r.status != 200 || len(r.body) != 0 {
		t.Fatalf("verified resend = %d %q, want 200 without body", r.status, r.body)
	}
	if n := e.count(t, `SELECT count(*) FROM outbox WHERE url = 'http://127.0.0.1:10/mdn'`); n != 1 {
		t.Errorf("%d outbox rows to the verified resend's URL, want 1", n)
	}
}
