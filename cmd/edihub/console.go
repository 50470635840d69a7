package main

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/console"
	"github.com/edihub/edihub/internal/oidc"
)

// newConsole builds the ops console of a replica: its sessions are kept in
// the replica's database (the returned *sql.DB, to close after the
// listeners stopped and before the store). It acts through the same
// services as the REST API: the same checks, the same audit log.
func newConsole(r *replica, p *parts, reports console.Reports) (*console.Console, *sql.DB, error) {
	sdb := r.store.SessionDB()
	o := console.Options{
		Auth:         p.auth,
		Messages:     r.store,
		SessionDB:    sdb,
		Sessions:     r.store,
		Partners:     func() []string { return partnerNames(r.cfg.Current()) },
		Auditor:      r.store,
		Queue:        p.out.queue,
		Resender:     r.store,
		Canceller:    r.store,
		Reapplier:    r.store,
		Interchanges: r.store,
		// A document sent from the console is bounded like one sent to
		// the API, and spooled past the same threshold.
		MaxUploadBytes: r.o.maxBodyBytes,
		Spool:          r.spool,
		SpoolFromBytes: r.o.spoolFromBytes,
		Hub:            r.store,
		LeaseName:      r.o.leader.leaseName,
		Leader:         p.elector.Status,
		Version:        version(),
		Reports:        reports,
		PartnerStore:   r.store,
		PartnerService: p.out.partners,
		Certificates:   p.out.certificates,
		TestPartner:    p.out.testPartner,
		Users:          &auth.Users{Store: r.store, Now: time.Now},
		Audit:          r.store,
		OIDCName:       r.oidcName,
		Logger:         r.log,
		Now:            time.Now,
		Location:       r.report.loc,
	}
	if r.oidc != nil {
		o.OIDC = r.oidc
	}
	c, err := console.New(o)
	if err != nil {
		_ = sdb.Close()
		return nil, nil, err
	}
	return c, sdb, nil
}

// oidcOptions are the settings of sign-in with an OpenID Connect provider
// (docs/oidc.md); without an issuer the console offers passwords only.
type oidcOptions struct {
	issuer           string
	clientID         string
	clientSecretFile string
	redirectURL      string
	groupsClaim      string
	scopes           string
	roles            string
}

func (o *oidcOptions) flags(fs *flagSet) {
	fs.String(&o.issuer, "oidc-issuer", "", "issuer URL of the console's OpenID Connect provider; empty: passwords only (docs/oidc.md)")
	fs.String(&o.clientID, "oidc-client-id", "", "client ID of the hub's registration at the OpenID Connect provider")
	fs.String(&o.clientSecretFile, "oidc-client-secret-file", "", "file holding the client secret of that registration")
	fs.String(&o.redirectURL, "oidc-redirect-url", "", "the console's callback as the browser reaches it, registered at the provider: https://<hub>/console/oidc/callback")
	fs.String(&o.groupsClaim, "oidc-groups-claim", "", "claim listing the user's groups; a dotted name is a path into nested claims (realm_access.roles); empty means groups")
	fs.String(&o.scopes, "oidc-scopes", "", "scopes to ask for, separated by spaces, with openid; empty means openid profile email")
	fs.String(&o.roles, "oidc-roles", "", "which group gets which role: group=role pairs, comma-separated, e.g. edi-admins=admin,edi-ops=operator")
}

// provider checks the settings of sign-in with an OpenID Connect provider
// and returns its oidc.Lazy, not yet discovered (its Run does that, with
// retries, logging to log); nil without an issuer. Settings wrong in
// themselves are an error; a provider that is down is not.
func (o oidcOptions) provider(readFile func(string) ([]byte, error), log *zap.Logger) (*oidc.Lazy, string, error) {
	if o.issuer == "" {
		if o.clientID != "" || o.clientSecretFile != "" || o.redirectURL != "" || o.roles != "" || o.groupsClaim != "" || o.scopes != "" {
			return nil, "", errors.New("EDIHUB_OIDC_* settings are set without EDIHUB_OIDC_ISSUER (-oidc-issuer): set the provider's issuer URL, or unset them (docs/oidc.md)")
		}
		return nil, "", nil
	}
	var problems []string
	roles, err := oidc.ParseRoles(o.roles)
	if err != nil {
		problems = append(problems, err.Error())
	}
	var secret string
	if o.clientSecretFile == "" {
		problems = append(problems, "EDIHUB_OIDC_CLIENT_SECRET_FILE (-oidc-client-secret-file) is not set: point it to a file holding the client secret of the hub's registration at the provider")
	} else if b, err := readFile(o.clientSecretFile); err != nil {
		problems = append(problems, fmt.Sprintf("EDIHUB_OIDC_CLIENT_SECRET_FILE (-oidc-client-secret-file): %v: give the path of the file holding the client secret", err))
	} else if secret = strings.TrimSpace(string(b)); secret == "" {
		problems = append(problems, fmt.Sprintf("EDIHUB_OIDC_CLIENT_SECRET_FILE (-oidc-client-secret-file): %s is empty: write the client secret into it", o.clientSecretFile))
	}
	if len(problems) > 0 {
		return nil, "", errors.New(strings.Join(problems, "\n"))
	}
	opts := oidc.Options{Issuer: o.issuer, ClientID: o.clientID, ClientSecret: secret, RedirectURL: o.redirectURL, GroupsClaim: o.groupsClaim, Roles: roles}
	if o.scopes != "" {
		opts.Scopes = strings.Fields(o.scopes)
	}
	p, err := oidc.NewLazy(opts, log.Named("oidc"))
	if err != nil {
		return nil, "", err
	}
	name := o.issuer
	if u, err := url.Parse(o.issuer); err == nil && u.Host != "" {
		name = u.Hostname()
	}
	return p, name, nil
}
