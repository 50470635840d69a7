package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/edihub/edihub/internal/config"
)

// exchange is one POST and what came of it: the transport steps (dns,
// connect, tls) and the http step are read from it.
type exchange struct {
	p         *config.Partner
	proxy     *url.URL
	messageID string
	// limit is the most an answer may have (Options.MaxMDNBytes).
	limit int64
	// start and end bound client.Do and the body read.
	start, end time.Time
	trace      trace
	resp       *http.Response
	// err is client.Do's error, or the body read's.
	err error
	// cancelled reports that Run's caller cancelled the test (its context
	// ended), as opposed to the partner's timeout.
	cancelled bool
}

// steps are the transport and http steps, ending with the failed one if
// any (an answer too large for an MDN fails the mdn step after a
// successful http step).
func (x *exchange) steps() []Step {
	phase, detail, fix := x.failure()
	var out []Step
	for _, name := range []string{StepDNS, StepConnect, StepTLS, StepHTTP} {
		if name == phase {
			return append(out, Step{Name: name, Duration: x.duration(name), Detail: detail, Fix: fix})
		}
		if s, ok := x.okStep(name); ok {
			out = append(out, s)
		}
	}
	if phase != "" {
		out = append(out, Step{Name: phase, Detail: detail, Fix: fix})
	}
	return out
}

// target is the host dialled: the proxy's, or the partner's.
func (x *exchange) target() (host, port string) {
	u := x.p.URL
	if x.proxy != nil {
		u = x.proxy
	}
	port = u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[strings.ToLower(u.Scheme)]
	}
	return u.Hostname(), port
}

// via names the proxy in a detail.
func (x *exchange) via() string {
	if x.proxy == nil {
		return ""
	}
	return " (the proxy " + x.proxy.Redacted() + ")"
}

// okStep is the step name as it succeeded; false when it did not happen
// (tls on an http URL, dns for an IP address literal when not traced).
func (x *exchange) okStep(name string) (Step, bool) {
	t := x.trace
	switch name {
	case StepDNS:
		host, _ := x.target()
		if t.dnsStart.IsZero() {
			if _, err := netip.ParseAddr(host); err == nil {
				return Step{Name: name, OK: true, Detail: "no lookup: " + host + " is an IP address" + x.via()}, true
			}
			return Step{}, false
		}
		return Step{Name: name, OK: true, Duration: t.dnsEnd.Sub(t.dnsStart), Detail: fmt.Sprintf("%s%s resolved to %s", t.dnsHost, x.via(), addrList(t.dnsAddrs))}, true
	case StepConnect:
		if !t.connected {
			return Step{}, false
		}
		to := "connected to "
		if x.proxy != nil {
			to += "the proxy "
		}
		return Step{Name: name, OK: true, Duration: t.connEnd.Sub(t.connStart), Detail: to + t.connAddr}, true
	case StepTLS:
		if t.tlsState == nil {
			return Step{}, false
		}
		return Step{Name: name, OK: true, Duration: t.tlsEnd.Sub(t.tlsStart), Detail: describeTLS(t.tlsState, x.p)}, true
	case StepHTTP:
		if x.resp == nil {
			return Step{}, false
		}
		return Step{Name: name, OK: true, Duration: x.duration(name), Detail: "HTTP " + x.resp.Status}, true
	}
	return Step{}, false
}

// duration is how long step name took, up to the end of the exchange when
// it did not finish.
func (x *exchange) duration(name string) time.Duration {
	t := x.trace
	span := func(from, to time.Time) time.Duration {
		if from.IsZero() {
			return 0
		}
		if to.IsZero() || to.Before(from) {
			to = x.end
		}
		return to.Sub(from)
	}
	switch name {
	case StepDNS:
		return span(t.dnsStart, t.dnsEnd)
	case StepConnect:
		return span(t.connStart, t.connEnd)
	case StepTLS:
		return span(t.tlsStart, t.tlsEnd)
	case StepHTTP:
		// From the request written (or the connection got) to the first
		// byte of the answer: the partner's processing, sync MDN included.
		from := t.wrote
		if from.IsZero() {
			from = t.gotConn
		}
		if from.IsZero() {
			from = x.start
		}
		to := t.firstByte
		if x.err != nil {
			to = x.end
		}
		return span(from, to)
	}
	return 0
}

// phase is the step that was under way when the exchange failed.
func (x *exchange) phase() string {
	t := x.trace
	switch {
	case !t.dnsStart.IsZero() && (t.dnsEnd.IsZero() || t.dnsErr != nil):
		return StepDNS
	case !t.connected:
		return StepConnect
	case !t.tlsStart.IsZero() && (t.tlsEnd.IsZero() || t.tlsErr != nil):
		return StepTLS
	case t.gotConn.IsZero():
		return StepConnect // the proxy's tunnel
	}
	return StepHTTP
}

// failure is the failed step, what happened and the fix; phase is "" when
// the exchange succeeded with a 2xx answer.
func (x *exchange) failure() (phase, detail, fix string) {
	if x.err == nil {
		if c := x.resp.StatusCode; c >= 200 && c <= 299 {
			return "", "", ""
		}
		detail, fix = statusProblem(x.p, x.resp, x.messageID)
		return StepHTTP, detail, fix
	}
	if errors.Is(x.err, errTooLarge) {
		return StepMDN, fmt.Sprintf("HTTP %s with an answer of more than %d bytes: far too large for an MDN", x.resp.Status, x.limit),
			"check url in the partner profile (now " + x.p.RedactedURL() + "): it may point at a web page or a download instead of the partner's AS2 endpoint"
	}
	if x.cancelled {
		return x.phase(), "the test was cancelled before it finished", "run the test again and let it finish"
	}
	var dnsErr *net.DNSError
	if errors.As(x.err, &dnsErr) {
		detail, fix = x.dnsProblem(dnsErr)
		return StepDNS, detail, fix
	}
	if detail, fix, ok := x.tlsProblem(x.err); ok {
		return StepTLS, detail, fix
	}
	switch phase = x.phase(); phase {
	case StepDNS:
		host, _ := x.target()
		return phase, fmt.Sprintf("the lookup of %s gave no answer within the partner timeout %s", host, x.p.Timeout),
			"the DNS servers of this host do not answer: check them (/etc/resolv.conf, the cluster DNS) and the host name in url in the partner profile"
	case StepConnect:
		detail, fix = x.connectProblem()
	case StepTLS:
		detail = "TLS handshake failed: " + errText(x.err)
		fix = "ask the partner for its TLS requirements (version, cipher suites, client certificate: tls.cert_file and tls.key_file in the partner profile)"
		if x.timedOut() {
			detail = fmt.Sprintf("the TLS handshake did not finish within the partner timeout %s", x.p.Timeout)
			fix = "check that the port of url speaks TLS (https); a firewall or proxy may hold the connection: ask the partner"
		}
	default:
		detail, fix = x.httpProblem()
	}
	return phase, detail, fix
}

// timedOut reports an exchange that ended at the partner's timeout (or a
// dial or read timeout of the transport).
func (x *exchange) timedOut() bool {
	var ne net.Error
	return errors.Is(x.err, context.DeadlineExceeded) ||
		(errors.As(x.err, &ne) && ne.Timeout())
}

func (x *exchange) dnsProblem(e *net.DNSError) (detail, fix string) {
	where := "url in the partner profile"
	if x.proxy != nil {
		where = "proxy in the partner profile (or HTTPS_PROXY/HTTP_PROXY)"
	}
	switch {
	case e.IsNotFound:
		return fmt.Sprintf("no such host %s%s", e.Name, x.via()),
			fmt.Sprintf("check the host name in %s: it does not resolve from this host (a typo, or a name only the partner's own network knows)", where)
	case e.IsTimeout:
		return fmt.Sprintf("the lookup of %s timed out%s", e.Name, x.via()),
			fmt.Sprintf("the DNS servers of this host do not answer: check them (/etc/resolv.conf, the cluster DNS) and the host name in %s", where)
	}
	return fmt.Sprintf("the lookup of %s failed: %s", e.Name, e.Err),
		fmt.Sprintf("check the DNS configuration of this host and the host name in %s", where)
}

func (x *exchange) connectProblem() (detail, fix string) {
	t := x.trace
	host, port := x.target()
	addr := t.connAddr
	if addr == "" {
		addr = net.JoinHostPort(host, port)
	}
	switch {
	case !t.connected && errors.Is(t.connErr, syscall.ECONNREFUSED), !t.connected && errors.Is(x.err, syscall.ECONNREFUSED):
		if x.proxy != nil {
			return "connection to the proxy " + addr + " refused", "check proxy in the partner profile (or HTTPS_PROXY/HTTP_PROXY): nothing listens there"
		}
		return "connection to " + addr + " refused",
			fmt.Sprintf("nothing listens on port %s of %s: check the port in url in the partner profile (now %s), or ask the partner whether its AS2 server is running", port, host, x.p.RedactedURL())
	case !t.connected && x.timedOut():
		return fmt.Sprintf("no connection to %s within the partner timeout %s%s", addr, x.p.Timeout, x.via()),
			"a firewall drops the connection or the host is down: ask the partner to allow our outgoing IP address, check our own firewall, or set proxy in the partner profile if this network reaches the Internet only through one"
	case !t.connected && (errors.Is(x.err, syscall.ENETUNREACH) || errors.Is(x.err, syscall.EHOSTUNREACH)):
		return "no route to " + addr + x.via(),
			"this host cannot reach the partner's network: check its routes and firewall, or set proxy in the partner profile"
	case t.connected && x.proxy != nil:
		return "the proxy " + x.proxy.Redacted() + " did not open a tunnel to " + x.p.URL.Host + ": " + errText(x.err),
			"check proxy in the partner profile (or HTTPS_PROXY): the proxy refuses or cannot reach the partner; ask its operator to allow " + x.p.URL.Host
	}
	return "connection to " + addr + " failed: " + errText(x.err) + x.via(),
		"check host and port of url in the partner profile and that this host can reach them"
}

// tlsProblem explains a failed TLS handshake or a TLS alert from the
// partner; ok is false for other errors.
func (x *exchange) tlsProblem(err error) (detail, fix string, ok bool) {
	host := x.p.URL.Hostname()
	var (
		cve *tls.CertificateVerificationError
		ua  x509.UnknownAuthorityError
		he  x509.HostnameError
		ci  x509.CertificateInvalidError
		rhe tls.RecordHeaderError
		oe  *net.OpError
	)
	var leaf *x509.Certificate
	if errors.As(err, &cve) && len(cve.UnverifiedCertificates) > 0 {
		leaf = cve.UnverifiedCertificates[0]
	}
	caFile := x.p.TLS != nil && x.p.TLS.RootCAs != nil
	switch {
	case errors.As(err, &ua):
		if leaf == nil {
			leaf = ua.Cert
		}
		trust := "the system's CA pool"
		fix = "set tls.ca_file in the partner profile to the partner's CA bundle (PEM), or ask the partner for a server certificate from a public CA"
		if caFile {
			trust = "the CA bundle of tls.ca_file"
			fix = "tls.ca_file does not hold the CA that issued the partner's server certificate: ask the partner for its current CA bundle and set tls.ca_file to it"
		}
		return fmt.Sprintf("certificate signed by unknown authority: the server certificate %s is issued by %s, which %s does not hold", describeCert(leaf), issuerOf(leaf), trust), fix, true
	case errors.As(err, &he):
		names := he.Certificate.DNSNames
		for _, ip := range he.Certificate.IPAddresses {
			names = append(names, ip.String())
		}
		return fmt.Sprintf("the server certificate %s is for %s, not %s", describeCert(he.Certificate), strings.Join(names, ", "), host),
			fmt.Sprintf("use in url a host name the certificate names, or ask the partner for a server certificate that names %s", host), true
	case errors.As(err, &ci) && ci.Reason == x509.Expired:
		c := ci.Cert
		if leaf != nil {
			c = leaf
		}
		if x.end.Before(c.NotBefore) {
			return fmt.Sprintf("the server certificate %s is not valid before %s", describeCert(c), c.NotBefore.UTC().Format(time.RFC3339)),
				"check this host's clock; else ask the partner about its new server certificate", true
		}
		return fmt.Sprintf("the server certificate %s expired on %s", describeCert(c), c.NotAfter.UTC().Format(time.DateOnly)),
			"ask the partner to renew its TLS server certificate; if the date looks wrong, check this host's clock", true
	case errors.As(err, &ci):
		return "the server certificate is invalid: " + ci.Error(), "ask the partner for a valid TLS server certificate, or for the CA bundle to set as tls.ca_file", true
	case cve != nil:
		return "the server certificate does not verify: " + cve.Err.Error(), "ask the partner for its CA bundle (tls.ca_file in the partner profile) or a valid server certificate", true
	case errors.As(err, &rhe):
		_, port := x.target()
		return fmt.Sprintf("the server on port %s does not speak TLS", port),
			"use http:// in url if the partner's endpoint is plain HTTP, or the port of its TLS endpoint", true
	case errors.As(err, &oe) && oe.Op == "remote error":
		alert := oe.Err.Error()
		detail = "the partner ended the TLS handshake with the alert \"" + alert + "\""
		switch {
		case strings.Contains(alert, "certificate required"), strings.Contains(alert, "bad certificate"), strings.Contains(alert, "unknown certificate authority"),
			strings.Contains(alert, "certificate unknown"), strings.Contains(alert, "unsupported certificate"), strings.Contains(alert, "access denied"):
			fix = "the partner wants a client certificate it trusts: set tls.cert_file and tls.key_file in the partner profile to our client certificate and key (ask the partner which CA it accepts, and to register our certificate)"
			if x.p.TLS != nil && len(x.p.TLS.Certificates) > 0 {
				fix = "the partner does not accept our client certificate (tls.cert_file): ask the partner to register it, or which CA it accepts"
			}
		case strings.Contains(alert, "protocol version"):
			fix = "no common TLS version: edihub speaks TLS 1.2 and 1.3; ask the partner to enable TLS 1.2 or later"
		case strings.Contains(alert, "handshake failure"), strings.Contains(alert, "insufficient security"):
			fix = "no common cipher suite, or a client certificate is required: ask the partner for its TLS requirements; set tls.cert_file and tls.key_file if it wants a client certificate"
		default:
			fix = "ask the partner why its server refuses the TLS handshake"
		}
		return detail, fix, true
	}
	return "", "", false
}

// httpProblem explains an exchange that failed after the connection was
// made: no answer, a broken answer.
func (x *exchange) httpProblem() (detail, fix string) {
	got := "no answer"
	if x.resp != nil {
		got = "HTTP " + x.resp.Status + ", then the answer broke off"
	}
	if x.timedOut() {
		return fmt.Sprintf("%s within the partner timeout %s", got, x.p.Timeout),
			fmt.Sprintf("the partner takes longer to answer with its synchronous MDN: raise timeout in the partner profile (now %s), or ask the partner to check its logs for Message-ID %s; large messages are better sent with mdn: async", x.p.Timeout, x.messageID)
	}
	fix = "the partner closed the connection without a proper answer: ask it to check its logs for Message-ID " + x.messageID
	if x.p.Chunked {
		fix += "; some servers refuse chunked bodies: try chunked: false in the partner profile"
	}
	return got + ": " + errText(x.err), fix
}

// statusProblem explains a non-2xx answer.
func statusProblem(p *config.Partner, resp *http.Response, messageID string) (detail, fix string) {
	c := resp.StatusCode
	detail = "HTTP " + resp.Status
	switch {
	case c >= 300 && c <= 399:
		loc := resp.Header.Get("Location")
		if loc == "" {
			loc = "(no Location)"
		} else if u, err := url.Parse(loc); err == nil {
			loc = u.Redacted()
		} else {
			loc = "(unparsable Location)"
		}
		return detail + " redirecting to " + loc,
			fmt.Sprintf("edihub does not follow redirects (a POST would become a GET): set url in the partner profile (now %s) to the partner's current AS2 endpoint; check the new address with the partner", p.RedactedURL())
	case c == http.StatusUnauthorized:
		if ch := resp.Header.Get("WWW-Authenticate"); ch != "" {
			scheme, _, _ := strings.Cut(ch, " ")
			detail += ", the partner asks for " + scheme + " authentication"
			if !strings.EqualFold(scheme, "basic") {
				return detail, "edihub sends HTTP basic authentication (auth.user, auth.password_file) and extra header fields (headers) in the partner profile: ask the partner which of them to use"
			}
		}
		if p.BasicAuth == nil && p.URL.User == nil {
			return detail, "the partner requires HTTP authentication: set auth.user and auth.password_file in the partner profile to the user and password the partner gave you"
		}
		return detail + " (our credentials were refused)", "check auth.user and the password in auth.password_file (or the user and password in url) in the partner profile with the partner"
	case c == http.StatusForbidden:
		return detail, "the partner refuses us: ask it to allow our outgoing IP address and our AS2 ID; check auth and headers in the partner profile"
	case c == http.StatusNotFound, c == http.StatusMethodNotAllowed:
		return detail, fmt.Sprintf("no AS2 endpoint at this address: check the path of url in the partner profile (now %s) with the partner", p.RedactedURL())
	case c == http.StatusLengthRequired:
		return detail, "the partner needs a Content-Length: set chunked: false in the partner profile"
	case c == http.StatusRequestEntityTooLarge:
		return detail, "the partner's size limit is below even the test message: ask the partner to raise it"
	case c == http.StatusUnsupportedMediaType:
		return detail, "the partner refuses the message's content type: check sign, encrypt and compress in the partner profile with what the partner accepts"
	case c == http.StatusRequestTimeout, c == http.StatusTooManyRequests:
		return detail, "the partner is busy or slowed us down: run the test again later"
	case c == http.StatusBadRequest:
		f := "the partner refuses the request as malformed: ask it to check its logs for Message-ID " + messageID + "; check as2_id, transfer_encoding and chunked in the partner profile"
		return detail, f
	case c == http.StatusBadGateway, c == http.StatusServiceUnavailable, c == http.StatusGatewayTimeout:
		return detail, "the partner's AS2 server, or a gateway in front of it, is unavailable: run the test again later or ask the partner"
	case c >= 500:
		return detail, fmt.Sprintf("the partner's AS2 server failed on the message: ask the partner to check its logs for Message-ID %s (it may not know our AS2 ID, or cannot decrypt or verify: compare certificates and AS2 IDs with the partner)", messageID)
	}
	return detail, "the partner refuses the message: ask it to check its logs for Message-ID " + messageID
}

// describeTLS says which TLS version and server certificate were agreed
// and what the certificate was verified against.
func describeTLS(s *tls.ConnectionState, p *config.Partner) string {
	d := tls.VersionName(s.Version)
	if len(s.PeerCertificates) > 0 {
		c := s.PeerCertificates[0]
		d += fmt.Sprintf(", server certificate %s issued by %s, valid until %s", describeCert(c), issuerOf(c), c.NotAfter.UTC().Format(time.DateOnly))
	}
	if p.TLS != nil && p.TLS.RootCAs != nil {
		d += ", verified with tls.ca_file"
	} else {
		d += ", verified with the system's CA pool"
	}
	if p.TLS != nil && len(p.TLS.Certificates) > 0 {
		d += ", our client certificate sent"
	}
	return d
}

func describeCert(c *x509.Certificate) string {
	if c == nil {
		return "(none)"
	}
	return subjectOf(c)
}

func issuerOf(c *x509.Certificate) string {
	if c == nil {
		return "(unknown)"
	}
	if c.Issuer.CommonName != "" {
		return "CN=" + c.Issuer.CommonName
	}
	return c.Issuer.String()
}

// addrList is at most four addresses.
func addrList(addrs []string) string {
	if len(addrs) == 0 {
		return "no address"
	}
	if len(addrs) > 4 {
		return strings.Join(addrs[:4], ", ") + fmt.Sprintf(" and %d more", len(addrs)-4)
	}
	return strings.Join(addrs, ", ")
}

// rootCause strips the *url.Error around a client error: its text holds
// the request URL, which may carry a password.
func rootCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// errText is the text of err without the request URL.
func errText(err error) string { return rootCause(err).Error() }
