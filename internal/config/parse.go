package config

import (
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Options tunes Load and Parse.
type Options struct {
	// Now returns the time certificates are checked against; nil means
	// time.Now.
	Now func() time.Time
	// SecretsDir is the one directory partner secrets are read from when
	// a profile goes to or comes from the database (see ParsePartnerDoc,
	// BuildPartner): a secret is named there by a plain file name, never
	// by a path. Empty: such profiles may name no secrets. The file's
	// own partners list keeps paths relative to the file for its own
	// checks; importing it (File.Specs) takes names only.
	SecretsDir string
}

// Load reads and validates the configuration file at path, and the keys and
// certificates it names. Every failure is an *Error; see the package doc.
func Load(path string, opts Options) (*File, error) {
	if path == "" {
		return nil, &Error{File: "(none)", Msg: "no configuration file given", Fix: "set EDIHUB_CONFIG to the station and partner YAML file"}
	}
	data, err := readFile(path)
	if err != nil {
		fix := "check the path in EDIHUB_CONFIG"
		if errors.Is(err, fs.ErrPermission) {
			fix = "make the file readable by the user edihub runs as"
		}
		return nil, &Error{File: path, Msg: describeReadError(err, path), Fix: fix, Err: err}
	}
	return Parse(data, filepath.Dir(path), path, opts)
}

// Parse validates data as the contents of a configuration file called name
// (used in messages and as File.Path) in directory dir, against which
// relative key and certificate paths are resolved. It reads those files.
// Every failure is an *Error.
func Parse(data []byte, dir, name string, opts Options) (*File, error) {
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	// The file's own partners keep naming their secrets by paths
	// relative to the file: they are served only once imported, and the
	// import (Specs) takes names in the secrets directory alone.
	p := &parser{name: name, dir: dir, secretsDir: opts.SecretsDir, now: now()}
	if len(data) > maxFileSize {
		return nil, p.fail("", fmt.Sprintf("the file is larger than %d MiB", maxFileSize>>20), "point EDIHUB_CONFIG at the edihub station and partner file")
	}
	raw, err := p.decode(data)
	if err != nil {
		return nil, err
	}
	return p.build(raw)
}

// parser carries what validation needs to phrase errors and warnings.
type parser struct {
	name string
	// dir resolves relative paths: of every file in a configuration
	// file, of public files (certificates, CA bundles) in a partners
	// document.
	dir string
	// secretRefs makes secrets (passwords, TLS client certificates and
	// keys) names in secretsDir instead of paths: in every profile that
	// goes to or comes from the database, whoever wrote it.
	secretRefs bool
	// secretsDir is the secrets directory (Options.SecretsDir); it is
	// also the File's, for the profiles built from it later.
	secretsDir string
	// secretsOptional turns a secret missing here into a warning: a
	// partners document checked away from the replicas (edihub partners
	// apply) may name secrets that only the replicas have.
	secretsOptional bool
	// inlineOnly refuses public files given as paths (see
	// PartnerDocOptions.InlineOnly).
	inlineOnly bool
	// profileApplied marks a stored spec: its profile's settings were
	// filled in when it was stored (see EncodeSpec).
	profileApplied bool
	now            time.Time
	ix             *nodeIndex
	warnings       []string
	// files are the paths read, for File.Files.
	files []string
	// knownKeys, when set, lists the keys a mapping at parent accepts,
	// for unknown-key errors of documents other than the configuration
	// file (the connectors document).
	knownKeys func(parent string) []string
}

func (p *parser) fail(field, msg, fix string) *Error {
	e := &Error{File: p.name, Field: field, Msg: msg, Fix: fix}
	if p.ix != nil {
		e.Line = p.ix.line(field)
	}
	return e
}

func (p *parser) failErr(field string, err error, msg, fix string) *Error {
	e := p.fail(field, msg, fix)
	e.Err = err
	return e
}

func (p *parser) warn(field, format string, args ...any) {
	p.warnings = append(p.warnings, p.name+": "+field+": "+fmt.Sprintf(format, args...))
}

func (p *parser) build(raw *rawFile) (*File, error) {
	sts, err := p.stations(raw)
	if err != nil {
		return nil, err
	}
	f := &File{Path: p.name, Station: sts[0], Stations: sts, index: make(map[string]int, len(raw.Partners)), dir: p.dir, secretsDir: p.secretsDir}
	if len(raw.Partners) == 0 {
		p.warn("partners", "no partners configured; edihub can neither send nor accept messages")
	}
	for i := range raw.Partners {
		field := fmt.Sprintf("partners[%d]", i)
		pa, err := p.partner(field, &raw.Partners[i], sts)
		if err != nil {
			return nil, err
		}
		if j, dup := f.index[pa.AS2ID]; dup {
			return nil, p.fail(field+".as2_id", fmt.Sprintf("AS2 ID %q is also the AS2 ID of partners[%d]", pa.AS2ID, j),
				fmt.Sprintf("give partners[%d] and partners[%d] distinct AS2 IDs, or merge them into one entry", j, i))
		}
		f.index[pa.AS2ID] = i
		f.Partners = append(f.Partners, pa)
	}
	f.Warnings = p.warnings
	f.files = append([]string{p.name}, p.files...)
	return f, nil
}

// stations reads the station section, or the stations list: one or the
// other, each station with its own AS2 ID.
func (p *parser) stations(raw *rawFile) ([]Station, error) {
	switch {
	case raw.Station != nil && len(raw.Stations) > 0:
		return nil, p.fail("stations", "station and stations are both set", "list every station under stations (the first is the partners' default) and remove station")
	case raw.Station != nil:
		st, err := p.station("station", raw.Station)
		if err != nil {
			return nil, err
		}
		return []Station{st}, nil
	case len(raw.Stations) == 0:
		return nil, p.fail("station", "no station section", `add station: {as2_id: "...", private_key: station.key, certificate: station.crt}`)
	}
	var sts []Station
	for i := range raw.Stations {
		field := fmt.Sprintf("stations[%d]", i)
		st, err := p.station(field, &raw.Stations[i])
		if err != nil {
			return nil, err
		}
		for j := range sts {
			if sts[j].AS2ID == st.AS2ID {
				return nil, p.fail(field+".as2_id", fmt.Sprintf("AS2 ID %q is also the AS2 ID of stations[%d]", st.AS2ID, j), "give each station its own AS2 ID")
			}
		}
		sts = append(sts, st)
	}
	return sts, nil
}

func (p *parser) station(field string, raw *rawStation) (Station, error) {
	var st Station
	if err := p.as2ID(field+".as2_id", raw.AS2ID); err != nil {
		return st, err
	}
	st.AS2ID = raw.AS2ID

	pairs := raw.Keys
	switch {
	case len(pairs) > 0 && (raw.PrivateKey != "" || raw.Certificate != ""):
		return st, p.fail(field+".keys", "keys and private_key/certificate are both set", "list every key pair under keys (one with active: true) and remove private_key and certificate")
	case len(pairs) == 0:
		pairs = []rawStationKey{{PrivateKey: raw.PrivateKey, Certificate: raw.Certificate, Active: true}}
	}
	active := 0
	for i, rk := range pairs {
		kf := field
		if len(raw.Keys) > 0 {
			kf = fmt.Sprintf("%s.keys[%d]", field, i)
		}
		k, err := p.stationKey(kf, rk)
		if err != nil {
			return st, err
		}
		if rk.NotBeforeUse != "" {
			if k.Active {
				return st, p.fail(kf+".not_before_use", "a key pair with not_before_use is also marked active: true",
					"remove active: true from it: it starts to sign at not_before_use; until then the active key pair signs")
			}
			if k.NotBeforeUse, err = p.time(kf+".not_before_use", rk.NotBeforeUse); err != nil {
				return st, err
			}
		}
		if k.Active {
			active++
		}
		st.Keys = append(st.Keys, k)
	}
	if active != 1 {
		return st, p.fail(field+".keys", fmt.Sprintf("%d key pairs are marked active: true", active),
			"mark exactly one key pair active: true; it signs (until a key pair's not_before_use passes), all of them decrypt")
	}
	st = st.At(p.now)

	if raw.AsyncMDNURL != "" {
		if _, err := p.url(field+".async_mdn_url", raw.AsyncMDNURL); err != nil {
			return st, err
		}
		st.AsyncMDNURL = strings.TrimSpace(raw.AsyncMDNURL)
	}
	return st, nil
}

// stationKey loads one station key pair; field is "station" for the
// single private_key/certificate form.
func (p *parser) stationKey(field string, raw rawStationKey) (StationKey, error) {
	k := StationKey{Active: raw.Active}
	keyData, err := p.readRef(field+".private_key", raw.PrivateKey, "the station's PEM private key file")
	if err != nil {
		return k, err
	}
	key, prob := parsePrivateKey(keyData, raw.PrivateKey)
	if prob != nil {
		return k, p.failErr(field+".private_key", prob.err, prob.msg, prob.fix)
	}
	if bits := key.N.BitLen(); bits < 2048 {
		p.warn(field+".private_key", "the RSA key has %d bits; use at least 2048", bits)
	}
	k.PrivateKey = key

	certData, err := p.readRef(field+".certificate", raw.Certificate, "the station's PEM certificate file")
	if err != nil {
		return k, err
	}
	certs, prob := parseCertificates(certData, raw.Certificate)
	if prob != nil {
		return k, p.failErr(field+".certificate", prob.err, prob.msg, prob.fix)
	}
	cert := certs[0]
	if pub, ok := cert.PublicKey.(*rsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return k, p.fail(field+".certificate",
			fmt.Sprintf("the certificate in %s does not match the key in %s (different public keys)", raw.Certificate, raw.PrivateKey),
			fmt.Sprintf("point certificate at the certificate issued for the station key; compare `openssl x509 -noout -pubkey -in %s` with `openssl pkey -pubout -in %s`", raw.Certificate, raw.PrivateKey))
	}
	fix := "renew it and send partners the new certificate"
	if !raw.Active {
		fix = "remove this old key pair once no partner encrypts to it"
	}
	p.checkValidity(field+".certificate", cert, "", fix)
	k.Certificate = cert
	return k, nil
}

// partner reads one partner entry, section by section. The sections run in
// the order the checks always ran in, so a file with several mistakes
// reports the same first error, and the same warnings in the same order.
// The entry's profile, if any, fills in the keys it leaves out first.
func (p *parser) partner(field string, raw *rawPartner, sts []Station) (Partner, error) {
	var pa Partner
	st, err := p.partnerStation(field, raw, sts)
	if err != nil {
		return pa, err
	}
	pa.Station = st.AS2ID
	profile, err := p.applyProfile(field, raw)
	if err != nil {
		return pa, err
	}
	pa.Profile = profile
	if err := p.partnerEndpoint(field, raw, sts, &pa); err != nil {
		return pa, err
	}
	if err := p.partnerCertificates(field, raw, &pa); err != nil {
		return pa, err
	}
	if err := p.partnerMessages(field, raw, &pa); err != nil {
		return pa, err
	}
	if err := p.transport(field, raw, &pa); err != nil {
		return pa, err
	}
	auth, err := p.basicAuth(field+".auth", raw.Auth)
	if err != nil {
		return pa, err
	}
	pa.BasicAuth = auth
	if err := p.partnerMDN(field, raw, st, &pa); err != nil {
		return pa, err
	}
	if err := p.partnerRetries(field, raw, &pa); err != nil {
		return pa, err
	}
	if err := p.partnerEDI(field, raw, &pa); err != nil {
		return pa, err
	}
	return pa, nil
}

// partnerStation finds the station a partner trades with: its station
// key, else the first.
func (p *parser) partnerStation(field string, raw *rawPartner, sts []Station) (*Station, error) {
	if raw.Station == "" {
		return &sts[0], nil
	}
	var names []string
	for i := range sts {
		if sts[i].AS2ID == raw.Station {
			return &sts[i], nil
		}
		names = append(names, strconv.Quote(sts[i].AS2ID))
	}
	return nil, p.fail(field+".station", fmt.Sprintf("no station %q", raw.Station),
		"name one of the stations of the configuration file: "+strings.Join(names, ", ")+" (or leave station out for the first)")
}

// partnerEndpoint reads the partner's AS2 ID and URL.
func (p *parser) partnerEndpoint(field string, raw *rawPartner, sts []Station, pa *Partner) error {
	if err := p.as2ID(field+".as2_id", raw.AS2ID); err != nil {
		return err
	}
	for i := range sts {
		if raw.AS2ID == sts[i].AS2ID {
			return p.fail(field+".as2_id", fmt.Sprintf("AS2 ID %q is the station's own AS2 ID", raw.AS2ID),
				"give the partner its own AS2 ID; the stations' AS2 IDs are ours")
		}
	}
	pa.AS2ID = raw.AS2ID

	if raw.URL == "" {
		return p.fail(field+".url", "missing", "set url to the partner's AS2 endpoint, like https://as2.partner.example/as2")
	}
	u, err := p.url(field+".url", raw.URL)
	if err != nil {
		return err
	}
	pa.URL = u
	return nil
}

// partnerCertificates loads the partner's certificates. One that is not
// valid now is a warning, not an error: messages still go to the one that
// expires last.
func (p *parser) partnerCertificates(field string, raw *rawPartner, pa *Partner) error {
	entries := raw.Certificates
	switch {
	case raw.Certificate != "" && len(entries) > 0:
		return p.fail(field+".certificates", "certificate and certificates are both set",
			"list every certificate under certificates (each with its schedule) and remove certificate")
	case len(entries) == 0:
		entries = []rawCertificate{{Certificate: raw.Certificate}}
	}
	usable := false
	for i, e := range entries {
		ef := field + ".certificate"
		if len(raw.Certificates) > 0 {
			ef = fmt.Sprintf("%s.certificates[%d]", field, i)
		}
		var sched CertificateSchedule
		sched.SwitchOnFirstUse = e.SwitchOnFirstUse
		if e.NotBeforeUse != "" {
			t, err := p.time(ef+".not_before_use", e.NotBeforeUse)
			if err != nil {
				return err
			}
			sched.NotBeforeUse = t
		}
		cf := ef
		if len(raw.Certificates) > 0 {
			cf = ef + ".certificate"
		}
		data, err := p.readPublic(cf, e.Certificate, "the partner's PEM certificate file")
		if err != nil {
			return err
		}
		certs, prob := parseCertificates(data, refName(e.Certificate))
		if prob != nil {
			return p.failErr(cf, prob.err, prob.msg, prob.fix)
		}
		for j, c := range certs {
			which := ""
			if len(certs) > 1 {
				which = fmt.Sprintf(" %d of %d", j+1, len(certs))
			}
			if p.checkValidity(cf, c, which, "ask the partner for its current certificate") {
				usable = true
			}
			pa.Certificates = append(pa.Certificates, c)
			pa.Schedules = append(pa.Schedules, sched)
		}
	}
	if !usable {
		p.warn(field+".certificate", "no certificate is valid now; outbound messages are encrypted to the one that expires last")
	}
	return nil
}

// partnerMessages reads how messages to the partner are built (signing,
// encryption, compression, the MDN asked for) and what its messages must
// carry to be accepted.
func (p *parser) partnerMessages(field string, raw *rawPartner, pa *Partner) error {
	for _, e := range []struct {
		key  string
		in   string
		en   enum
		dflt string
		out  *string
	}{
		{"sign", raw.Sign, signEnum, "", &pa.Sign},
		{"encrypt", raw.Encrypt, encryptEnum, "", &pa.Encrypt},
		{"mdn", raw.MDN, mdnEnum, DefaultMDN, &pa.MDN},
		{"mdn_micalg", raw.MDNMICAlg, micalgEnum, DefaultMDNMICAlg, &pa.MDNMICAlg},
		{"key_encryption", raw.KeyEncryption, keyEncryptionEnum, DefaultKeyEncryption, &pa.KeyEncryption},
		{"transfer_encoding", raw.TransferEncoding, transferEncodingEnum, DefaultTransferEncoding, &pa.TransferEncoding},
		{"compress_order", raw.CompressOrder, compressOrderEnum, DefaultCompressOrder, &pa.CompressOrder},
		{"micalg_names", raw.MICAlgNames, micalgNamesEnum, DefaultMICAlgNames, &pa.MICAlgNames},
	} {
		v, err := p.enum(field+"."+e.key, e.in, e.en, e.dflt)
		if err != nil {
			return err
		}
		*e.out = v
	}
	pa.Compress = raw.Compress
	pa.MDNSigned = raw.MDNSigned
	// Secure by default: anyone who knows a partner's AS2 name can post
	// in its name, so only a verified signature proves the sender. A
	// partner that cannot sign (or encrypt) is an explicit opt-out.
	pa.RequireSigned = true
	if raw.RequireSigned != nil {
		pa.RequireSigned = *raw.RequireSigned
	}
	pa.RequireEncrypted = pa.Encrypt != ""
	if raw.RequireEncrypted != nil {
		pa.RequireEncrypted = *raw.RequireEncrypted
	}
	if !pa.RequireSigned {
		p.warn(field+".require_signed", "unsigned messages from this partner are accepted: anyone who knows its AS2 ID can send in its name")
	}
	pa.Chunked = raw.Chunked
	pa.MICIncludeHeaders = raw.MICIncludeHeaders
	return nil
}

// basicAuth reads the partner's HTTP user and password file (field is the
// auth section's path); nil when the partner has none.
func (p *parser) basicAuth(field string, raw *rawAuth) (*BasicAuth, error) {
	if raw == nil {
		return nil, nil
	}
	if raw.User == "" || strings.ContainsAny(raw.User, ":\r\n") {
		return nil, p.fail(field+".user", "missing, or holds ':' or a line break", "set auth.user to the HTTP user name the partner gave you")
	}
	data, err := p.readSecret(field+".password_file", raw.PasswordFile, "a file holding the partner's HTTP password (one line)")
	if err != nil || data == nil {
		return nil, err
	}
	pw := strings.TrimRight(string(data), "\r\n")
	if pw == "" || strings.ContainsAny(pw, "\r\n") {
		return nil, p.fail(field+".password_file", "the file must hold the password on one line", "write the password alone on the first line of "+raw.PasswordFile)
	}
	return &BasicAuth{User: raw.User, Password: pw}, nil
}

// partnerMDN reads where asynchronous MDNs are sent and from which hosts
// the partner's MDNs may ask to be sent to; by default only the host of
// its own URL.
func (p *parser) partnerMDN(field string, raw *rawPartner, st *Station, pa *Partner) error {
	pa.AllowPrivateMDNTargets = raw.AllowPrivateMDNTargets
	pa.MDNHosts = []string{strings.ToLower(pa.URL.Hostname())}
	if len(raw.MDNHosts) > 0 {
		pa.MDNHosts = nil
		for i, h := range raw.MDNHosts {
			h = strings.ToLower(strings.TrimSpace(h))
			if h == "" || strings.ContainsAny(h, "/:@ ") && !strings.HasPrefix(h, "[") {
				return p.fail(fmt.Sprintf("%s.mdn_hosts[%d]", field, i), fmt.Sprintf("%q is not a host name", raw.MDNHosts[i]),
					"list host names or IP addresses only, without scheme, port or path, like as2.partner.example")
			}
			pa.MDNHosts = append(pa.MDNHosts, strings.Trim(h, "[]"))
		}
	}

	if raw.AsyncMDNURL != "" {
		if _, err := p.url(field+".async_mdn_url", raw.AsyncMDNURL); err != nil {
			return err
		}
		pa.AsyncMDNURL = strings.TrimSpace(raw.AsyncMDNURL)
	} else if pa.MDN == MDNAsync {
		if st.AsyncMDNURL == "" {
			return p.fail(field+".async_mdn_url", "missing: mdn is async, so the partner needs a URL to send the MDN to",
				"set async_mdn_url on this partner or on the station to edihub's public AS2 URL, like https://edihub.example/as2; or use mdn: sync")
		}
		pa.AsyncMDNURL = st.AsyncMDNURL
	}
	return nil
}

// partnerRetries reads the replay check and how long and how often a
// message to the partner is tried.
func (p *parser) partnerRetries(field string, raw *rawPartner, pa *Partner) error {
	pa.RefuseReplays = raw.RefuseReplays
	pa.AS2Restart = raw.AS2Restart == nil || *raw.AS2Restart
	pa.AS2RestartSend = raw.AS2Restart != nil && *raw.AS2Restart
	pa.ReplayWindow = DefaultReplayWindow
	if raw.ReplayWindow != "" {
		d, err := time.ParseDuration(strings.TrimSpace(raw.ReplayWindow))
		if err != nil || d < 0 {
			return p.failErr(field+".replay_window", err, fmt.Sprintf("%q is not a duration", raw.ReplayWindow), "write a duration with a unit, like 24h, or 0s to disable the check")
		}
		pa.ReplayWindow = d
	}
	pa.Timeout = DefaultTimeout
	if raw.Timeout != "" {
		d, err := time.ParseDuration(strings.TrimSpace(raw.Timeout))
		if err != nil || d <= 0 {
			msg := fmt.Sprintf("%q is not a positive duration", raw.Timeout)
			return p.failErr(field+".timeout", err, msg, "write a positive duration with a unit, like 60s or 2m")
		}
		pa.Timeout = d
	}
	pa.MaxAttempts = DefaultMaxAttempts
	if raw.MaxAttempts != nil {
		if *raw.MaxAttempts <= 0 {
			return p.fail(field+".max_attempts", fmt.Sprintf("%d is not positive", *raw.MaxAttempts),
				fmt.Sprintf("write a whole number of at least 1 (default %d)", DefaultMaxAttempts))
		}
		pa.MaxAttempts = *raw.MaxAttempts
	}
	if raw.ResendOverdue != nil {
		if n := *raw.ResendOverdue; n < 0 || n > MaxResendOverdue {
			return p.fail(field+".resend_overdue", fmt.Sprintf("%d is out of range", n),
				fmt.Sprintf("write a whole number from 0 (only flag the message overdue; the default) to %d", MaxResendOverdue))
		}
		pa.ResendOverdue = *raw.ResendOverdue
	}
	if raw.RetryWindow != "" {
		d, err := time.ParseDuration(strings.TrimSpace(raw.RetryWindow))
		if err != nil || d <= 0 {
			msg := fmt.Sprintf("%q is not a positive duration", raw.RetryWindow)
			return p.failErr(field+".retry_window", err, msg, "write a positive duration with a unit, like 24h or 90m; leave it out for EDIHUB_RETRY_WINDOW")
		}
		pa.RetryWindow = d
	}
	return nil
}

// transport reads the partner's HTTPS, extra header and proxy settings.
func (p *parser) transport(field string, raw *rawPartner, pa *Partner) error {
	if raw.TLS != nil || pa.URL.Scheme == "https" {
		pa.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	if raw.TLS != nil {
		if pa.URL.Scheme != "https" {
			return p.fail(field+".tls", "tls is set but url is not https", "use an https url, or remove the tls section")
		}
		if raw.TLS.CAFile != "" {
			data, err := p.readPublic(field+".tls.ca_file", raw.TLS.CAFile, "the partner's CA certificates in PEM")
			if err != nil {
				return err
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(data) {
				return p.fail(field+".tls.ca_file", "no PEM certificate in "+refName(raw.TLS.CAFile), "point ca_file at the PEM certificates of the CA that issued the partner's server certificate")
			}
			pa.TLS.RootCAs = pool
		}
		if (raw.TLS.CertFile == "") != (raw.TLS.KeyFile == "") {
			return p.fail(field+".tls", "cert_file and key_file go together", "set both (our client certificate and its key) or neither")
		}
		if raw.TLS.CertFile != "" {
			certPEM, err := p.readSecret(field+".tls.cert_file", raw.TLS.CertFile, "our client certificate in PEM")
			if err != nil {
				return err
			}
			keyPEM, err := p.readSecret(field+".tls.key_file", raw.TLS.KeyFile, "the key of our client certificate in PEM")
			if err != nil {
				return err
			}
			if certPEM == nil || keyPEM == nil { // not on this machine: checked on the replicas
				return nil
			}
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				return p.failErr(field+".tls.cert_file", err, "client certificate and key do not load: "+err.Error(), "check that cert_file and key_file are PEM and belong together")
			}
			pa.TLS.Certificates = []tls.Certificate{pair}
		}
	}
	for k, v := range raw.Headers {
		ck := http.CanonicalHeaderKey(strings.TrimSpace(k))
		if ck == "" || strings.ContainsAny(ck+v, "\r\n") || strings.HasPrefix(strings.ToLower(ck), "as2-") {
			return p.fail(field+".headers."+k, "not a usable extra header field", "use a plain header name (not an AS2-* field) and a one-line value")
		}
		if pa.Headers == nil {
			pa.Headers = http.Header{}
		}
		pa.Headers.Set(ck, v)
	}
	if raw.Proxy != "" {
		u, err := p.url(field+".proxy", raw.Proxy)
		if err != nil {
			return err
		}
		pa.Proxy = u
	}
	return nil
}

// time reads a point in time in RFC 3339 (2027-01-15T00:00:00Z), or a
// date alone (midnight UTC).
func (p *parser) time(field, v string) (time.Time, error) {
	v = strings.TrimSpace(v)
	if t, err := time.Parse(time.RFC3339, v); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.DateOnly, v)
	if err != nil {
		return time.Time{}, p.failErr(field, err, fmt.Sprintf("%q is not a time", v), "write an RFC 3339 time like 2027-01-15T06:00:00Z, or a date like 2027-01-15 (midnight UTC)")
	}
	return t, nil
}

// as2ID checks an AS2 name against RFC 4130: 1 to 128 printable ASCII
// characters. Spaces and quotes are legal (the name is quoted on the wire);
// leading and trailing spaces are not accepted because HTTP header handling
// on the way commonly strips them.
func (p *parser) as2ID(field, id string) error {
	const fix = "use 1 to 128 printable ASCII characters (letters, digits, spaces, punctuation)"
	switch {
	case id == "":
		return p.fail(field, "missing or empty", "set as2_id to the AS2 name agreed with the partner, like \"ACME CORP\"")
	case len(id) > MaxAS2IDLength:
		return p.fail(field, fmt.Sprintf("AS2 ID is %d bytes long; RFC 4130 allows at most %d", len(id), MaxAS2IDLength), fix)
	case strings.TrimSpace(id) != id:
		return p.fail(field, fmt.Sprintf("AS2 ID %q starts or ends with a space", id), "remove the leading and trailing spaces; they are lost in HTTP headers")
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c < 0x20 || c > 0x7e {
			return p.fail(field, fmt.Sprintf("AS2 ID %q has a character outside printable ASCII at byte %d", id, i), fix)
		}
	}
	return nil
}

// url checks an absolute http or https URL. Messages never echo the URL
// itself, which may carry a password.
func (p *parser) url(field, s string) (*url.URL, error) {
	const fix = "write an absolute http or https URL, like https://as2.partner.example/as2"
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		msg := "not a valid URL"
		var ue *url.Error
		if errors.As(err, &ue) {
			msg += ": " + ue.Err.Error()
		}
		return nil, p.failErr(field, err, msg, fix)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, p.fail(field, fmt.Sprintf("scheme %q is not http or https", u.Scheme), fix)
	case u.Host == "" || u.Hostname() == "":
		return nil, p.fail(field, "URL has no host", fix)
	}
	return u, nil
}

// checkValidity warns when c is not valid at p.now and reports whether it is.
func (p *parser) checkValidity(field string, c *x509.Certificate, which, fix string) bool {
	switch {
	case p.now.After(c.NotAfter):
		p.warn(field, "certificate%s (%s) expired on %s; %s", which, describeCert(c), c.NotAfter.UTC().Format(time.DateOnly), fix)
		return false
	case p.now.Before(c.NotBefore):
		p.warn(field, "certificate%s (%s) is not valid before %s; check the clock or wait", which, describeCert(c), c.NotBefore.UTC().Format(time.RFC3339))
		return false
	}
	return true
}

func describeCert(c *x509.Certificate) string {
	subject := c.Subject.CommonName
	if subject == "" {
		subject = c.Subject.String()
	}
	return fmt.Sprintf("subject %q, serial %s", subject, c.SerialNumber.Text(16))
}
