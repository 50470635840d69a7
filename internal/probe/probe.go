// Package probe runs a connectivity test against one trading partner: it
// sends a small test document and reports, step by step, what happened —
// building the message, DNS, TCP connect, TLS (handshake and server
// certificate), the HTTP status, the synchronous MDN (present, parsed,
// answering the test message), the MDN's signature, its disposition and
// its MIC — with, for a failed step, the fix a user can make: the setting
// of the partner profile to change, or what to ask the partner for.
//
// The test message is built and posted exactly as the outbox dispatcher
// builds and posts real messages (outbox.Build, outbox.NewRequest,
// outbox.PartnerClient): signed, compressed and encrypted as the profile
// says (a profile that sends unsigned or unencrypted is followed, and the
// report notes it), with the profile's transfer encoding, chunking, basic
// authentication, extra header fields, TLS settings, proxy and timeout.
// Unlike a real message it always asks for a synchronous signed MDN,
// whatever the profile's mdn and mdn_signed say, so that the answer comes
// back on the connection and can be checked in full; the report notes
// when the profile asks for something else. It is a real AS2 message: the
// partner receives a short text document (edihub-connectivity-test.txt,
// text/plain) under a fresh Message-ID and may hand it to its application.
// Nothing is stored in edihub's database.
//
// Entry point, for `edihub partners test NAME` and the API:
//
//	p, ok := cfg.Partner(name) // cfg is the loaded *config.File
//	if !ok { … unknown partner … }
//	r := probe.Run(ctx, probe.Options{Station: cfg.Station, Partner: p, Client: client})
//	_ = r.WriteText(stdout)    // the CLI; exit non-zero unless r.OK
//	json.NewEncoder(w).Encode(r) // the API: {"partner", "url", "message_id", "ok", "notes", "steps": [{"name", "ok", "duration_seconds", "detail", "fix"}]}
//
// Run blocks for at most the partner's timeout (plus building the
// message); cancelling ctx ends it early with a failed step. A report
// never holds keys, passwords, basic-auth credentials, extra header values
// or payload bytes, and URLs in it are redacted. Run is safe for concurrent
// use; each call uses its own connection, closed before it returns.
package probe

import (
	"context"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

// Test document: a short text that tells the partner's staff what it is.
const (
	contentType = "text/plain"
	filename    = "edihub-connectivity-test.txt"
	subject     = "edihub connectivity test"
)

// Options configure Run.
type Options struct {
	// Station is our identity: its AS2 ID is the AS2-From, its active key
	// signs.
	Station config.Station
	// Partner is the profile tested; required.
	Partner *config.Partner
	// Client is the base HTTP client, as given to the dispatcher; nil
	// means one with a clone of http.DefaultTransport. Run never uses its
	// connection pool: it clones the transport with keep-alives off, so
	// that DNS, connect and TLS are measured on a fresh connection, and
	// closes the clone when done. A Transport that is not an
	// *http.Transport is used as is.
	Client *http.Client
	// Now is the clock: Date header, signing time, step durations. Nil
	// means time.Now.
	Now func() time.Time
	// Rand supplies key material, IVs, boundaries and, by default, the
	// Message-ID; nil means crypto/rand.
	Rand io.Reader
	// MessageID returns the test message's Message-ID; nil means
	// outbox.MessageIDs for the station with Rand.
	MessageID func() string
	// MaxMDNBytes bounds the response body read (a synchronous MDN is a
	// few KiB); zero means mdn.DefaultMaxMDNBytes.
	MaxMDNBytes int64
}

// Run sends the test message to o.Partner and returns the report. It never
// returns an error: every problem, a missing profile included, is a failed
// step.
func Run(ctx context.Context, o Options) Report {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.MessageID == nil {
		o.MessageID = outbox.MessageIDs(o.Station.AS2ID, o.Rand)
	}
	if o.MaxMDNBytes <= 0 {
		o.MaxMDNBytes = mdn.DefaultMaxMDNBytes
	}
	r := &run{o: o, p: o.Partner, rep: Report{Started: o.Now()}}
	r.run(ctx)
	r.rep.OK = len(r.rep.Steps) > 0 && r.rep.Failed() == nil
	r.redact()
	return r.rep
}

// run is the state of one test.
type run struct {
	o   Options
	p   *config.Partner
	rep Report
	// msg is the built test message.
	msg postgres.OutboundBuild
}

func (r *run) ok(name string, d time.Duration, detail string) {
	r.rep.Steps = append(r.rep.Steps, Step{Name: name, OK: true, Duration: d, Detail: detail})
}

func (r *run) fail(name string, d time.Duration, detail, fix string) {
	r.rep.Steps = append(r.rep.Steps, Step{Name: name, Duration: d, Detail: detail, Fix: fix})
}

func (r *run) run(ctx context.Context) {
	p := r.p
	if p == nil {
		r.fail(StepMessage, 0, "no partner profile given", "name a partner of the configuration (AS2 IDs are case-sensitive)")
		return
	}
	r.rep.Partner, r.rep.URL = p.AS2ID, p.RedactedURL()
	if p.URL == nil {
		r.fail(StepMessage, 0, "the partner profile has no url", "set url in the partner profile to the partner's AS2 endpoint")
		return
	}
	r.rep.Notes = profileNotes(r.o.Station, p, r.o.Now())
	if !r.build() {
		return
	}
	resp, body, ok := r.exchange(ctx)
	if !ok {
		return
	}
	r.checkMDN(resp, body)
}

// build builds the test message as the dispatcher builds a real one, but
// asking for a synchronous signed MDN.
func (r *run) build() bool {
	start := r.o.Now()
	id := r.o.MessageID()
	src := postgres.OutboundSource{
		MessageID:   id,
		AS2From:     r.o.Station.AS2ID,
		AS2To:       r.p.AS2ID,
		Subject:     subject,
		ContentType: contentType,
		Filename:    filename,
		MDNMode:     config.MDNSync,
		MDNSigned:   true,
		Payload:     testDocument(r.o.Station.AS2ID, r.p.AS2ID, id, start),
	}
	b, err := outbox.Build(&r.o.Station, r.p, src, start, r.o.Rand)
	d := r.o.Now().Sub(start)
	if err != nil {
		r.fail(StepMessage, d, "cannot build the test message: "+err.Error(), buildFix(r.o.Station, r.p))
		return false
	}
	r.msg = b
	r.rep.MessageID = id
	r.ok(StepMessage, d, describeBuild(r.o.Station, r.p, b, start))
	return true
}

// testDocument is the payload: it says what it is to whoever opens it.
// The Message-ID makes each test's signed content unique: two tests in
// one second would otherwise sign the same bytes, and a partner that
// refuses replayed signed content (edihub's refuse_replays) would refuse
// the second.
func testDocument(from, to, messageID string, now time.Time) []byte {
	return []byte("edihub connectivity test\r\n" +
		"From AS2 ID: " + from + "\r\n" +
		"To AS2 ID: " + to + "\r\n" +
		"Message-ID: " + messageID + "\r\n" +
		"Sent: " + now.UTC().Format(time.RFC3339) + "\r\n" +
		"This AS2 message tests the connection between the two stations. It carries no business document and can be discarded.\r\n")
}

// exchange posts the message and reads the answer, recording the
// transport steps and the HTTP step. ok is false when a step failed.
func (r *run) exchange(ctx context.Context) (resp *http.Response, body []byte, ok bool) {
	client, own := r.client()
	if own {
		defer client.CloseIdleConnections()
	}
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, r.p.Timeout)
	defer cancel()
	tr := newTracer(r.o.Now)
	ctx = httptrace.WithClientTrace(ctx, tr.clientTrace())
	req, err := outbox.NewRequest(ctx, r.p.URL.String(), r.msg.Headers, r.msg.Body, r.p)
	if err != nil {
		r.fail(StepHTTP, 0, "cannot make the request: "+rootCause(err).Error(), "check url in the partner profile")
		return nil, nil, false
	}
	x := exchange{p: r.p, proxy: proxyFor(client, req), messageID: r.rep.MessageID, limit: r.o.MaxMDNBytes, start: r.o.Now()}
	resp, err = client.Do(req)
	if err == nil {
		body, err = readBody(resp.Body, r.o.MaxMDNBytes)
		resp.Body.Close()
	}
	x.end = r.o.Now()
	x.trace = tr.snapshot()
	x.resp, x.err, x.cancelled = resp, err, outer.Err() != nil
	steps := x.steps()
	r.rep.Steps = append(r.rep.Steps, steps...)
	if len(steps) == 0 || !steps[len(steps)-1].OK {
		return nil, nil, false
	}
	return resp, body, true
}

// client is the partner's client the dispatcher would use, on a transport
// of its own with keep-alives off; own reports that the transport is the
// probe's (its idle connections are closed afterwards).
func (r *run) client() (c *http.Client, own bool) {
	base := http.Client{}
	if r.o.Client != nil {
		base = *r.o.Client
	}
	switch t := base.Transport.(type) {
	case nil:
		base.Transport = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		base.Transport = t.Clone()
	}
	c = outbox.PartnerClient(&base, r.p)
	// Any *http.Transport here is a clone: the one above, or
	// PartnerClient's for a partner with TLS or proxy settings.
	if t, ok := c.Transport.(*http.Transport); ok {
		t.DisableKeepAlives = true
		return c, true
	}
	return c, false
}

// proxyFor is the proxy c's transport would use for req, or nil.
func proxyFor(c *http.Client, req *http.Request) *url.URL {
	t, ok := c.Transport.(*http.Transport)
	if !ok || t.Proxy == nil {
		return nil
	}
	u, err := t.Proxy(req)
	if err != nil {
		return nil
	}
	return u
}

// errTooLarge means the answer exceeded MaxMDNBytes.
var errTooLarge = errors.New("answer too large for an MDN")

// readBody reads at most limit bytes of an answer.
func readBody(r io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", errTooLarge, limit)
	}
	return b, nil
}

// describeBuild says how the test message was built, by the profile's
// settings and the certificates used.
func describeBuild(st config.Station, p *config.Partner, b postgres.OutboundBuild, now time.Time) string {
	var parts []string
	if b.Signed {
		parts = append(parts, fmt.Sprintf("signed %s with station certificate serial %s", p.Sign, serial(st.Certificate)))
	} else {
		parts = append(parts, "unsigned")
	}
	if b.Compressed {
		parts = append(parts, "compressed "+p.CompressOrder)
	}
	if b.Encrypted {
		parts = append(parts, fmt.Sprintf("encrypted %s (%s) to partner certificate serial %s", p.Encrypt, p.KeyEncryption, serial(p.EncryptionCertificate(now))))
	} else {
		parts = append(parts, "unencrypted")
	}
	parts = append(parts, fmt.Sprintf("%s, %d bytes", p.TransferEncoding, len(b.Body)))
	if p.Chunked {
		parts = append(parts, "chunked")
	}
	return strings.Join(parts, ", ") + "; asks for a synchronous signed MDN (" + micalgRequested(b.Headers) + ")"
}

// micalgRequested is the micalg of the message's
// Disposition-Notification-Options.
func micalgRequested(h http.Header) string {
	v := h.Get("Disposition-Notification-Options")
	if _, alg, ok := strings.Cut(v, "signed-receipt-micalg="); ok {
		alg = strings.TrimPrefix(strings.TrimSpace(alg), "optional,")
		return "micalg " + strings.TrimSpace(alg)
	}
	return "micalg default"
}

// buildFix is the fix for a message that cannot be built.
func buildFix(st config.Station, p *config.Partner) string {
	switch {
	case p.Sign != "" && (st.PrivateKey == nil || st.Certificate == nil):
		return "the station has no active key pair to sign with: set station.private_key and station.certificate (or mark one station.keys entry active: true)"
	case p.Encrypt != "" && len(p.Certificates) == 0:
		return "set certificate in the partner profile to the partner's certificate (PEM)"
	}
	return "check as2_id, sign, encrypt, key_encryption and mdn_micalg in the partner profile and station.as2_id (docs/configuration.md lists the values)"
}

// profileNotes are remarks about the profile that do not fail the test.
func profileNotes(st config.Station, p *config.Partner, now time.Time) []string {
	var notes []string
	if p.Sign == "" {
		notes = append(notes, "the profile sends unsigned messages (sign is not set), and so does this test: the partner cannot tell that they come from us, and most partners refuse them")
	}
	if p.Encrypt == "" {
		notes = append(notes, "the profile sends unencrypted messages (encrypt is not set), and so does this test")
	}
	if p.MDN != config.MDNSync || !p.MDNSigned {
		mode := map[string]string{config.MDNSync: "unsigned synchronous", config.MDNAsync: "asynchronous", config.MDNNone: "no"}[p.MDN]
		if p.MDN == config.MDNAsync && p.MDNSigned {
			mode = "signed asynchronous"
		}
		if mode == "" {
			mode = fmt.Sprintf("%q", p.MDN)
		}
		notes = append(notes, fmt.Sprintf("the profile asks for %s MDNs; this test asks for a synchronous signed MDN whatever the profile says, so that the answer comes back on the connection and can be checked", mode))
	}
	if strings.EqualFold(p.URL.Scheme, "http") {
		n := "url is plain http: the connection is not encrypted (no tls step)"
		if p.Encrypt != "" {
			n += "; the AS2 message itself is encrypted"
		}
		notes = append(notes, n)
	}
	if p.Proxy != nil {
		notes = append(notes, "requests go through the proxy "+p.Proxy.Redacted()+" (proxy in the partner profile): dns and connect are the proxy's")
	}
	soon := now.Add(30 * 24 * time.Hour)
	if c := st.Certificate; c != nil && c.NotAfter.Before(soon) {
		notes = append(notes, fmt.Sprintf("the station certificate (serial %s) %s: renew it and send partners the new certificate", serial(c), expiry(c, now)))
	}
	if c := p.EncryptionCertificate(now); c != nil && p.Encrypt != "" && c.NotAfter.Before(soon) {
		notes = append(notes, fmt.Sprintf("the partner certificate edihub encrypts to (serial %s) %s: ask the partner for its next certificate and add it to certificate", serial(c), expiry(c, now)))
	}
	return notes
}

func expiry(c *x509.Certificate, now time.Time) string {
	day := c.NotAfter.UTC().Format(time.DateOnly)
	if now.After(c.NotAfter) {
		return "expired on " + day
	}
	return "expires on " + day
}

// serial is a certificate's serial number in hex, as the API and the
// expiry metric write it.
func serial(c *x509.Certificate) string {
	if c == nil || c.SerialNumber == nil {
		return "(none)"
	}
	return c.SerialNumber.Text(16)
}

// subject is a certificate's common name, or its whole subject.
func subjectOf(c *x509.Certificate) string {
	if c.Subject.CommonName != "" {
		return "CN=" + c.Subject.CommonName
	}
	return c.Subject.String()
}

// redact replaces the profile's secrets (passwords, extra header values)
// in the steps' details, which quote errors of the standard library and
// of the partner. None of them should hold one, and the fixes and notes
// are edihub's own sentences with redacted URLs; this is the last line of
// defence for a report shown to users and kept by API clients. Values
// shorter than 6 characters are left alone: replacing them would mangle
// ordinary words.
func (r *run) redact() {
	var secrets []string
	add := func(s string) {
		if len(s) >= 6 {
			secrets = append(secrets, s)
		}
	}
	if p := r.p; p != nil {
		if p.BasicAuth != nil {
			add(p.BasicAuth.Password)
		}
		for _, u := range []*url.URL{p.URL, p.Proxy} {
			if u != nil && u.User != nil {
				pw, _ := u.User.Password()
				add(pw)
			}
		}
		for _, vs := range p.Headers {
			for _, v := range vs {
				add(v)
			}
		}
	}
	for i := range r.rep.Steps {
		for _, x := range secrets {
			r.rep.Steps[i].Detail = strings.ReplaceAll(r.rep.Steps[i].Detail, x, "xxxxx")
		}
	}
}
