package config

import (
	"fmt"
	"mime"
	"net"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"

	"golang.org/x/crypto/ssh"

	"github.com/edihub/edihub/internal/connector"
)

// Settings the connectors document depends on, named in messages.
const (
	foldersSetting = "EDIHUB_FOLDERS_DIR (-folders-dir)"
)

// relativePathProblem says what makes p no plain relative path (absolute,
// empty, a ".." segment, a backslash); "" when it is one.
func relativePathProblem(p string) string {
	switch {
	case p == "":
		return "is empty"
	case strings.HasPrefix(p, "/") || path.IsAbs(p) || (len(p) > 1 && p[1] == ':'):
		return fmt.Sprintf("%q is absolute", p)
	case strings.Contains(p, `\`):
		return fmt.Sprintf("%q holds a backslash", p)
	case strings.ContainsRune(p, 0):
		return fmt.Sprintf("%q holds a NUL byte", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return fmt.Sprintf("%q leads out of its root with \"..\"", p)
		}
	}
	return ""
}

func (p *connParser) folder(field, what, name string, f *FolderSpec) error {
	if msg := relativePathProblem(f.Path); msg != "" {
		return p.entryFail(field+".path", what, name, "path "+msg,
			"write a path relative to the folders directory, "+foldersSetting+", like erp/inbox")
	}
	if p.o.FoldersDir == "" {
		if p.o.Away {
			p.warn(field+".path", "%s %q: no folders directory here to check it in; each replica finds it in its own, %s", what, name, foldersSetting)
			return nil
		}
		return p.entryFail(field, what, name, "folder connectors need a folders directory, and none is configured",
			"set "+foldersSetting+" on every replica to the directory the folders are mounted under (a PersistentVolumeClaim), or use another type")
	}
	return nil
}

// secret checks a secret reference: a name of a file in the secrets
// directory, present there (a warning when Away). The file is looked up
// through an os.Root and never read.
func (p *connParser) secret(field, what, name, ref, holds string) error {
	if !secretName(ref) {
		return p.entryFail(field, what, name, fmt.Sprintf("secret reference %q: not a name in the secrets directory", ref),
			"write the name of a file in the secrets directory ("+secretsSetting+", a mounted Kubernetes Secret whose keys are files) that holds "+holds+": letters, digits, '-', '_' and '.', no path")
	}
	if p.o.SecretsDir == "" {
		if p.o.Away {
			p.warn(field, "%s %q: secret %q: no secrets directory here to check it in; each replica reads it from its own, %s", what, name, ref, secretsSetting)
			return nil
		}
		return p.entryFail(field, what, name, fmt.Sprintf("secret reference %q: no secrets directory is configured", ref),
			"set "+secretsSetting+" on every replica to the directory the secrets are mounted in and put "+ref+" there")
	}
	if err := statInRoot(p.o.SecretsDir, ref); err != nil {
		if p.o.Away {
			p.warn(field, "%s %q: secret %q: not found in the secrets directory here; each replica reads it from its own, %s", what, name, ref, secretsSetting)
			return nil
		}
		return p.entryFail(field, what, name, fmt.Sprintf("secret reference %q: not found in the secrets directory", ref),
			"put a file named "+ref+" holding "+holds+" (a key of the mounted Secret) in the secrets directory of every replica ("+secretsSetting+"), or correct the name")
	}
	return nil
}

// statInRoot checks that name is a regular file in dir, through an
// os.Root so that neither the name nor a link leads out of dir.
func statInRoot(dir, name string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	fi, err := root.Stat(name)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return errNotRegular
	}
	return nil
}

// hostRE is a DNS name or an IPv4 address; IPv6 is checked apart.
var hostRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`)

func (p *connParser) sftp(field, what, name string, s *SFTPSpec) error {
	switch {
	case s.Host == "":
		return p.entryFail(field+".host", what, name, "host: required", "set host: to the SFTP server's name or address, like sftp.example.com")
	case !hostRE.MatchString(s.Host) && net.ParseIP(s.Host) == nil:
		return p.entryFail(field+".host", what, name, fmt.Sprintf("host %q is not a host name or IP address", s.Host), "write the server's name alone (no scheme, user or port), like sftp.example.com; the port goes in port:")
	case s.Port == 0:
		s.Port = 22
	case s.Port < 0 || s.Port > 65535:
		return p.entryFail(field+".port", what, name, fmt.Sprintf("port %d is not a TCP port", s.Port), "set port: between 1 and 65535 (22 when left out)")
	}
	if s.User == "" {
		return p.entryFail(field+".user", what, name, "user: required", "set user: to the account edihub logs in as")
	}
	if s.HostKey == "" {
		return p.entryFail(field+".host_key", what, name, "host_key: required: the server's public host key",
			`add it as an authorized_keys line, e.g. from "ssh-keyscan -t ed25519 HOST" without the host name: host_key: "ssh-ed25519 AAAA..."`)
	}
	if _, _, _, _, err := ssh.ParseAuthorizedKey([]byte(s.HostKey)); err != nil {
		return p.entryFail(field+".host_key", what, name, "host_key is not a public key line: "+err.Error(),
			`write the key as "TYPE BASE64", e.g. the output of "ssh-keyscan -t ed25519 HOST" without the host name`)
	}
	switch {
	case s.PasswordSecret == "" && s.KeySecret == "":
		return p.entryFail(field, what, name, "neither password_secret nor key_secret", "set one: key_secret: the name of the private key's file in the secrets directory (preferred), or password_secret")
	case s.PasswordSecret != "" && s.KeySecret != "":
		return p.entryFail(field+".password_secret", what, name, "both password_secret and key_secret", "keep one of them")
	case s.KeySecret != "":
		if err := p.secret(field+".key_secret", what, name, s.KeySecret, "the SSH private key (OpenSSH or PEM format)"); err != nil {
			return err
		}
	default:
		if err := p.secret(field+".password_secret", what, name, s.PasswordSecret, "the SFTP password"); err != nil {
			return err
		}
	}
	if s.Path != "" {
		if msg := relativePathProblem(strings.TrimPrefix(s.Path, "/")); msg != "" && s.Path != "/" {
			return p.entryFail(field+".path", what, name, "path "+msg, "write the server's directory, like /inbound or inbound (relative to the login directory)")
		}
	}
	return nil
}

var (
	bucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
	regionRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
)

func (p *connParser) s3(field, what, name string, s *S3Spec) error {
	const bucketFix = "name the bucket as S3 requires: 3 to 63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit"
	switch {
	case s.Bucket == "":
		return p.entryFail(field+".bucket", what, name, "bucket: required", "set bucket: to the bucket's name")
	case !bucketRE.MatchString(s.Bucket) || strings.Contains(s.Bucket, "..") || net.ParseIP(s.Bucket) != nil:
		return p.entryFail(field+".bucket", what, name, fmt.Sprintf("bucket %q is not a valid bucket name", s.Bucket), bucketFix)
	}
	if s.Endpoint != "" {
		if err := p.serviceURL(field+".endpoint", what, name, s.Endpoint, "https://s3.example.com"); err != nil {
			return err
		}
	}
	if s.Region != "" && !regionRE.MatchString(s.Region) {
		return p.entryFail(field+".region", what, name, fmt.Sprintf("region %q is not a region name", s.Region), "write it like us-east-1, or leave it out")
	}
	if s.Prefix != "" {
		if msg := relativePathProblem(strings.TrimSuffix(s.Prefix, "/")); msg != "" {
			return p.entryFail(field+".prefix", what, name, "prefix "+msg, `write a key prefix like inbound/ (no leading "/")`)
		}
	}
	switch {
	case (s.AccessKeySecret == "") != (s.SecretKeySecret == ""):
		return p.entryFail(field+".access_key_secret", what, name, "one of access_key_secret and secret_key_secret",
			"set both (the names of the files holding the access key ID and the secret access key), or neither to use the SDK's default credentials (workload identity)")
	case s.AccessKeySecret != "":
		if err := p.secret(field+".access_key_secret", what, name, s.AccessKeySecret, "the access key ID"); err != nil {
			return err
		}
		if err := p.secret(field+".secret_key_secret", what, name, s.SecretKeySecret, "the secret access key"); err != nil {
			return err
		}
	}
	return nil
}

func (p *connParser) http(field, what, name string, h *HTTPSpec) error {
	if h.URL == "" {
		return p.entryFail(field+".url", what, name, "url: required", "set url: to the endpoint that takes the documents, like https://app.example.com/edi")
	}
	if err := p.serviceURL(field+".url", what, name, h.URL, "https://app.example.com/edi"); err != nil {
		return err
	}
	if h.Secret == "" {
		return p.entryFail(field+".secret", what, name, "secret: required: the deliveries are signed as the webhook's are",
			"set secret: to the name of a file in the secrets directory holding a long random signing secret")
	}
	return p.secret(field+".secret", what, name, h.Secret, "the signing secret")
}

// serviceURL checks an absolute http(s) URL without credentials in it
// (they belong in secrets) or a fragment.
func (p *connParser) serviceURL(field, what, name, raw, example string) error {
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
		return p.entryFail(field, what, name, fmt.Sprintf("%q is not an absolute http(s) URL", raw), "write it like "+example)
	case u.User != nil:
		return p.entryFail(field, what, name, "the URL holds a user or password", "remove them from the URL: credentials are named by secret references, never written in the document")
	case u.Fragment != "":
		return p.entryFail(field, what, name, "the URL has a fragment (#...)", "remove the fragment")
	}
	return nil
}

// fileName checks a file-name template with the connector runtime's
// parser (connector.ParseTemplate), so that an unknown placeholder or a
// name that could leave the destination is refused when the document is
// applied, not when a document is delivered.
func (p *connParser) fileName(field, what, name, tmpl string) error {
	if _, err := connector.ParseTemplate(tmpl); err != nil {
		msg := strings.TrimPrefix(strings.TrimPrefix(err.Error(), connector.ErrTemplate.Error()), ": ")
		return p.entryFail(field, what, name, fmt.Sprintf("file_name %q: %s", tmpl, msg),
			"write a relative name of placeholders and text, like "+DefaultFileName+" (docs/connectors.md#file-name-templates)")
	}
	return nil
}

// route checks one route against the connectors of c.
func (p *connParser) route(field string, r *Route, c *Connectors) error {
	const what = "route"
	m := &r.Criteria
	switch m.Direction {
	case "":
		m.Direction = DirectionInbound
		if m.Source != "" {
			m.Direction = DirectionOutbound
		}
	case DirectionInbound, DirectionOutbound:
	default:
		return p.entryFail(field+".match.direction", what, r.Name, fmt.Sprintf("direction %q is not inbound or outbound", m.Direction),
			"set direction: inbound (received documents to destinations) or outbound (picked-up files to a partner)")
	}
	if m.Direction == DirectionOutbound {
		return p.outboundRoute(field, r, c)
	}
	switch {
	case m.Source != "" || m.Path != "":
		return p.entryFail(field+".match.source", what, r.Name, "an inbound route matches no source or path", "remove source and path, or make it an outbound route (direction: outbound)")
	case r.Partner != "":
		return p.entryFail(field+".partner", what, r.Name, "partner: is the partner of an outbound route's files", "match received documents with match.partners instead")
	case len(r.To) == 0:
		return p.entryFail(field+".to", what, r.Name, "to: names no destination", "list the destinations the documents go to, like to: [erp-inbox]")
	}
	seen := map[string]bool{}
	for i, to := range r.To {
		f := fmt.Sprintf("%s.to[%d]", field, i)
		if seen[to] {
			return p.entryFail(f, what, r.Name, fmt.Sprintf("destination %q is listed twice", to), "list each destination once")
		}
		seen[to] = true
		if !hasDestination(c, to) {
			return p.entryFail(f, what, r.Name, fmt.Sprintf("no destination is named %q", to), "name one of the destinations: list, or add it there")
		}
	}
	if err := p.matchList(field+".match.types", what, r.Name, m.Types, func(string) string { return "" }); err != nil {
		return err
	}
	if err := p.matchList(field+".match.partners", what, r.Name, m.Partners, func(string) string { return "" }); err != nil {
		return err
	}
	if err := p.matchList(field+".match.stations", what, r.Name, m.Stations, func(string) string { return "" }); err != nil {
		return err
	}
	return p.matchList(field+".match.content_types", what, r.Name, m.ContentTypes, func(v string) string {
		if _, _, err := mime.ParseMediaType(v); err != nil {
			return fmt.Sprintf("%q is not a media type like application/edi-x12", v)
		}
		return ""
	})
}

// matchList checks the values of one match list: none empty, each
// passing bad ("" when fine).
func (p *connParser) matchList(field, what, name string, list []string, bad func(string) string) error {
	for i, v := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		if strings.TrimSpace(v) == "" {
			return p.entryFail(f, what, name, "an empty value", "remove it; an empty list matches everything")
		}
		if msg := bad(v); msg != "" {
			return p.entryFail(f, what, name, msg, "correct it or remove it")
		}
	}
	return nil
}

func (p *connParser) outboundRoute(field string, r *Route, c *Connectors) error {
	const what = "route"
	m := &r.Criteria
	switch {
	case m.Source == "":
		return p.entryFail(field+".match.source", what, r.Name, "an outbound route names no source", "set match.source: to the source whose files it sends")
	case !hasSource(c, m.Source):
		return p.entryFail(field+".match.source", what, r.Name, fmt.Sprintf("no source is named %q", m.Source), "name one of the sources: list, or add it there")
	case len(r.To) > 0:
		return p.entryFail(field+".to", what, r.Name, "an outbound route's files go to a partner, not to destinations", "remove to:, and set partner: (or leave it out to take the interchange's receiver ID)")
	case len(m.Partners)+len(m.Stations)+len(m.Types)+len(m.ContentTypes) > 0:
		return p.entryFail(field+".match", what, r.Name, "an outbound route matches a source and a path only", "remove partners, stations, types and content_types from match; set partner: for where the files go")
	}
	if m.Path != "" {
		if _, err := path.Match(m.Path, ""); err != nil {
			return p.entryFail(field+".match.path", what, r.Name, fmt.Sprintf("path %q is not a valid pattern", m.Path), `write a pattern like "acme/*" or "*.edi" (* matches within one directory, ? one character, [a-z] a class)`)
		}
	}
	return nil
}

func hasDestination(c *Connectors, name string) bool {
	_, ok := c.Destination(name)
	return ok
}

func hasSource(c *Connectors, name string) bool {
	_, ok := c.Source(name)
	return ok
}
