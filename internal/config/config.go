// Package config loads and validates edihub's station and partner file, the
// YAML file named by EDIHUB_CONFIG:
//
//	station: {as2_id: "EDIHUB", private_key: station.key, certificate: station.crt}
//	partners:
//	  - as2_id: "ACME CORP"
//	    url: https://as2.acme.example/as2
//	    certificate: acme.crt
//	    sign: sha-256
//	    encrypt: aes256-cbc
//	    mdn: sync
//	    mdn_signed: true
//
// Load reads the file, the keys and the certificates it names, and checks
// everything edihub needs before it serves its first message. Any problem is
// one *Error that names the file, the field as a YAML path
// ("partners[1].certificate", indexes from 0), the line when known, and the
// fix. Conditions that should not stop the process, such as an expired
// certificate, are returned as File.Warnings for the caller to log.
//
// Relative paths in the file are resolved against the file's directory.
// Unknown keys are an error. Algorithm names are accepted in any case and
// normalised to the spellings of the constants below.
package config

import (
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"
)

// MDN modes: what an outbound message asks the partner for.
const (
	MDNSync  = "sync"  // the MDN comes back on the same HTTP response
	MDNAsync = "async" // the partner posts the MDN to our async MDN URL later
	MDNNone  = "none"  // no MDN is requested
)

// Digest algorithms, as RFC 5751 names them. Outbound signatures use SHA-256,
// SHA-384 or SHA-512; SHA-1 is accepted only as a requested MDN micalg.
const (
	DigestSHA1   = "sha-1"
	DigestSHA256 = "sha-256"
	DigestSHA384 = "sha-384"
	DigestSHA512 = "sha-512"
)

// Content encryption algorithms for outbound messages. The GCM ciphers use
// CMS AuthEnvelopedData (RFC 5083); the others EnvelopedData.
const (
	CipherAES128CBC = "aes128-cbc"
	CipherAES192CBC = "aes192-cbc"
	CipherAES256CBC = "aes256-cbc"
	Cipher3DES      = "3des"
	CipherAES128GCM = "aes128-gcm"
	CipherAES256GCM = "aes256-gcm"
)

// RSA key transport schemes for the content encryption key.
const (
	KeyEncryptionPKCS1v15   = "rsa-pkcs1v15"
	KeyEncryptionOAEPSHA1   = "rsa-oaep-sha1"
	KeyEncryptionOAEPSHA256 = "rsa-oaep-sha256"
	KeyEncryptionOAEPSHA384 = "rsa-oaep-sha384"
	KeyEncryptionOAEPSHA512 = "rsa-oaep-sha512"
)

// Content-Transfer-Encodings for outbound message bodies.
const (
	TransferEncodingBinary = "binary"
	TransferEncodingBase64 = "base64"
)

// Compression order relative to signing (RFC 5402 allows both).
const (
	CompressBeforeSigning = "before-signing"
	CompressAfterSigning  = "after-signing"
)

// Spellings of the micalg parameter of outbound multipart/signed messages.
const (
	MICAlgNamesRFC5751 = "rfc5751" // "sha-256": RFC 5751, the default
	MICAlgNamesRFC3851 = "rfc3851" // "sha256": for receivers that predate RFC 5751
)

// Defaults for the optional partner keys.
const (
	DefaultMDN              = MDNSync
	DefaultMDNMICAlg        = DigestSHA256
	DefaultKeyEncryption    = KeyEncryptionPKCS1v15
	DefaultTransferEncoding = TransferEncodingBinary
	DefaultCompressOrder    = CompressBeforeSigning
	DefaultMICAlgNames      = MICAlgNamesRFC5751
	DefaultTimeout          = 60 * time.Second
	DefaultMaxAttempts      = 8
	// MaxResendOverdue bounds a partner's resend_overdue.
	MaxResendOverdue    = 10
	DefaultReplayWindow = 24 * time.Hour
)

// MaxAS2IDLength is the longest AS2 name RFC 4130 allows.
const MaxAS2IDLength = 128

// Station is this edihub installation's own AS2 identity.
type Station struct {
	// AS2ID is our AS2 name, exactly as partners address us (AS2-To).
	AS2ID string
	// PrivateKey signs outbound messages and MDNs and decrypts inbound ones.
	PrivateKey *rsa.PrivateKey
	// Certificate carries PrivateKey's public key; partners hold a copy. It
	// is the first certificate of the file; any others (a chain) are ignored.
	Certificate *x509.Certificate
	// AsyncMDNURL is where partners send asynchronous MDNs to us, unless a
	// partner overrides it; empty when not set.
	AsyncMDNURL string
	// Keys are all station key pairs, the active one (PrivateKey,
	// Certificate) first: every one decrypts inbound messages, so that a
	// partner still encrypting to the previous certificate during a
	// rollover keeps working; only the active one signs.
	Keys []StationKey
}

// StationKey is one station key pair.
type StationKey struct {
	PrivateKey  *rsa.PrivateKey
	Certificate *x509.Certificate
	// Active marks the key pair that signs (see Station.At).
	Active bool
	// NotBeforeUse, when set, is when the key pair starts to sign: from
	// then on (the latest such time passed wins) it is the active one.
	// It decrypts from the start, so partners may switch to its
	// certificate early.
	NotBeforeUse time.Time
}

// CertificateInfo describes one configured certificate, for the API and
// the expiry metric.
type CertificateInfo struct {
	// Owner is "station" or "partner"; Partner the partner's AS2 ID ("" for
	// the station); Station the AS2 ID of the station (the partner's).
	Owner, Partner, Station string
	Subject, Issuer         string
	// Serial is the serial number in hex.
	Serial              string
	NotBefore, NotAfter time.Time
	// Active marks the station certificate that signs, and the partner
	// certificate we encrypt to at the time asked.
	Active bool
}

// Certificates lists every configured certificate at now: the station's
// (active first) and each partner's in file order.
func (f *File) Certificates(now time.Time) []CertificateInfo {
	var out []CertificateInfo
	info := func(owner, partner string, c *x509.Certificate, active bool) CertificateInfo {
		return CertificateInfo{Owner: owner, Partner: partner, Subject: c.Subject.String(), Issuer: c.Issuer.String(),
			Serial: c.SerialNumber.Text(16), NotBefore: c.NotBefore, NotAfter: c.NotAfter, Active: active}
	}
	for _, st := range f.stations() {
		st = st.At(now)
		for _, k := range st.Keys {
			ci := info("station", "", k.Certificate, k.Active)
			ci.Station = st.AS2ID
			out = append(out, ci)
		}
	}
	for i := range f.Partners {
		p := &f.Partners[i]
		enc := p.EncryptionCertificate(now)
		for _, c := range p.Certificates {
			ci := info("partner", p.AS2ID, c, c == enc)
			ci.Station = p.Station
			out = append(out, ci)
		}
	}
	return out
}

// Partner is one trading partner's profile, with every default filled in and
// every algorithm name in its canonical spelling.
type Partner struct {
	// AS2ID is the partner's AS2 name, compared case-sensitively.
	AS2ID string
	// Station is the AS2 ID of the station the partner trades with: its
	// station key, else the first station.
	Station string
	// Profile is the partner profile the entry names (see Profiles), or
	// "". Its settings are already applied to the fields below.
	Profile string
	// URL is where outbound messages are posted (http or https).
	URL *url.URL
	// Certificates holds every certificate of the partner's PEM file, in
	// file order, all RSA. All verify the partner's signatures (certificate
	// rollover); EncryptionCertificate picks the one to encrypt to.
	Certificates []*x509.Certificate
	// Schedules says, for each of Certificates (same index), when it may
	// be encrypted to; the zero schedule: whenever it is valid.
	Schedules []CertificateSchedule
	// Sign is the outbound signature digest (DigestSHA256, DigestSHA384,
	// DigestSHA512), or "" for unsigned.
	Sign string
	// Encrypt is the outbound cipher (Cipher*), or "" for no encryption.
	Encrypt string
	// MDN is MDNSync, MDNAsync or MDNNone; the default is MDNSync.
	MDN string
	// MDNMICAlg is the micalg requested for signed MDNs (Digest*); the
	// default is DigestSHA256.
	MDNMICAlg string
	// KeyEncryption is the RSA key transport (KeyEncryption*); the default
	// is KeyEncryptionPKCS1v15.
	KeyEncryption string
	// TransferEncoding is the outbound Content-Transfer-Encoding; the
	// default is TransferEncodingBinary.
	TransferEncoding string
	// CompressOrder is CompressBeforeSigning (the default) or
	// CompressAfterSigning; it matters only when Compress is set.
	CompressOrder string
	// MICAlgNames is the spelling of the micalg parameter of signed
	// outbound messages: MICAlgNamesRFC5751 (the default) or
	// MICAlgNamesRFC3851.
	MICAlgNames string
	// Compress compresses outbound content (RFC 5402).
	Compress bool
	// MDNSigned requests a signed MDN; ignored when MDN is MDNNone.
	MDNSigned bool
	// RequireSigned rejects unsigned inbound messages with
	// insufficient-message-security. The default is true; require_signed:
	// false opts out.
	RequireSigned bool
	// RequireEncrypted rejects unencrypted inbound messages with
	// insufficient-message-security. The default is true when the partner
	// profile encrypts (Encrypt set); require_encrypted: false opts out.
	RequireEncrypted bool
	// Chunked sends bodies with chunked transfer encoding instead of
	// Content-Length.
	Chunked bool
	// MICIncludeHeaders computes the MIC of unsigned, unencrypted messages
	// (both directions) over the MIME entity, header fields included,
	// instead of over the content alone (RFC 4130 §7.3.1), for peers that
	// compute it the old way.
	MICIncludeHeaders bool
	// MDNHosts are the host names (lower-case, without port) async MDNs
	// for this partner's messages may be sent to: its mdn_hosts, else the
	// host of URL. Receipt-Delivery-Option is not covered by the
	// signature, so it is never trusted beyond them.
	MDNHosts []string
	// AllowPrivateMDNTargets lets async MDNs go to loopback, link-local,
	// private and other non-public addresses (checked when dialling);
	// false by default.
	AllowPrivateMDNTargets bool
	// BasicAuth, when set, is sent as HTTP basic authentication with
	// every request to the origin of the partner's URL (scheme, host and
	// port; auth: {user, password_file}); nil otherwise. Userinfo in URL works too but is
	// discouraged: URLs end up in logs (they are redacted there).
	BasicAuth *BasicAuth
	// TLS is the client TLS configuration for an https URL: minimum TLS
	// 1.2, the partner's CA bundle (tls.ca_file; the system pool when
	// absent) and our client certificate (tls.cert_file, tls.key_file).
	// Nil for http URLs without a tls section.
	TLS *tls.Config
	// Headers are extra HTTP header fields sent with every request to the
	// origin of the partner's URL; they never replace AS2 fields.
	Headers http.Header
	// Proxy is the HTTP proxy for requests to the partner, or nil for the
	// environment's (HTTPS_PROXY, NO_PROXY).
	Proxy *url.URL
	// ReplayWindow is how far back the same signed content under another
	// Message-ID is looked for (a replay, or a resend with a new ID); 0
	// disables the check. The default is DefaultReplayWindow.
	ReplayWindow time.Duration
	// RefuseReplays refuses such messages (authentication-failed) instead
	// of only flagging them.
	RefuseReplays bool
	// AS2Restart lets the partner resume an interrupted transfer of a
	// large message (draft-harding-as2-restart) when its request asks
	// for it (EDIINT-Features: AS2-Restart and an ETag); false receives
	// such a request as any other. Default true (as2_restart absent or
	// true).
	AS2Restart bool
	// AS2RestartSend sends large messages to the partner with AS2
	// restart: an ETag, and on a retry after a broken transfer HEAD and
	// the rest. Only when as2_restart is set to true: a partner that
	// does not implement it could answer a HEAD with the length of
	// something else.
	AS2RestartSend bool
	// EDI is what edihub does with the X12 and EDIFACT interchanges the
	// partner exchanges (edi_* keys; see docs/edi.md).
	EDI EDISettings
	// AsyncMDNURL is where the partner should send async MDNs: the
	// partner's async_mdn_url, else the station's. Set whenever MDN is
	// MDNAsync; may be empty otherwise.
	AsyncMDNURL string
	// Timeout bounds one outbound HTTP exchange, synchronous MDN included;
	// the default is DefaultTimeout.
	Timeout time.Duration
	// MaxAttempts is how many times an outbound message is tried before it
	// fails; the default is DefaultMaxAttempts.
	MaxAttempts int
	// ResendOverdue is how many times the leader's MDN poller resends a
	// message (same Message-ID, same bytes) whose async MDN is overdue
	// before failing it with "no MDN"; 0 (the default) only flags the
	// message overdue and keeps waiting.
	ResendOverdue int
	// RetryWindow, when positive, is how long an outbound message is
	// retried before it fails, past MaxAttempts: a message fails only
	// when both are used up. Zero means edihub's default
	// (EDIHUB_RETRY_WINDOW).
	RetryWindow time.Duration
	// CertificateUses records, by certificate fingerprint (see
	// Fingerprint), when the partner first signed with a certificate;
	// stored in the database, nil for a file's partners.
	CertificateUses map[string]time.Time

	// files are the secret files the profile was built from.
	files []string
}

// BasicAuth is a partner's HTTP basic authentication credential.
type BasicAuth struct {
	User, Password string
}

// String hides the password, so that a credential printed by mistake
// does not leak it.
func (b BasicAuth) String() string { return b.User + ":***" }

// RedactedURL is the partner's URL without its password, for logs.
func (p *Partner) RedactedURL() string {
	if p.URL == nil {
		return ""
	}
	return p.URL.Redacted()
}

// File is a loaded and validated configuration. It is not modified after
// Load returns and is safe for concurrent reads.
type File struct {
	// Path is the path given to Load, or the name given to Parse.
	Path string
	// Station is the first (or only) station, the partners' default.
	Station Station
	// Stations are every station of the file (station: or stations:),
	// Station first.
	Stations []Station
	Partners []Partner
	// Warnings are problems that do not stop edihub, such as an expired
	// certificate; each names the file and field. The caller logs them.
	Warnings []string
	// Revision is the revision of the partner set served, when partners
	// come from the database (see WithPartners); 0 for a file's own.
	Revision int64

	index map[string]int
	files []string
	// dir resolves the relative paths of the file.
	dir string
	// secretsDir holds the secrets that partners stored in the database
	// name (Options.SecretsDir).
	secretsDir string
}

// Partner returns the partner whose AS2 ID is exactly as2ID (case-sensitive,
// as RFC 4130 requires), or false.
func (f *File) Partner(as2ID string) (*Partner, bool) {
	if f.index != nil {
		i, ok := f.index[as2ID]
		if !ok {
			return nil, false
		}
		return &f.Partners[i], true
	}
	for i := range f.Partners {
		if f.Partners[i].AS2ID == as2ID {
			return &f.Partners[i], true
		}
	}
	return nil, false
}

// ErrMDNTarget means an async MDN URL is not one the partner's profile
// allows.
var ErrMDNTarget = errors.New("async MDN target not allowed")

// AllowsMDNTarget checks an async MDN URL (a Receipt-Delivery-Option)
// against the profile: an http or https URL whose host is one of MDNHosts
// and, unless AllowPrivateMDNTargets, not a non-public IP address
// literal. Names are checked again when dialling (see outbox). Errors
// wrap ErrMDNTarget and never hold the URL's userinfo.
func (p *Partner) AllowsMDNTarget(raw string) error {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return fmt.Errorf("%w: not an http or https URL with a host", ErrMDNTarget)
	}
	host := strings.ToLower(u.Hostname())
	allowed := false
	for _, h := range p.MDNHosts {
		if h == host {
			allowed = true
			break
		}
	}
	if !allowed {
		return fmt.Errorf("%w: host %q is not in the partner's mdn_hosts %q", ErrMDNTarget, host, p.MDNHosts)
	}
	if ip, err := netip.ParseAddr(host); err == nil && !p.AllowPrivateMDNTargets && !PublicAddr(ip) {
		return fmt.Errorf("%w: %s is not a public address and the partner profile does not set allow_private_mdn_targets", ErrMDNTarget, host)
	}
	return nil
}

func validAt(c *x509.Certificate, now time.Time) bool {
	return !now.Before(c.NotBefore) && !now.After(c.NotAfter)
}

// Files lists the secret files the profile was read with (its HTTP
// password, its TLS client certificate and key), found or not.
func (p *Partner) Files() []string { return p.files }

// Files lists the files the configuration was read from: the file itself,
// the keys and certificates it names, and the secret files of its
// partners. A change to any of them is a reason to load it again.
func (f *File) Files() []string {
	out := append([]string(nil), f.files...)
	for i := range f.Partners {
		out = append(out, f.Partners[i].files...)
	}
	return out
}
