package receiver_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/mdn"
)

// rawRequest sends a request header announcing contentLength body bytes
// followed by only body, and reads the answer without sending more.
func rawRequest(t *testing.T, url string, header string, contentLength int, body string) (*http.Response, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(url, "/as2"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /as2 HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", header, contentLength, body)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer while the body is outstanding: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

// TestReceiveUnknownPairBeforeBody: a request from an unknown pair is
// answered from its header, without waiting for the body, and an MDN
// from an unknown sender is refused rather than stored.
func TestReceiveUnknownPairBeforeBody(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name       string
		header     string
		wantStatus int
		wantMDN    bool
	}{
		{"message, no MDN", "AS2-From: NOBODY\r\nAS2-To: \"EDIHUB HUB\"\r\nMessage-ID: <u1@x>\r\nContent-Type: application/pkcs7-mime\r\n", 403, false},
		{"message, wrong station", "AS2-From: \"ACME CORP\"\r\nAS2-To: ELSEWHERE\r\nMessage-ID: <u2@x>\r\nContent-Type: application/pkcs7-mime\r\n", 403, false},
		{"message, MDN wanted", "AS2-From: NOBODY\r\nAS2-To: \"EDIHUB HUB\"\r\nMessage-ID: <u3@x>\r\nDisposition-Notification-To: x@y\r\nContent-Type: application/pkcs7-mime\r\n", 200, true},
		{"async MDN", "AS2-From: NOBODY\r\nAS2-To: \"EDIHUB HUB\"\r\nMessage-ID: <u4@x>\r\nContent-Type: multipart/report; report-type=disposition-notification; boundary=b\r\n", 403, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := rawRequest(t, e.url, tt.header, 1000, "")
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status = %d %q, want %d", resp.StatusCode, body, tt.wantStatus)
			}
			if tt.wantMDN {
				m := parseMDN(t, reply{status: resp.StatusCode, header: resp.Header, body: body})
				if m.Disposition != mdn.Errored(mdn.UnknownTradingRelationship) {
					t.Errorf("disposition = %q, want unknown-trading-relationship", m.Disposition)
				}
			}
		})
	}
	if n := e.count(t, `SELECT count(*) FROM mdn_inbox`); n != 0 {
		t.Errorf("%d inbox rows, want 0", n)
	}
	if n := e.count(t, `SELECT count(*) FROM messages`); n != 0 {
		t.Errorf("%d messages, want 0", n)
	}
	if n := e.received("unknown", mdn.UnknownTradingRelationship); n != 4 {
		t.Errorf("unknown-trading-relationship count = %v, want 4", n)
	}
}

// TestReceiveBodyReadTimeout: a body that stalls is answered 408 after the
// read timeout, nothing is stored, and the receiver keeps serving.
func TestReceiveBodyReadTimeout(t *testing.T) {
	e := newEnv(t, envOptions{readTimeout: 300 * time.Millisecond})
	start := time.Now()
	resp, body := rawRequest(t, e.url, "AS2-From: \"ACME CORP\"\r\nAS2-To: \"EDIHUB HUB\"\r\nMessage-ID: <slow@x>\r\nContent-Type: application/pkcs7-mime\r\n", 1000, "partial")
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), "not received within") {
		t.Errorf("stalled body: %d %q, want 408 naming the timeout", resp.StatusCode, body)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("answered after %v", d)
	}
	if n := e.count(t, `SELECT count(*) FROM messages`); n != 0 {
		t.Errorf("%d messages, want 0", n)
	}
	if n := e.received(partnerACME, "timeout"); n != 1 {
		t.Errorf("timeout count = %v, want 1", n)
	}
	// A message that takes longer than the timeout to process after its
	// body arrived is not cut off.
	m := buildOpenSSL(t, build{sign: "sha256", enc: "aes256"})
	r := post(t, e.url, request(as2Header(partnerACME, station, "<fast@x>", "sha-256"), m), m.body, false)
	if got := parseMDN(t, r); got.Disposition != mdn.Processed() {
		t.Errorf("after the timeout: %q, want processed", got.Disposition)
	}
}
