package outbox

import (
	"crypto/tls"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/edihub/edihub/internal/config"
)

// applyAuth sets the partner's basic authentication and extra header
// fields on req, but only for the origin (scheme, host and port) of the
// partner's own URL: an async MDN to another host, or to the partner's
// host over http when its URL is https, never carries the partner's
// password (the MDN's URL comes from an unsigned request field). Extra
// fields never replace those already set (the AS2 fields).
func applyAuth(req *http.Request, p *config.Partner) {
	if p == nil || p.URL == nil || !sameOrigin(req.URL, p.URL) {
		return
	}
	for k, v := range p.Headers {
		if _, set := req.Header[k]; !set {
			req.Header[k] = v
		}
	}
	if p.BasicAuth != nil {
		req.SetBasicAuth(p.BasicAuth.User, p.BasicAuth.Password)
	}
}

// sameOrigin reports whether a and b have the same scheme, host and port
// (RFC 6454), a scheme's default port spelt out or not.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) &&
		strings.EqualFold(a.Hostname(), b.Hostname()) &&
		originPort(a) == originPort(b)
}

// originPort is u's port, or its scheme's default.
func originPort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

// partnerHost reports whether u is on the host (and port) of p's URL,
// whatever the scheme: the partner's TLS and proxy settings are for that
// host. Credentials need the same origin (applyAuth).
func partnerHost(u *url.URL, p *config.Partner) bool {
	return p != nil && p.URL != nil && strings.EqualFold(u.Host, p.URL.Host)
}

// clientPair is a partner's HTTP client, and its guarded twin for async
// MDNs to partners that do not allow non-public targets.
type clientPair struct{ plain, guarded *http.Client }

// partnerClients are the clients of partners with their own transport
// settings (tls, proxy), derived from base (which does not follow
// redirects) when first needed and again when the partner's settings
// change; the others share base. Safe for concurrent use.
type partnerClients struct {
	base *http.Client
	mu   sync.Mutex
	m    map[string]partnerClient
}

// partnerClient is a partner's client pair and the settings it was made
// with: a profile's TLS configuration and proxy keep their pointers while
// the profile is unchanged.
type partnerClient struct {
	tls   *tls.Config
	proxy *url.URL
	pair  clientPair
}

// get returns p's own clients, or false for a partner without transport
// settings of its own.
func (c *partnerClients) get(p *config.Partner) (clientPair, bool) {
	if p.TLS == nil && p.Proxy == nil {
		return clientPair{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if pc, ok := c.m[p.AS2ID]; ok && pc.tls == p.TLS && pc.proxy == p.Proxy {
		return pc.pair, true
	} else if ok {
		pc.pair.closeIdle()
	}
	cl := PartnerClient(c.base, p)
	pair := clientPair{plain: cl, guarded: guardedClient(cl)}
	if c.m == nil {
		c.m = map[string]partnerClient{}
	}
	c.m[p.AS2ID] = partnerClient{tls: p.TLS, proxy: p.Proxy, pair: pair}
	return pair, true
}

func (c *partnerClients) closeIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, pc := range c.m {
		pc.pair.closeIdle()
	}
}

func (p clientPair) closeIdle() {
	p.plain.CloseIdleConnections()
	p.guarded.CloseIdleConnections()
}

// PartnerClient returns the client messages to p are posted with: a copy
// of base that never follows redirects (see NewDispatcher) and, when p
// has its own TLS or proxy settings, a clone of base's transport (of
// http.DefaultTransport when base's is not an *http.Transport) with them.
// A cloned transport is the caller's: close its idle connections when
// done with the client.
func PartnerClient(base *http.Client, p *config.Partner) *http.Client {
	c := *base
	c.CheckRedirect = noRedirect
	if p == nil || (p.TLS == nil && p.Proxy == nil) {
		return &c
	}
	var tr *http.Transport
	if t, ok := base.Transport.(*http.Transport); ok && t != nil {
		tr = t.Clone()
	} else {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	if p.TLS != nil {
		tr.TLSClientConfig = p.TLS.Clone()
	}
	if p.Proxy != nil {
		tr.Proxy = http.ProxyURL(p.Proxy)
	}
	c.Transport = tr
	return &c
}

// noRedirect makes a client return a 3xx as the response: following it
// would turn the POST into a GET (301, 302, 303) and could record a
// partner's status page as a delivery.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// redactError removes passwords from the URLs net/http puts in its
// errors; its text is logged and stored for the API.
func redactError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = redactURL(ue.URL)
	}
	return err
}

// redactURL removes the userinfo of a URL; what cannot be parsed is
// replaced whole.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// closeIdle closes the idle connections of the clients the dispatcher
// made itself (the guarded MDN client and the partners' own), whose
// transports nobody else holds.
func (d *Dispatcher) closeIdle() {
	d.mdnClient.CloseIdleConnections()
	d.partnerClients.closeIdle()
}
