package connector

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var hookSecret = []byte("shared hook secret")

// received is one request a receiver accepted.
type received struct {
	header http.Header
	length int64
	body   []byte
}

// receiver is an HTTP endpoint that verifies each request with VerifyHTTP
// and answers status (200 when zero).
type receiver struct {
	mu     sync.Mutex
	got    []received
	status int
	answer string
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
	if err != nil {
		http.Error(w, "read: "+err.Error(), http.StatusBadRequest)
		return
	}
	if err := VerifyHTTP(hookSecret, r, body); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.status != 0 {
		w.WriteHeader(rc.status)
		io.WriteString(w, rc.answer)
		return
	}
	rc.got = append(rc.got, received{header: r.Header.Clone(), length: r.ContentLength, body: body})
	w.WriteHeader(http.StatusNoContent)
}

func (rc *receiver) received() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.got
}

func newHTTP(t *testing.T, url string, o HTTPOptions) *HTTP {
	t.Helper()
	o.Name, o.URL = "app", url
	if o.Secret == nil {
		o.Secret = hookSecret
	}
	h, err := NewHTTP(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// plainReader hides every method but Read.
type plainReader struct{ io.Reader }

func TestHTTPWrite(t *testing.T) {
	body := bytes.Repeat([]byte("ISA*00*~"), 200_000) // 1.6 MB
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	tests := []struct {
		name       string
		put        Put
		wantLength int64
	}{
		{name: "digest in metadata, size known", put: Put{Body: plainReader{bytes.NewReader(body)}, Size: int64(len(body)),
			Metadata: map[string]string{MetaSHA256: strings.ToUpper(digest)}}, wantLength: int64(len(body))},
		{name: "digest in metadata, size unknown", put: Put{Body: plainReader{bytes.NewReader(body)}, Size: -1,
			Metadata: map[string]string{MetaSHA256: digest}}, wantLength: -1},
		{name: "seekable body", put: Put{Body: bytes.NewReader(body), Size: -1}, wantLength: int64(len(body))},
		{name: "plain body, spooled", put: Put{Body: plainReader{bytes.NewReader(body)}, Size: -1}, wantLength: int64(len(body))},
	}
	for _, tt := range tests {
		rc := &receiver{}
		srv := httptest.NewServer(rc)
		spool := t.TempDir()
		h := newHTTP(t, srv.URL+"/edi", HTTPOptions{TempDir: spool})
		tt.put.Name = "ACME CORP/2026/03/01/42-m1@x.edi"
		tt.put.ContentType = "application/edi-x12"
		if tt.put.Metadata == nil {
			tt.put.Metadata = map[string]string{}
		}
		tt.put.Metadata["message-id"] = "m1@x"
		tt.put.Metadata["partner"] = "ÄCME\r\nX-Evil: 1"
		tt.put.Metadata["Bad Key"] = "dropped"
		if err := h.Write(t.Context(), tt.put); err != nil {
			t.Errorf("%s: Write = %v", tt.name, err)
			srv.Close()
			continue
		}
		srv.Close()
		got := rc.received()
		if len(got) != 1 {
			t.Errorf("%s: the receiver accepted %d requests, want 1", tt.name, len(got))
			continue
		}
		r := got[0]
		if !bytes.Equal(r.body, body) || r.length != tt.wantLength {
			t.Errorf("%s: received %d bytes (Content-Length %d), want the %d bytes written (Content-Length %d)", tt.name, len(r.body), r.length, len(body), tt.wantLength)
		}
		for k, want := range map[string]string{
			"Content-Type":        "application/edi-x12",
			HTTPNameHeader:        "ACME CORP/2026/03/01/42-m1@x.edi",
			HTTPDigestHeader:      digest,
			"X-Edihub-Message-Id": "m1@x",
			"X-Edihub-Partner":    "%C3%84CME%0D%0AX-Evil: 1",
			"X-Edihub-Bad Key":    "",
			"X-Evil":              "",
			HTTPCheckHeader:       "",
			"X-Edihub-Sha256":     "",
			"User-Agent":          "edihub-connector",
		} {
			if v := r.header.Get(k); v != want {
				t.Errorf("%s: header %s = %q, want %q", tt.name, k, v, want)
			}
		}
		if left, _ := os.ReadDir(spool); len(left) != 0 {
			t.Errorf("%s: spool directory after Write holds %d files, want none", tt.name, len(left))
		}
	}
}

// TestHTTPWriteLeavesCallersFile: the transport closes the body it is
// given; a seekable body is the caller's, still open afterwards.
func TestHTTPWriteLeavesCallersFile(t *testing.T) {
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	name := filepath.Join(t.TempDir(), "po.edi")
	if err := os.WriteFile(name, []byte("ISA*00~"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := newHTTP(t, srv.URL, HTTPOptions{}).Write(t.Context(), Put{Name: "po.edi", Body: f, Size: -1}); err != nil {
		t.Fatalf("Write = %v", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		t.Errorf("Seek on the caller's file after Write = %v, want it still open", err)
	}
}

// TestHTTPDigestMismatch: a body that is not what its metadata says
// never reaches the receiver as a complete request, whatever the receiver
// checks.
func TestHTTPDigestMismatch(t *testing.T) {
	var (
		mu       sync.Mutex
		complete int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err == nil {
			mu.Lock()
			complete++
			mu.Unlock()
		}
	}))
	h := newHTTP(t, srv.URL, HTTPOptions{})
	other := sha256.Sum256([]byte("another body"))
	for _, body := range [][]byte{[]byte("actual body"), bytes.Repeat([]byte("large body "), 100_000)} {
		for _, size := range []int64{int64(len(body)), -1} {
			err := h.Write(t.Context(), Put{Name: "x.edi", Body: plainReader{bytes.NewReader(body)}, Size: size,
				Metadata: map[string]string{MetaSHA256: hex.EncodeToString(other[:])}})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "SHA-256") {
				t.Errorf("Write(%d bytes, size %d) of a body that does not match its digest = %v, want ErrRefused", len(body), size, err)
			}
		}
	}
	err := h.Write(t.Context(), Put{Name: "x.edi", Body: strings.NewReader("x"), Size: 1, Metadata: map[string]string{MetaSHA256: "zz"}})
	if !errors.Is(err, ErrRefused) {
		t.Errorf("Write with metadata sha256 %q = %v, want ErrRefused", "zz", err)
	}
	if err := h.Write(t.Context(), Put{Body: strings.NewReader("x"), Size: 1}); !errors.Is(err, ErrRefused) {
		t.Errorf("Write without a name = %v, want ErrRefused", err)
	}
	srv.Close() // waits for the handlers
	if complete != 0 {
		t.Errorf("the receiver read %d complete bodies, want none", complete)
	}
}

func TestHTTPErrorClasses(t *testing.T) {
	long := strings.Repeat("quota exceeded ", 1000)
	tests := []struct {
		status int
		want   error
	}{
		{status: 200}, {status: 201}, {status: 299},
		{status: 408, want: ErrUnavailable}, {status: 429, want: ErrUnavailable},
		{status: 500, want: ErrUnavailable}, {status: 503, want: ErrUnavailable},
		{status: 301, want: ErrRefused}, {status: 400, want: ErrRefused}, {status: 401, want: ErrRefused},
		{status: 404, want: ErrRefused}, {status: 413, want: ErrRefused},
	}
	rc := &receiver{answer: long}
	srv := httptest.NewServer(rc)
	defer srv.Close()
	h := newHTTP(t, srv.URL, HTTPOptions{})
	for _, tt := range tests {
		rc.mu.Lock()
		rc.status = tt.status
		rc.mu.Unlock()
		err := h.Write(t.Context(), Put{Name: "x.edi", Body: strings.NewReader("body"), Size: 4})
		switch {
		case tt.want == nil && err != nil:
			t.Errorf("Write answered %d = %v, want nil", tt.status, err)
		case tt.want != nil && !errors.Is(err, tt.want):
			t.Errorf("Write answered %d = %v, want %v", tt.status, err, tt.want)
		case tt.want != nil && tt.status != 301 && (!strings.Contains(err.Error(), strconv.Itoa(tt.status)) ||
			!strings.Contains(err.Error(), "quota exceeded") || len(err.Error()) > 600):
			t.Errorf("Write answered %d = %q, want the status and a bounded excerpt of the answer", tt.status, err)
		}
	}

	srv.Close()
	if err := h.Write(t.Context(), Put{Name: "x.edi", Body: strings.NewReader("body"), Size: 4}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Write to a closed server = %v, want ErrUnavailable", err)
	}

	tlsSrv := httptest.NewUnstartedServer(&receiver{})
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	untrusted := newHTTP(t, tlsSrv.URL, HTTPOptions{})
	if err := untrusted.Check(t.Context()); !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "certificate is not trusted") {
		t.Errorf("Check against an untrusted certificate = %v, want ErrRefused naming the certificate", err)
	}
	trusted := newHTTP(t, tlsSrv.URL, HTTPOptions{Client: tlsSrv.Client()})
	if err := trusted.Check(t.Context()); err != nil {
		t.Errorf("Check with the server's CA trusted = %v, want nil", err)
	}
}

func TestHTTPCheck(t *testing.T) {
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if err := VerifyHTTP(hookSecret, r, body); err != nil || len(body) != 0 {
			http.Error(w, "bad check", http.StatusUnauthorized)
			return
		}
		got = r.Header.Clone()
	}))
	defer srv.Close()
	if err := newHTTP(t, srv.URL, HTTPOptions{}).Check(t.Context()); err != nil {
		t.Fatalf("Check = %v", err)
	}
	if got.Get(HTTPCheckHeader) != "1" || got.Get(HTTPNameHeader) != "" {
		t.Errorf("check request headers %s = %q, %s = %q, want 1 and empty", HTTPCheckHeader, got.Get(HTTPCheckHeader), HTTPNameHeader, got.Get(HTTPNameHeader))
	}
	if err := newHTTP(t, srv.URL, HTTPOptions{Secret: []byte("wrong")}).Check(t.Context()); !errors.Is(err, ErrRefused) {
		t.Errorf("Check with the wrong secret = %v, want ErrRefused", err)
	}
}

func TestVerifyHTTP(t *testing.T) {
	body := []byte("UNB+UNOC:3~")
	sum := sha256.Sum256(body)
	digest := hex.EncodeToString(sum[:])
	now := time.Now()
	request := func(edit func(h http.Header)) *http.Request {
		ts := strconv.FormatInt(now.Unix(), 10)
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set(HTTPTimestampHeader, ts)
		r.Header.Set(HTTPNameHeader, "a/b.edi")
		r.Header.Set(HTTPDigestHeader, digest)
		r.Header.Set(HTTPSignatureHeader, SignHTTP(hookSecret, ts, "a/b.edi", digest))
		if edit != nil {
			edit(r.Header)
		}
		return r
	}
	resign := func(at time.Time) func(h http.Header) {
		return func(h http.Header) {
			ts := strconv.FormatInt(at.Unix(), 10)
			h.Set(HTTPTimestampHeader, ts)
			h.Set(HTTPSignatureHeader, SignHTTP(hookSecret, ts, "a/b.edi", digest))
		}
	}
	tests := []struct {
		name   string
		r      *http.Request
		secret []byte
		body   []byte
		want   string // part of the error; "" for none
	}{
		{name: "valid", r: request(nil), secret: hookSecret, body: body},
		{name: "wrong secret", r: request(nil), secret: []byte("other"), body: body, want: "does not match"},
		{name: "body changed", r: request(nil), secret: hookSecret, body: []byte("UNB+UNOC:4~"), want: "body's SHA-256"},
		{name: "digest changed", r: request(func(h http.Header) { h.Set(HTTPDigestHeader, strings.Repeat("0", 64)) }), secret: hookSecret, body: body, want: "does not match"},
		{name: "name changed", r: request(func(h http.Header) { h.Set(HTTPNameHeader, "a/c.edi") }), secret: hookSecret, body: body, want: "does not match"},
		{name: "timestamp changed", r: request(func(h http.Header) { h.Set(HTTPTimestampHeader, "1") }), secret: hookSecret, body: body, want: "does not match"},
		{name: "stale", r: request(resign(now.Add(-HTTPMaxSkew - time.Minute))), secret: hookSecret, body: body, want: "more than 5m0s"},
		{name: "future", r: request(resign(now.Add(HTTPMaxSkew + time.Minute))), secret: hookSecret, body: body, want: "more than 5m0s"},
		{name: "unsigned", r: request(func(h http.Header) { h.Del(HTTPSignatureHeader) }), secret: hookSecret, body: body, want: "are required"},
	}
	for _, tt := range tests {
		err := VerifyHTTP(tt.secret, tt.r, tt.body)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("VerifyHTTP(%s) = %v, want nil", tt.name, err)
		case tt.want != "" && (!errors.Is(err, ErrSignature) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("VerifyHTTP(%s) = %v, want ErrSignature with %q", tt.name, err, tt.want)
		}
	}
}

func TestNewHTTPRefuses(t *testing.T) {
	tests := []struct {
		give HTTPOptions
		want string
	}{
		{give: HTTPOptions{URL: "ftp://x/", Secret: hookSecret}, want: "http.url"},
		{give: HTTPOptions{URL: "https:///path", Secret: hookSecret}, want: "http.url"},
		{give: HTTPOptions{URL: "::", Secret: hookSecret}, want: "http.url"},
		{give: HTTPOptions{URL: "https://app.example/edi"}, want: "http.secret"},
	}
	for _, tt := range tests {
		if _, err := NewHTTP(tt.give); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("NewHTTP(%+v) = %v, want an error with %q", tt.give, err, tt.want)
		}
	}
}
