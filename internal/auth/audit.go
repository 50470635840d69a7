package auth

import (
	"context"
	"net"
	"net/http"

	"github.com/edihub/edihub/internal/postgres"
)

// Entry is one audit log entry: who (Actor), what (Action, Target,
// Detail), from where (Remote). Action names are "object.verb":
// message.send, partner.update, user.disable, token.create, login, ...
type Entry = postgres.AuditEntry

// Auditor writes audit log entries; *postgres.Store implements it.
type Auditor interface {
	Record(ctx context.Context, e Entry) error
}

// RemoteIP is the address a request came from: the IP of its
// RemoteAddr. Forwarding headers (X-Forwarded-For, Forwarded) are not
// read: anyone can set them, and edihub does not know which proxies to
// trust. Behind a proxy, the proxy's address is what is recorded.
func RemoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// AuditFromRequest is an Entry with the actor (the request's principal,
// "anonymous" without one, and its provider's issuer and subject, if any)
// and remote (RemoteIP) of r filled in.
func AuditFromRequest(r *http.Request) Entry {
	p, _ := FromContext(r.Context())
	return Entry{Actor: p.Actor(), Remote: RemoteIP(r), ActorIssuer: p.Issuer, ActorSubject: p.Subject}
}

// Caller is who makes a change and from where: a principal and its
// address ("" from the command line).
type Caller struct {
	Principal
	Remote string
}

// CallerOf is the Caller of an authenticated request.
func CallerOf(r *http.Request) Caller {
	p, _ := FromContext(r.Context())
	return Caller{Principal: p, Remote: RemoteIP(r)}
}

// CLICaller is the Caller of edihub's command line run by who, the
// operating system user and host ("root@host"): an admin (the database
// URL is its credential), recorded as cli:<who>, with no address.
func CLICaller(who string) Caller { return Caller{Principal: CLIPrincipal(who)} }

// Audit records in a the action or change c made (Action, such as
// partner.update, on target, with detail). The API, the console and the
// command line record what they did through it; changes of users and
// tokens are recorded by Users in their own transaction instead.
func Audit(ctx context.Context, a Auditor, c Caller, action, target string, detail map[string]any) error {
	return a.Record(ctx, c.entry(action, target, detail))
}

// entry is an audit Entry of c.
func (c Caller) entry(action, target string, detail map[string]any) Entry {
	return Entry{Actor: c.Actor(), Action: action, Target: target, Detail: detail, Remote: c.Remote, ActorIssuer: c.Issuer, ActorSubject: c.Subject}
}
