package outbox

import (
	"bytes"
	"context"
	"crypto"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
)

// send posts the item, from body when it is set, and judges the answer.
func (d *Dispatcher) send(ctx context.Context, it postgres.OutboxItem, p *config.Partner, file *spool.File) attempt {
	timeout := timeoutOf(it, p)
	client, err := d.clientFor(it, p)
	if err != nil {
		return attempt{err: err}
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The body: built in memory (it.Body) or as a stream into file.
	var src io.ReaderAt = bytes.NewReader(it.Body)
	size := int64(len(it.Body))
	if file != nil {
		src, size = file, file.Size()
	}
	var req *http.Request
	if file != nil {
		// An *os.File of its own: net/http sends it with sendfile(2)
		// over plain HTTP (and closes it once sent).
		var body *os.File
		if body, err = file.Open(); err != nil {
			return attempt{retryable: true, err: err}
		}
		defer body.Close()
		req, err = NewRequestFrom(rctx, it.URL, it.Headers, body, size, p)
	} else {
		req, err = NewRequest(rctx, it.URL, it.Headers, it.Body, p)
	}
	if err != nil {
		return attempt{err: err}
	}
	resp, body, err := d.post(rctx, client, req, it, p, src, size)
	if err != nil {
		return postFailed(ctx, err, timeout)
	}
	return d.judge(it, p, resp, body)
}

// timeoutOf bounds an attempt to send it to p.
func timeoutOf(it postgres.OutboxItem, p *config.Partner) time.Duration {
	timeout := config.DefaultTimeout
	if p != nil {
		timeout = p.Timeout
	}
	if k := kindOf(it); k.timeout > 0 {
		timeout = k.timeout
	}
	return timeout
}

// postFailed is the attempt whose post failed with err.
func postFailed(ctx context.Context, err error, timeout time.Duration) attempt {
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		err = fmt.Errorf("no answer within the partner timeout %s: %w", timeout, err)
	}
	// A refused target stays refused: no retry.
	return attempt{retryable: !errors.Is(err, errPrivateTarget), err: fmt.Errorf("post: %w", err)}
}

// NewRequest is the POST of a built message (header fields h, body) to
// url the way the dispatcher sends it: chunked when p wants it, else with
// Content-Length, and with p's basic authentication and extra header
// fields when url is on the origin of p's URL (p may be nil). h is not
// modified. Errors hold no password.
func NewRequest(ctx context.Context, url string, h http.Header, body []byte, p *config.Partner) (*http.Request, error) {
	return NewRequestFrom(ctx, url, h, bytes.NewReader(body), int64(len(body)), p)
}

// NewRequestFrom is NewRequest for a body read from r, size bytes (a
// spool file).
func NewRequestFrom(ctx context.Context, url string, h http.Header, r io.Reader, size int64, p *config.Partner) (*http.Request, error) {
	chunked := p != nil && p.Chunked
	if chunked {
		r = io.MultiReader(r) // hides the length: net/http sends chunked
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, r)
	if err != nil {
		return nil, fmt.Errorf("request: %w", redactError(err))
	}
	for k, v := range h {
		req.Header[k] = v
	}
	applyAuth(req, p)
	if chunked {
		req.ContentLength = -1
		req.TransferEncoding = []string{"chunked"}
	} else {
		req.ContentLength = size
	}
	return req, nil
}

// exchange sends req and reads the answer up to MaxResponseBytes; errors
// are redacted. A partner's exchange is timed in its metric.
func (d *Dispatcher) exchange(client *http.Client, req *http.Request, it postgres.OutboxItem) (*http.Response, []byte, error) {
	start := d.o.Now()
	resp, err := client.Do(req)
	var body []byte
	if err == nil {
		body, err = io.ReadAll(io.LimitReader(resp.Body, d.o.MaxResponseBytes+1))
		resp.Body.Close()
		if err == nil && int64(len(body)) > d.o.MaxResponseBytes {
			err = fmt.Errorf("response larger than %d bytes", d.o.MaxResponseBytes)
		}
	}
	if kindOf(it).partner {
		d.o.Metrics.duration.WithLabelValues(it.Partner).Observe(d.o.Now().Sub(start).Seconds())
	}
	if err != nil {
		return nil, nil, redactError(err)
	}
	return resp, body, nil
}

// judge judges the answer resp (its body read) to the post of it.
func (d *Dispatcher) judge(it postgres.OutboxItem, p *config.Partner, resp *http.Response, body []byte) attempt {
	a := judgeStatus(it, resp)
	if a.err != nil || !kindOf(it).message {
		return a
	}
	switch {
	case len(it.Headers["Disposition-Notification-To"]) == 0:
		a.result.Message = &postgres.MessageUpdate{Status: StatusSent, Final: true}
	case len(it.Headers["Receipt-Delivery-Option"]) > 0:
		a.result.Message = &postgres.MessageUpdate{Status: StatusAwaitingMDN, MDNDueIn: d.o.AsyncMDNWait}
	default:
		d.judgeMDN(&a, it, p, resp.Header, body)
	}
	return a
}

// judgeStatus judges the HTTP status of the answer to it: 408, 429 and
// 5xx are retried, 3xx (never followed) and other non-2xx are final.
func judgeStatus(it postgres.OutboxItem, resp *http.Response) attempt {
	a := attempt{httpStatus: resp.StatusCode}
	switch c := resp.StatusCode; {
	case c == http.StatusRequestTimeout, c == http.StatusTooManyRequests, c >= 500:
		a.retryable = true
		a.err = fmt.Errorf("partner answered HTTP %d", c)
	case c >= 300 && c <= 399:
		// Final: the same URL gets the same answer. Redirects are not
		// followed (see NewDispatcher).
		loc := resp.Header.Get("Location")
		if loc == "" {
			loc = "(no Location)"
		}
		a.err = fmt.Errorf("partner answered HTTP %d redirecting to %s; edihub does not follow redirects: update partner %q's url in the configuration (now %s)", c, redactURL(loc), it.Partner, redactURL(it.URL))
	case c < 200 || c > 299:
		a.err = fmt.Errorf("partner answered HTTP %d", c)
	}
	return a
}

// judgeMDN verifies a synchronous MDN: signature (required when a signed
// receipt was requested), Original-Message-ID, disposition and MIC. Every
// problem fails the message without retry: posting the same bytes again
// would get the same answer.
func (d *Dispatcher) judgeMDN(a *attempt, it postgres.OutboxItem, p *config.Partner, h http.Header, body []byte) {
	wantSigned := len(it.Headers["Disposition-Notification-Options"]) > 0
	stored := &postgres.NewMDN{ContentType: h.Get("Content-Type"), Headers: h, Body: body}
	if len(body) > 0 {
		a.result.MDN = stored
	}
	m, err := mdn.Parse(h, body, mdn.ParseOptions{PartnerCerts: p.Certificates, RequireSigned: wantSigned, Limits: d.o.Limits})
	if err != nil {
		a.err = fmt.Errorf("synchronous MDN rejected: %w", err)
		return
	}
	stored.Signed = m.Signed
	stored.Disposition = m.Disposition.String()
	stored.MIC = m.MIC
	v := mdn.Judge(m, mdn.Expectation{
		MessageID:     first(it.Headers, "Message-ID"),
		MIC:           it.MIC,
		MICs:          it.MICs,
		SignedReceipt: wantSigned,
		Recompute: func(alg crypto.Hash) (as2.MIC, error) {
			if it.BodyChunked {
				// Never held whole; its MICs cover every algorithm.
				return as2.MIC{}, errors.New("a message built as a stream is not recomputed")
			}
			return mdn.RecomputeMIC(it.Headers, it.Body, alg, isEnveloped(it.Headers), d.o.Limits)
		},
	})
	if v.Err != nil {
		a.err = v.Err
		a.result.Message = &postgres.MessageUpdate{Status: StatusFailed, Disposition: v.Disposition, Error: a.err.Error(), Final: true}
		return
	}
	a.result.Message = &postgres.MessageUpdate{Status: StatusDelivered, Disposition: v.Disposition, Final: true, MICVerified: &v.MICVerified}
}

// isEnveloped reports a message sent encrypted (enveloped or
// authEnveloped S/MIME), whose MIC cannot be recomputed from its bytes.
func isEnveloped(h http.Header) bool {
	return strings.Contains(strings.ToLower(first(h, "Content-Type")), "enveloped-data")
}

func first(h http.Header, k string) string {
	if v := h[k]; len(v) > 0 {
		return v[0]
	}
	return h.Get(k)
}
