package oidc

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"
)

// Options configure a Provider. Each field is one edihub setting (named in
// ConfigError.Setting); New validates them all and reports every mistake.
type Options struct {
	// Issuer is the provider's issuer URL exactly as its discovery document
	// states it (EDIHUB_OIDC_ISSUER): https, or http on a loopback address.
	Issuer string
	// ClientID and ClientSecret are the hub's client registration at the
	// provider (EDIHUB_OIDC_CLIENT_ID, EDIHUB_OIDC_CLIENT_SECRET_FILE).
	ClientID     string
	ClientSecret string
	// RedirectURL is the console's callback, registered at the provider
	// (EDIHUB_OIDC_REDIRECT_URL): https://<hub>/console/oidc/callback.
	RedirectURL string
	// Scopes requested (EDIHUB_OIDC_SCOPES); nil means openid, profile and
	// email. Set it to add a scope the provider needs before it issues the
	// groups claim (Okta: groups). It must contain openid.
	Scopes []string
	// GroupsClaim names the claim listing the user's groups
	// (EDIHUB_OIDC_GROUPS_CLAIM); "" means "groups". A name with dots that
	// is not a claim of its own is a path into nested claims
	// (realm_access.roles).
	GroupsClaim string
	// Roles maps a group to the hub role its members get: "viewer",
	// "operator" or "admin" (EDIHUB_OIDC_ROLES, read by ParseRoles). A
	// user in several mapped groups gets the highest of their roles; a user
	// in none gets no role (ErrNoRole).
	Roles map[string]string
	// HTTPClient makes every request to the provider; nil means a client
	// with a 30s timeout and the system's roots. Set it to trust a private
	// CA or to go through a proxy.
	HTTPClient *http.Client
	// Now is the clock the ID token's expiry is checked against; nil means
	// time.Now.
	Now func() time.Time
}

// The settings of edihub, for the messages of ConfigError.
const (
	SettingIssuer       = "EDIHUB_OIDC_ISSUER"
	SettingClientID     = "EDIHUB_OIDC_CLIENT_ID"
	SettingClientSecret = "EDIHUB_OIDC_CLIENT_SECRET_FILE"
	SettingRedirectURL  = "EDIHUB_OIDC_REDIRECT_URL"
	SettingScopes       = "EDIHUB_OIDC_SCOPES"
	SettingGroupsClaim  = "EDIHUB_OIDC_GROUPS_CLAIM"
	SettingRoles        = "EDIHUB_OIDC_ROLES"
)

// ConfigError is a mistake in the hub's OIDC settings, found by New,
// ParseRoles or, for client credentials the provider refuses, Finish. Its
// message names the option, the setting and the fix.
type ConfigError struct {
	Option  string // the field of Options, e.g. "Issuer"
	Setting string // the edihub setting, e.g. "EDIHUB_OIDC_ISSUER"
	Problem string
	Fix     string
	Err     error // the cause, if any
}

func (e *ConfigError) Error() string {
	s := e.Option + " (" + e.Setting + "): " + e.Problem
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return "oidc: " + s + "; " + e.Fix
}

func (e *ConfigError) Unwrap() error { return e.Err }

// The hub's roles, lowest first.
var roleRank = map[string]int{"viewer": 1, "operator": 2, "admin": 3}

const roleList = "viewer, operator or admin"

// ParseRoles reads the EDIHUB_OIDC_ROLES setting: comma-separated
// group=role pairs, such as "edi-admins=admin,edi-ops=operator". Spaces
// around names are ignored; a group name may contain "=" and spaces but not
// commas (the last "=" separates the role). Every mistake is reported, each
// as a *ConfigError.
func ParseRoles(s string) (map[string]string, error) {
	fail := func(problem string) *ConfigError {
		return &ConfigError{Option: "Roles", Setting: SettingRoles, Problem: problem,
			Fix: "write group=role pairs separated by commas, such as edi-admins=admin,edi-ops=operator,edi-viewers=viewer; roles are " + roleList}
	}
	roles := map[string]string{}
	var errs []error
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		i := strings.LastIndex(item, "=")
		if i < 0 {
			errs = append(errs, fail(fmt.Sprintf("%q has no =role", item)))
			continue
		}
		group, role := strings.TrimSpace(item[:i]), strings.TrimSpace(item[i+1:])
		switch {
		case group == "":
			errs = append(errs, fail(fmt.Sprintf("%q names no group", item)))
		case roleRank[role] == 0:
			errs = append(errs, fail(fmt.Sprintf("%q: %q is not a role", item, role)))
		case roles[group] != "":
			errs = append(errs, fail(fmt.Sprintf("group %q is mapped twice (%s and %s)", group, roles[group], role)))
		default:
			roles[group] = role
		}
	}
	if len(roles) == 0 && len(errs) == 0 {
		errs = append(errs, fail("no group is mapped to a role, so nobody could sign in"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return roles, nil
}

// validate fills in defaults and reports every mistake.
func (o *Options) validate() error {
	var errs []error
	add := func(option, setting, problem, fix string) {
		errs = append(errs, &ConfigError{Option: option, Setting: setting, Problem: problem, Fix: fix})
	}
	if msg := checkURL(o.Issuer); msg != "" {
		add("Issuer", SettingIssuer, msg,
			"set it to the provider's issuer URL as its /.well-known/openid-configuration states it, such as https://keycloak.example/realms/edi")
	}
	if strings.TrimSpace(o.ClientID) == "" {
		add("ClientID", SettingClientID, "empty", "set it to the client ID of the hub's registration at the provider")
	}
	if o.ClientSecret == "" {
		add("ClientSecret", SettingClientSecret, "empty",
			"write the client secret of the hub's registration into a file and name the file in "+SettingClientSecret)
	}
	if msg := checkURL(o.RedirectURL); msg != "" {
		add("RedirectURL", SettingRedirectURL, msg,
			"set it to the console's callback, https://<hub>/console/oidc/callback, and register that URL at the provider")
	}
	if o.Scopes == nil {
		o.Scopes = []string{"openid", "profile", "email"}
	} else if !slices.Contains(o.Scopes, "openid") {
		add("Scopes", SettingScopes, fmt.Sprintf("%q lacks openid, without which the provider issues no ID token", strings.Join(o.Scopes, " ")),
			"list openid among the scopes, such as openid profile email groups")
	}
	if o.GroupsClaim == "" {
		o.GroupsClaim = "groups"
	} else if strings.ContainsAny(o.GroupsClaim, " \t,") {
		add("GroupsClaim", SettingGroupsClaim, fmt.Sprintf("%q is not a claim name", o.GroupsClaim),
			"set one claim name, such as groups, roles or realm_access.roles")
	}
	if len(o.Roles) == 0 {
		add("Roles", SettingRoles, "no group is mapped to a role, so nobody could sign in",
			"map the provider's groups to roles, such as edi-admins=admin,edi-ops=operator,edi-viewers=viewer")
	}
	groups := make([]string, 0, len(o.Roles))
	for g := range o.Roles {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	for _, g := range groups {
		if roleRank[o.Roles[g]] == 0 || strings.TrimSpace(g) == "" {
			add("Roles", SettingRoles, fmt.Sprintf("%q=%q is not group=role", g, o.Roles[g]), "map each group to "+roleList)
		}
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return errors.Join(errs...)
}

// checkURL says what is wrong with an issuer or redirect URL, or "".
func checkURL(s string) string {
	if s == "" {
		return "empty"
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Sprintf("%q is not an absolute http(s) URL", s)
	}
	if u.Scheme == "http" && !isLoopback(u.Hostname()) {
		return fmt.Sprintf("%q is plain http: tokens and codes would cross the network in clear", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Sprintf("%q has a query or fragment", s)
	}
	return ""
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
