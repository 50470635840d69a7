package outbox

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
)

// errPrivateTarget means an async MDN delivery would have connected to a
// non-public address the partner's profile does not allow.
var errPrivateTarget = errors.New("connection to a non-public address refused")

// publicOnly is a net.Dialer Control function: it runs after DNS, on the
// address about to be connected, so a name that resolves (or is rebound)
// to a loopback, private or link-local address is refused there.
func publicOnly(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", errPrivateTarget, address)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !config.PublicAddr(ip) {
		return fmt.Errorf("%w: %s (set allow_private_mdn_targets in the partner profile to allow it)", errPrivateTarget, host)
	}
	return nil
}

// guardedClient is base for async MDN deliveries to partners whose
// profile does not allow non-public targets: its dialer refuses them, and
// it uses no proxy (the check must see the partner's address, not the
// proxy's).
func guardedClient(base *http.Client) *http.Client {
	var tr *http.Transport
	if t, ok := base.Transport.(*http.Transport); ok && t != nil {
		tr = t.Clone()
	} else {
		tr = http.DefaultTransport.(*http.Transport).Clone()
	}
	tr.Proxy = nil
	tr.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: publicOnly}).DialContext
	c := *base
	c.Transport = tr
	return &c
}

// clientFor picks the client of an item, and refuses an async MDN whose
// URL the partner's profile (as configured now) does not allow: the
// receiver checked it when it queued the MDN, but the profile may have
// changed since.
func (d *Dispatcher) clientFor(it postgres.OutboxItem, p *config.Partner) (*http.Client, error) {
	pair := clientPair{plain: d.o.Client, guarded: d.mdnClient}
	if p != nil {
		if own, ok := d.partnerClients.get(p); ok {
			if u, err := url.Parse(it.URL); err == nil && partnerHost(u, p) {
				pair = own // its TLS and proxy settings are for its own host
			}
		}
	}
	if it.Kind == postgres.OutboxKindMessage || it.Kind == postgres.OutboxKindWebhook {
		// Messages go to the partner's configured URL, webhooks to the
		// operator's (often an internal address): neither comes from a
		// partner's request, so neither is held to the MDN target rules.
		return pair.plain, nil
	}
	if p == nil {
		return d.mdnClient, nil
	}
	if err := p.AllowsMDNTarget(it.URL); err != nil {
		return nil, err
	}
	if p.AllowPrivateMDNTargets {
		return pair.plain, nil
	}
	return pair.guarded, nil
}
