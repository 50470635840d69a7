package receiver_test

import (
	"bytes"
	"crypto"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/mdn"
)

// TestReceiveMDNTooLarge: an async MDN over the MDN limit (far below the
// body limit) is refused with 413 and not stored: a multipart/report by its
// Content-Length before the body is read, or once it passes the limit when
// chunked; a signed MDN (told from its first part) once read. MDNs within
// the limit are stored.
func TestReceiveMDNTooLarge(t *testing.T) {
	const limit = 64 << 10
	e := newEnv(t, envOptions{maxMDN: limit})
	build := func(t *testing.T, name string, sign bool, textSize int) (http.Header, []byte) {
		t.Helper()
		hdr, body, err := mdn.Build(mdn.Report{
			ReportingUA: "partner AS2", OriginalRecipient: "ACME CORP", FinalRecipient: "ACME CORP",
			OriginalMessageID: "<out-" + name + "@edihub.test>", Disposition: mdn.Processed(), MIC: "dGVzdA==, sha-256",
			Text: strings.Repeat("x", textSize),
		}, mdn.BuildOptions{Sign: sign, MICAlg: crypto.SHA256, Key: idA.Key, Cert: idA.Cert})
		if err != nil {
			t.Fatal(err)
		}
		h := as2Header(partnerACME, station, "<mdn-"+name+"@acme>", "")
		h.Del("Disposition-Notification-To")
		for k, v := range hdr {
			h[k] = v
		}
		return h, body
	}
	tests := []struct {
		name     string
		sign     bool
		text     int
		chunked  bool
		wantCode int
	}{
		{"unsigned within the limit", false, 1 << 10, false, http.StatusOK},
		{"signed within the limit", true, 1 << 10, false, http.StatusOK},
		{"unsigned over the limit", false, 2 * limit, false, http.StatusRequestEntityTooLarge},
		{"unsigned over the limit, chunked", false, 2 * limit, true, http.StatusRequestEntityTooLarge},
		{"signed over the limit", true, 2 * limit, false, http.StatusRequestEntityTooLarge},
		{"signed over the limit, chunked", true, 2 * limit, true, http.StatusRequestEntityTooLarge},
	}
	stored := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, body := build(t, strings.ReplaceAll(tt.name, " ", "-"), tt.sign, tt.text)
			before := e.count(t, `SELECT count(*) FROM mdn_inbox`)
			r := post(t, e.url, h, body, tt.chunked)
			if r.status != tt.wantCode {
				t.Fatalf("MDN of %d bytes (limit %d) = HTTP %d %q, want %d", len(body), limit, r.status, r.body, tt.wantCode)
			}
			want := 0
			if tt.wantCode == http.StatusOK {
				want, stored = 1, stored+1
			} else if !strings.Contains(string(r.body), fmt.Sprintf("the limit is %d bytes", limit)) {
				t.Errorf("413 text %q, want it to name the limit", r.body)
			}
			if n := e.count(t, `SELECT count(*) FROM mdn_inbox`) - before; n != want {
				t.Errorf("%d inbox rows stored, want %d", n, want)
			}
		})
	}
	if n := e.received(partnerACME, "too-large"); n != 4 {
		t.Errorf("too-large count = %v, want 4", n)
	}

	// With Content-Length, refused before the body is read: nothing of
	// the body is sent here.
	resp, body := rawRequest(t, e.url, "AS2-From: \"ACME CORP\"\r\nAS2-To: \"EDIHUB HUB\"\r\nMessage-ID: <big@x>\r\nContent-Type: multipart/report; report-type=disposition-notification; boundary=b\r\n", limit+1, "")
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("MDN announcing %d bytes: HTTP %d %q, want 413 before the body", limit+1, resp.StatusCode, body)
	}
}

// TestReceiveMDNDefaultLimit: without a setting the MDN limit is
// mdn.DefaultMaxMDNBytes, far below the body limit: a junk "MDN" of a few
// MiB is not stored (once, six of 16 MiB each were, and ran the leader's
// MDN poller out of memory).
func TestReceiveMDNDefaultLimit(t *testing.T) {
	e := newEnv(t, envOptions{})
	h := as2Header(partnerACME, station, "<junk@acme>", "")
	h.Del("Disposition-Notification-To")
	h.Set("Content-Type", "multipart/report; report-type=disposition-notification; boundary=b")
	junk := bytes.Repeat([]byte("j"), mdn.DefaultMaxMDNBytes+1)
	if r := post(t, e.url, h, junk, true); r.status != http.StatusRequestEntityTooLarge {
		t.Errorf("junk MDN of %d bytes = HTTP %d %q, want 413", len(junk), r.status, r.body)
	}
	resp, body := rawRequest(t, e.url, "AS2-From: \"ACME CORP\"\r\nAS2-To: \"EDIHUB HUB\"\r\nMessage-ID: <big@x>\r\nContent-Type: multipart/report; report-type=disposition-notification; boundary=b\r\n", 16<<20, "")
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("MDN announcing 16 MiB: HTTP %d %q, want 413 before the body", resp.StatusCode, body)
	}
	if n := e.count(t, `SELECT count(*) FROM mdn_inbox`); n != 0 {
		t.Errorf("%d inbox rows, want 0", n)
	}
}
