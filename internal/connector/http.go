package connector

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

// Headers of an HTTP delivery.
const (
	// HTTPSignatureHeader carries "sha256=" and the hex HMAC-SHA256,
	// under the destination's secret, of "<timestamp>.<name>.<digest>"
	// (SignHTTP): the body is streamed, so the signature covers its
	// SHA-256 (HTTPDigestHeader), which the receiver checks against the
	// body it read (VerifyHTTP).
	HTTPSignatureHeader = "X-Edihub-Signature"
	// HTTPTimestampHeader carries when the request was signed, in Unix
	// seconds; each attempt is signed afresh.
	HTTPTimestampHeader = "X-Edihub-Timestamp"
	// HTTPNameHeader carries the document's name from the destination's
	// template: the same on every attempt, so a receiver that has it
	// already replaces or ignores the repeat. Empty on a check.
	HTTPNameHeader = "X-Edihub-Name"
	// HTTPDigestHeader carries the lower-case hex SHA-256 of the body.
	HTTPDigestHeader = "X-Edihub-Content-Sha256"
	// HTTPCheckHeader is "1" on the connectivity test's request, which
	// has an empty body and no name: answer it 2xx and store nothing.
	HTTPCheckHeader = "X-Edihub-Check"
)

// MetaSHA256 is the Put.Metadata key of the body's hex SHA-256, when the
// caller knows it; the HTTP destination then streams the body once.
const MetaSHA256 = "sha256"

// HTTPMaxSkew bounds the age VerifyHTTP accepts of a request's timestamp,
// either way.
const HTTPMaxSkew = 5 * time.Minute

// ErrSignature is wrapped by VerifyHTTP's errors.
var ErrSignature = errors.New("connector: bad signature")

// HTTPOptions configure NewHTTP.
type HTTPOptions struct {
	// Name names the connector in errors.
	Name string
	// URL receives the POSTs (http.url): http or https.
	URL string
	// Secret signs every request (the secret named by http.secret).
	Secret []byte
	// Client sends the requests. The default follows no redirects and
	// waits at most a minute for the answer's header once the body is
	// sent; the context bounds the whole request.
	Client *http.Client
	// Now is the clock signatures are dated by (time.Now).
	Now func() time.Time
	// TempDir holds, while it is sent, a body whose SHA-256 is neither in
	// Put.Metadata nor computable by seeking back (os.TempDir()).
	TempDir string
}

// HTTP posts each document, signed, to a URL: a Destination. The request
// carries the document itself as its body (streamed), its Content-Type,
// Content-Length when known, HTTPNameHeader, HTTPDigestHeader, the
// signature headers and one "X-Edihub-<Key>" header per Put.Metadata
// entry (message-id becomes X-Edihub-Message-Id). A 2xx answer means the
// receiver has the document. 408, 429, 5xx and network failures are
// ErrUnavailable; any other answer, a redirect and an untrusted
// certificate are ErrRefused, with the status and a bounded excerpt of
// the answer. HTTP is safe for concurrent use.
type HTTP struct {
	o HTTPOptions
}

// NewHTTP validates o: an http or https URL with a host and a secret.
func NewHTTP(o HTTPOptions) (*HTTP, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("http connector %s: http.url %q must be an http or https URL with a host", o.Name, o.URL)
	}
	if len(o.Secret) == 0 {
		return nil, fmt.Errorf("http connector %s: the secret named by http.secret is empty; every request is signed, put the shared secret in that file", o.Name)
	}
	if o.Client == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.ResponseHeaderTimeout = time.Minute
		o.Client = &http.Client{Transport: t, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &HTTP{o: o}, nil
}

// Write posts p. The body's SHA-256 comes from p.Metadata[MetaSHA256]
// (then checked while streaming: a body that does not match fails the
// request, so the receiver's check fails too), else from reading p.Body
// once and seeking back when it is an io.ReadSeeker, else from copying it
// to a temporary file first.
func (h *HTTP) Write(ctx context.Context, p Put) error {
	if p.Name == "" {
		return fmt.Errorf("%w: http connector %s: a document needs a name (a request without one is a check)", ErrRefused, h.o.Name)
	}
	body, digest, size, cleanup, err := h.prepare(p)
	if err != nil {
		return err
	}
	defer cleanup()
	ct := p.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	hdr := http.Header{}
	hdr.Set("Content-Type", ct)
	hdr.Set(HTTPNameHeader, headerValue(p.Name))
	for k, v := range p.Metadata {
		if k == MetaSHA256 {
			continue
		}
		if key, ok := metaHeader(k); ok {
			hdr.Set(key, headerValue(v))
		}
	}
	return h.post(ctx, "post "+p.Name, hdr, p.Name, digest, body, size)
}

// Check posts an empty, signed request with HTTPCheckHeader: the URL
// answers, trusts the signature and accepts the request.
func (h *HTTP) Check(ctx context.Context) error {
	hdr := http.Header{}
	hdr.Set(HTTPCheckHeader, "1")
	return h.post(ctx, "check", hdr, "", hex.EncodeToString(sha256.New().Sum(nil)), http.NoBody, 0)
}

// Close closes idle connections.
func (h *HTTP) Close() error {
	h.o.Client.CloseIdleConnections()
	return nil
}

// post sends one signed request and classifies the outcome.
func (h *HTTP) post(ctx context.Context, op string, hdr http.Header, name, digest string, body io.Reader, size int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.o.URL, body)
	if err != nil {
		return fmt.Errorf("%w: http connector %s: %s: %w", ErrRefused, h.o.Name, op, err)
	}
	req.Header = hdr
	req.ContentLength = size
	if size == 0 {
		req.Body = http.NoBody
	}
	ts := strconv.FormatInt(h.o.Now().Unix(), 10)
	req.Header.Set("User-Agent", "edihub-connector")
	req.Header.Set(HTTPDigestHeader, digest)
	req.Header.Set(HTTPTimestampHeader, ts)
	req.Header.Set(HTTPSignatureHeader, SignHTTP(h.o.Secret, ts, name, digest))
	resp, err := h.o.Client.Do(req)
	if err != nil {
		return h.classifyTransport(op, err)
	}
	defer resp.Body.Close()
	excerpt := answerExcerpt(resp.Body)
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return nil
	case s == http.StatusRequestTimeout || s == http.StatusTooManyRequests || s >= 500:
		return fmt.Errorf("%w: http connector %s: %s: %s answered %s: %q", ErrUnavailable, h.o.Name, op, h.o.URL, resp.Status, excerpt)
	case s >= 300 && s < 400:
		return fmt.Errorf("%w: http connector %s: %s: %s answered %s to %s; set http.url to the final URL", ErrRefused, h.o.Name, op, h.o.URL, resp.Status, resp.Header.Get("Location"))
	default:
		return fmt.Errorf("%w: http connector %s: %s: %s answered %s: %q", ErrRefused, h.o.Name, op, h.o.URL, resp.Status, excerpt)
	}
}

// classifyTransport tells an untrusted server and a body that does not
// match its digest (a person must look) from the network failures worth
// retrying.
func (h *HTTP) classifyTransport(op string, err error) error {
	var (
		verify   *tls.CertificateVerificationError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, ErrRefused):
		return fmt.Errorf("http connector %s: %s: %w", h.o.Name, op, err)
	case errors.As(err, &verify), errors.As(err, &unknown), errors.As(err, &hostname), errors.As(err, &invalid):
		return fmt.Errorf("%w: http connector %s: %s: %s's certificate is not trusted (install its CA in the image or fix http.url): %w", ErrRefused, h.o.Name, op, h.o.URL, err)
	}
	return fmt.Errorf("%w: http connector %s: %s: %w", ErrUnavailable, h.o.Name, op, err)
}

// prepare returns the body to send, its hex SHA-256, its length (-1 when
// unknown) and what to do after the request.
func (h *HTTP) prepare(p Put) (io.Reader, string, int64, func(), error) {
	nothing := func() {}
	if want := p.Metadata[MetaSHA256]; want != "" {
		if b, err := hex.DecodeString(want); err != nil || len(b) != sha256.Size {
			return nil, "", 0, nil, fmt.Errorf("%w: http connector %s: metadata %s %q is not a hex SHA-256", ErrRefused, h.o.Name, MetaSHA256, want)
		}
		want = strings.ToLower(want)
		return &digestReader{r: p.Body, h: sha256.New(), want: want}, want, p.Size, nothing, nil
	}
	if rs, ok := p.Body.(io.ReadSeeker); ok {
		start, err := rs.Seek(0, io.SeekCurrent)
		if err == nil {
			sum := sha256.New()
			var n int64
			if n, err = io.Copy(sum, rs); err == nil {
				_, err = rs.Seek(start, io.SeekStart)
			}
			if err == nil {
				// NopCloser: the transport closes the body it is given,
				// and this one is the caller's to close.
				return io.NopCloser(rs), hex.EncodeToString(sum.Sum(nil)), n, nothing, nil
			}
		}
		return nil, "", 0, nil, fmt.Errorf("%w: http connector %s: read the body for its digest: %w", ErrUnavailable, h.o.Name, err)
	}
	return h.spool(p.Body)
}

// spool copies body to a temporary file while hashing it.
func (h *HTTP) spool(body io.Reader) (io.Reader, string, int64, func(), error) {
	f, err := os.CreateTemp(h.o.TempDir, "edihub-http-*")
	if err != nil {
		return nil, "", 0, nil, fmt.Errorf("%w: http connector %s: spool the body to compute its digest: %w", ErrUnavailable, h.o.Name, err)
	}
	cleanup := func() {
		f.Close()
		os.Remove(f.Name())
	}
	sum := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, sum), body)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		cleanup()
		return nil, "", 0, nil, fmt.Errorf("%w: http connector %s: spool the body to compute its digest: %w", ErrUnavailable, h.o.Name, err)
	}
	return f, hex.EncodeToString(sum.Sum(nil)), n, cleanup, nil
}

// digestReader streams a body whose SHA-256 was announced and fails,
// instead of ending, when the body does not match. It holds back the last
// byte read until it knows whether more follow, so a receiver never gets
// a complete body that did not match: the request ends short.
type digestReader struct {
	r       io.Reader
	h       hash.Hash
	want    string
	buf     []byte
	pending []byte // read and hashed, not yet handed out
	eof     bool
	err     error
}

func (d *digestReader) Read(p []byte) (int, error) {
	if d.buf == nil {
		d.buf = make([]byte, 32<<10)
	}
	for len(d.pending) <= 1 && !d.eof && d.err == nil {
		k := copy(d.buf, d.pending)
		n, err := d.r.Read(d.buf[k:])
		d.h.Write(d.buf[k : k+n])
		d.pending = d.buf[:k+n]
		switch {
		case errors.Is(err, io.EOF):
			d.eof = true
			if got := hex.EncodeToString(d.h.Sum(nil)); got != d.want {
				d.err = fmt.Errorf("%w: the body's SHA-256 is %s, not %s as its metadata says", ErrRefused, got, d.want)
			}
		case err != nil:
			d.err = err
		}
	}
	if d.err != nil {
		return 0, d.err
	}
	if d.eof {
		n := copy(p, d.pending)
		d.pending = d.pending[n:]
		if len(d.pending) == 0 {
			return n, io.EOF
		}
		return n, nil
	}
	n := copy(p, d.pending[:len(d.pending)-1])
	d.pending = d.pending[n:]
	return n, nil
}

// SignHTTP returns the HTTPSignatureHeader value for a request signed at
// timestamp (Unix seconds, as in HTTPTimestampHeader) for the document
// name whose body has the hex SHA-256 digest: "sha256=" and the hex
// HMAC-SHA256 under secret of "<timestamp>.<name>.<digest>".
func SignHTTP(secret []byte, timestamp, name, digest string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp + "." + name + "." + digest))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// VerifyHTTP checks a request the HTTP destination sent, for a receiver
// written in Go: the signature under secret, the timestamp within
// HTTPMaxSkew of now, and body (the request body the receiver read)
// against HTTPDigestHeader. Errors wrap ErrSignature.
func VerifyHTTP(secret []byte, r *http.Request, body []byte) error {
	sig, ts, digest := r.Header.Get(HTTPSignatureHeader), r.Header.Get(HTTPTimestampHeader), r.Header.Get(HTTPDigestHeader)
	if sig == "" || ts == "" || digest == "" {
		return fmt.Errorf("%w: %s, %s and %s are required", ErrSignature, HTTPSignatureHeader, HTTPTimestampHeader, HTTPDigestHeader)
	}
	want := SignHTTP(secret, ts, r.Header.Get(HTTPNameHeader), digest)
	if !hmac.Equal([]byte(sig), []byte(want)) {
		return fmt.Errorf("%w: %s does not match", ErrSignature, HTTPSignatureHeader)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not Unix seconds", ErrSignature, HTTPTimestampHeader, ts)
	}
	if age := time.Since(time.Unix(sec, 0)); age > HTTPMaxSkew || age < -HTTPMaxSkew {
		return fmt.Errorf("%w: signed %s ago, more than %s", ErrSignature, age.Round(time.Second), HTTPMaxSkew)
	}
	sum := sha256.Sum256(body)
	if got := hex.EncodeToString(sum[:]); !hmac.Equal([]byte(got), []byte(digest)) {
		return fmt.Errorf("%w: the body's SHA-256 is %s, not %s as %s says", ErrSignature, got, digest, HTTPDigestHeader)
	}
	return nil
}

// metaHeader maps a metadata key (lower case, letters, digits, - and _)
// to its header, X-Edihub-<Key>; other keys are not sent.
func metaHeader(k string) (string, bool) {
	if k == "" || len(k) > 64 || strings.ContainsFunc(k, func(r rune) bool {
		return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '-' || r == '_')
	}) {
		return "", false
	}
	h := textproto.CanonicalMIMEHeaderKey("x-edihub-" + strings.ReplaceAll(k, "_", "-"))
	switch h {
	case HTTPSignatureHeader, HTTPTimestampHeader, HTTPNameHeader, HTTPDigestHeader, HTTPCheckHeader:
		return "", false
	}
	return h, true
}

// headerValue percent-encodes the bytes of v that are not printable
// ASCII. Deliver's metadata are printable already (MetaValue); this keeps
// any other caller's from breaking the request.
func headerValue(v string) string {
	if !strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r > 0x7e }) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < 0x20 || c > 0x7e {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// answerExcerpt reads the first bytes of an answer for an error message,
// printable ASCII only.
func answerExcerpt(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 256))
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return '.'
		}
		return r
	}, strings.TrimSpace(string(b)))
}
