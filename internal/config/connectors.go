package config

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// The connectors document: where received documents are delivered
// (destinations), where documents to send are picked up (sources), and
// which go where (routes). It is stored in PostgreSQL, versioned and
// applied live (internal/connectors); ParseConnectors validates it.

// Connector kinds.
const (
	KindFolder = "folder"
	KindSFTP   = "sftp"
	KindS3     = "s3"
	KindHTTP   = "http"
)

// Route directions.
const (
	DirectionInbound  = "inbound"
	DirectionOutbound = "outbound"
)

// Source settings.
const (
	StablePolls     = "polls"
	StableMarker    = "marker"
	StableETag      = "etag"
	AfterArchive    = "archive"
	AfterDelete     = "delete"
	DefaultArchive  = "archive/"
	DefaultPoll     = 10 * time.Second
	DefaultFileName = "{partner}/{yyyy}/{mm}/{dd}/{icn}-{message_id}.{ext}"
	// MaxConnectorsBytes bounds a connectors document: a hub with
	// hundreds of connectors and routes stays far below it.
	MaxConnectorsBytes = 1 << 20
)

// minPoll is the shortest poll interval of a source: listing an SFTP
// directory or an S3 prefix more often only loads the far side.
const minPoll = time.Second

// Connectors is a validated connectors document. Its entries keep the
// document's order (routes: first match wins). It is never changed once
// parsed: a replica replaces it whole.
type Connectors struct {
	Destinations []Destination  `yaml:"destinations,omitempty" json:"destinations"`
	Sources      []PickupSource `yaml:"sources,omitempty" json:"sources"`
	Routes       []Route        `yaml:"routes,omitempty" json:"routes"`
	// Warnings are the problems that do not refuse the document (a
	// secret this machine cannot check, say).
	Warnings []string `yaml:"-" json:"-"`
}

// Destination is where received documents are written.
type Destination struct {
	Name   string      `yaml:"name" json:"name"`
	Type   string      `yaml:"type" json:"type"`
	Folder *FolderSpec `yaml:"folder,omitempty" json:"folder,omitempty"`
	SFTP   *SFTPSpec   `yaml:"sftp,omitempty" json:"sftp,omitempty"`
	S3     *S3Spec     `yaml:"s3,omitempty" json:"s3,omitempty"`
	HTTP   *HTTPSpec   `yaml:"http,omitempty" json:"http,omitempty"`
	// FileName is the file-name template (DefaultFileName when the
	// document leaves it out). It is kept as written: the connector
	// runtime parses it (see Destination's doc in docs/connectors.md).
	FileName string `yaml:"file_name,omitempty" json:"file_name,omitempty"`
	// Sidecar also writes NAME.json (partner, Message-ID, MIC, envelope).
	Sidecar bool `yaml:"sidecar,omitempty" json:"sidecar,omitempty"`
	// DoneMarker also writes NAME.done after the document and sidecar.
	DoneMarker bool `yaml:"done_marker,omitempty" json:"done_marker,omitempty"`
}

// PickupSource is where documents to send are picked up.
type PickupSource struct {
	Name   string      `yaml:"name" json:"name"`
	Type   string      `yaml:"type" json:"type"`
	Folder *FolderSpec `yaml:"folder,omitempty" json:"folder,omitempty"`
	SFTP   *SFTPSpec   `yaml:"sftp,omitempty" json:"sftp,omitempty"`
	S3     *S3Spec     `yaml:"s3,omitempty" json:"s3,omitempty"`
	// Stable says when a file is complete: StablePolls (default),
	// StableMarker or StableETag (s3 only).
	Stable string `yaml:"stable,omitempty" json:"stable"`
	// After is what happens to a taken file: AfterArchive (default) or
	// AfterDelete.
	After string `yaml:"after,omitempty" json:"after"`
	// Archive is the archive path relative to the source's root
	// (DefaultArchive); empty with AfterDelete.
	Archive string `yaml:"archive,omitempty" json:"archive,omitempty"`
	// Poll is how often the source is listed (DefaultPoll).
	Poll Duration `yaml:"poll,omitempty" json:"poll"`
}

// FolderSpec is a folder connector: Path is relative to the replicas'
// folders directory (EDIHUB_FOLDERS_DIR), never absolute, never "..".
type FolderSpec struct {
	Path string `yaml:"path" json:"path"`
}

// SFTPSpec is an SFTP connector. Exactly one of PasswordSecret and
// KeySecret names the credential, a file in the secrets directory.
type SFTPSpec struct {
	Host           string `yaml:"host" json:"host"`
	Port           int    `yaml:"port,omitempty" json:"port"`
	User           string `yaml:"user" json:"user"`
	PasswordSecret string `yaml:"password_secret,omitempty" json:"password_secret,omitempty"`
	KeySecret      string `yaml:"key_secret,omitempty" json:"key_secret,omitempty"`
	// HostKey is the server's public host key, an authorized_keys line:
	// any other key is refused.
	HostKey string `yaml:"host_key" json:"host_key"`
	Path    string `yaml:"path,omitempty" json:"path,omitempty"`
}

// S3Spec is an S3 connector. Without key secrets the SDK's default
// chain finds the credentials (a pod's workload identity).
type S3Spec struct {
	Endpoint        string `yaml:"endpoint,omitempty" json:"endpoint,omitempty"`
	Bucket          string `yaml:"bucket" json:"bucket"`
	Prefix          string `yaml:"prefix,omitempty" json:"prefix,omitempty"`
	Region          string `yaml:"region,omitempty" json:"region,omitempty"`
	AccessKeySecret string `yaml:"access_key_secret,omitempty" json:"access_key_secret,omitempty"`
	SecretKeySecret string `yaml:"secret_key_secret,omitempty" json:"secret_key_secret,omitempty"`
	PathStyle       bool   `yaml:"path_style,omitempty" json:"path_style,omitempty"`
}

// HTTPSpec is an HTTP destination: a POST of the document to URL,
// signed with the secret named Secret as the webhook's deliveries are.
type HTTPSpec struct {
	URL    string `yaml:"url" json:"url"`
	Secret string `yaml:"secret" json:"secret"`
}

// Route sends documents somewhere. An inbound route (Criteria.Direction
// inbound) names destinations in To; an outbound route names a source
// in Criteria.Source and the partner its files go to.
type Route struct {
	Name     string     `yaml:"name" json:"name"`
	Criteria RouteMatch `yaml:"match" json:"match"`
	To       []string   `yaml:"to,omitempty" json:"to,omitempty"`
	// Partner is the partner picked-up files go to; empty: the
	// interchange's receiver ID matched to a partner.
	Partner string `yaml:"partner,omitempty" json:"partner,omitempty"`
	// Ordered sends the route's documents one at a time, in order.
	Ordered bool `yaml:"ordered,omitempty" json:"ordered,omitempty"`
}

// RouteMatch selects the documents of a route. An empty list matches
// everything.
type RouteMatch struct {
	// Direction is inbound or outbound; when left out it follows from
	// the route (Source set: outbound).
	Direction    string   `yaml:"direction,omitempty" json:"direction"`
	Partners     []string `yaml:"partners,omitempty" json:"partners,omitempty"`
	Stations     []string `yaml:"stations,omitempty" json:"stations,omitempty"`
	Types        []string `yaml:"types,omitempty" json:"types,omitempty"`
	ContentTypes []string `yaml:"content_types,omitempty" json:"content_types,omitempty"`
	// Source and Path select picked-up files (outbound): Path is a
	// path.Match pattern on the file's path relative to the source's
	// root; empty matches every file.
	Source string `yaml:"source,omitempty" json:"source,omitempty"`
	Path   string `yaml:"path,omitempty" json:"path,omitempty"`
}

// Duration is a time.Duration written as "10s" in YAML and JSON.
type Duration time.Duration

// MarshalText writes d like "10s".
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText reads a Go duration like "10s" or "1m30s".
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("not a duration like 10s or 1m: %q", b)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalYAML reads a duration; a value that is none is a type error
// at its line, so that the parser names the field.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode || d.UnmarshalText([]byte(n.Value)) != nil {
		return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d: cannot unmarshal %s `%s` into config.Duration", n.Line, n.ShortTag(), n.Value)}}
	}
	return nil
}

// ConnectorsOptions tune ParseConnectors.
type ConnectorsOptions struct {
	// Name names the document in errors ("connectors.yaml", "request").
	Name string
	// SecretsDir is the directory secrets are named in
	// (EDIHUB_SECRETS_DIR); each secret named is looked up there.
	SecretsDir string
	// FoldersDir is the directory folder paths are relative to
	// (EDIHUB_FOLDERS_DIR); empty refuses folder connectors.
	FoldersDir string
	// Away checks the document away from the replicas (the command
	// line): a secret or folders directory this machine does not have,
	// or a secret missing in it, is a warning instead of an error.
	Away bool
}

// connectorsDocKeys list the keys each mapping accepts, for unknown-key
// errors.
var connectorsDocKeys = map[string][]string{
	"":            {"destinations", "sources", "routes"},
	"destination": {"name", "type", "folder", "sftp", "s3", "http", "file_name", "sidecar", "done_marker"},
	"source":      {"name", "type", "folder", "sftp", "s3", "stable", "after", "archive", "poll"},
	"route":       {"name", "match", "to", "partner", "ordered"},
	"match":       {"direction", "partners", "stations", "types", "content_types", "source", "path"},
	"folder":      {"path"},
	"sftp":        {"host", "port", "user", "password_secret", "key_secret", "host_key", "path"},
	"s3":          {"endpoint", "bucket", "prefix", "region", "access_key_secret", "secret_key_secret", "path_style"},
	"http":        {"url", "secret"},
}

// connectorsKeys is the knownKeys of the connectors document.
func connectorsKeys(parent string) []string {
	last := parent
	if i := strings.LastIndex(parent, "."); i >= 0 {
		last = parent[i+1:]
	}
	switch {
	case parent == "":
		return connectorsDocKeys[""]
	case strings.HasPrefix(parent, "destinations[") && !strings.Contains(parent, "."):
		return connectorsDocKeys["destination"]
	case strings.HasPrefix(parent, "sources[") && !strings.Contains(parent, "."):
		return connectorsDocKeys["source"]
	case strings.HasPrefix(parent, "routes[") && !strings.Contains(parent, "."):
		return connectorsDocKeys["route"]
	}
	return connectorsDocKeys[last]
}

var connectorNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// maxConnectorName bounds a connector or route name: a DNS label's
// length, so that it fits a metric label and a file name.
const maxConnectorName = 63

// ParseConnectors validates data as a connectors document and returns it
// with its defaults filled in. Unknown keys are errors. The first problem
// is an *Error naming the entry, its field (a YAML path such as
// "destinations[1].sftp.host_key"), the line and the fix; nothing of a
// document with an error is returned. Secrets are names of files in
// o.SecretsDir, looked up there (through an os.Root: a name never leads
// out of it); their content is not kept. A document over
// MaxConnectorsBytes is refused before it is read.
func ParseConnectors(data []byte, o ConnectorsOptions) (*Connectors, error) {
	if o.Name == "" {
		o.Name = "connectors"
	}
	p := &parser{name: o.Name, knownKeys: connectorsKeys, secretsDir: o.SecretsDir}
	if len(data) > MaxConnectorsBytes {
		return nil, p.fail("", fmt.Sprintf("the document is larger than %d KiB", MaxConnectorsBytes>>10), "remove unused connectors and routes")
	}
	var c Connectors
	if strings.TrimSpace(string(data)) != "" {
		if err := p.decodeStrict(data, &c, ""); err != nil {
			return nil, err
		}
	}
	cp := connParser{parser: p, o: o, names: map[string]string{}}
	if err := cp.check(&c); err != nil {
		return nil, err
	}
	c.Warnings = p.warnings
	return &c, nil
}

// connParser validates a decoded connectors document.
type connParser struct {
	*parser
	o ConnectorsOptions
	// names maps each connector name to the field of its entry:
	// destinations and sources share one namespace.
	names map[string]string
}

func (p *connParser) check(c *Connectors) error {
	for i := range c.Destinations {
		if err := p.destination(fmt.Sprintf("destinations[%d]", i), &c.Destinations[i]); err != nil {
			return err
		}
	}
	for i := range c.Sources {
		if err := p.source(fmt.Sprintf("sources[%d]", i), &c.Sources[i]); err != nil {
			return err
		}
	}
	routes := map[string]string{}
	for i := range c.Routes {
		field := fmt.Sprintf("routes[%d]", i)
		r := &c.Routes[i]
		if err := p.name(field, r.Name, "route"); err != nil {
			return err
		}
		if other, dup := routes[r.Name]; dup {
			return p.fail(field+".name", fmt.Sprintf("route %q: the name of %s too", r.Name, other), "give every route its own name")
		}
		routes[r.Name] = field
		if err := p.route(field, r, c); err != nil {
			return err
		}
	}
	return nil
}

// entryFail is fail for a field of a named entry: the message starts
// with the entry's kind and name.
func (p *connParser) entryFail(field, what, name, msg, fix string) *Error {
	return p.fail(field, fmt.Sprintf("%s %q: %s", what, name, msg), fix)
}

// name checks an entry's name.
func (p *connParser) name(field, name, what string) error {
	switch {
	case name == "":
		return p.fail(field+".name", what+" without a name", "add name: a short name of lower-case letters, digits and '-', such as erp-inbox")
	case len(name) > maxConnectorName || !connectorNameRE.MatchString(name):
		return p.fail(field+".name", fmt.Sprintf("%s name %q: not lower-case letters, digits and '-' (starting with a letter or digit, at most %d)", what, name, maxConnectorName),
			"rename it like erp-inbox")
	}
	return nil
}

// connector checks the name and type of a destination or source and
// that exactly the block of its type is present.
func (p *connParser) connector(field, what, name, typ string, blocks map[string]bool) error {
	if err := p.name(field, name, what); err != nil {
		return err
	}
	if other, dup := p.names[name]; dup {
		return p.fail(field+".name", fmt.Sprintf("%s %q: the name of %s too", what, name, other), "give every destination and source its own name")
	}
	p.names[name] = field
	kinds := make([]string, 0, len(blocks))
	for k := range blocks {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	if _, ok := blocks[typ]; !ok {
		msg := "type missing"
		if typ != "" {
			msg = fmt.Sprintf("type %q is not one of %s", typ, strings.Join(kinds, ", "))
		}
		return p.entryFail(field+".type", what, name, msg, "set type: to one of "+strings.Join(kinds, ", "))
	}
	if !blocks[typ] {
		return p.entryFail(field+"."+typ, what, name, "the "+typ+" block is missing", fmt.Sprintf("add %s: {...} with the settings of the %s", typ, typ))
	}
	for _, k := range kinds {
		if k != typ && blocks[k] {
			return p.entryFail(field+"."+k, what, name, fmt.Sprintf("a %s block in a %s %s", k, typ, what), "remove it, or set type: "+k)
		}
	}
	return nil
}

func (p *connParser) destination(field string, d *Destination) error {
	const what = "destination"
	if err := p.connector(field, what, d.Name, d.Type, map[string]bool{
		KindFolder: d.Folder != nil, KindSFTP: d.SFTP != nil, KindS3: d.S3 != nil, KindHTTP: d.HTTP != nil,
	}); err != nil {
		return err
	}
	var err error
	switch d.Type {
	case KindFolder:
		err = p.folder(field+".folder", what, d.Name, d.Folder)
	case KindSFTP:
		err = p.sftp(field+".sftp", what, d.Name, d.SFTP)
	case KindS3:
		err = p.s3(field+".s3", what, d.Name, d.S3)
	case KindHTTP:
		err = p.http(field+".http", what, d.Name, d.HTTP)
	}
	if err != nil {
		return err
	}
	if d.FileName == "" {
		d.FileName = DefaultFileName
	}
	if d.Type == KindHTTP && (d.Sidecar || d.DoneMarker) {
		return p.entryFail(field+".sidecar", what, d.Name, "an http destination takes no sidecar or done marker (the POST carries the metadata in headers)", "remove sidecar and done_marker")
	}
	return p.fileName(field+".file_name", what, d.Name, d.FileName)
}

func (p *connParser) source(field string, s *PickupSource) error {
	const what = "source"
	if err := p.connector(field, what, s.Name, s.Type, map[string]bool{
		KindFolder: s.Folder != nil, KindSFTP: s.SFTP != nil, KindS3: s.S3 != nil,
	}); err != nil {
		return err
	}
	var err error
	switch s.Type {
	case KindFolder:
		err = p.folder(field+".folder", what, s.Name, s.Folder)
	case KindSFTP:
		err = p.sftp(field+".sftp", what, s.Name, s.SFTP)
	case KindS3:
		err = p.s3(field+".s3", what, s.Name, s.S3)
	}
	if err != nil {
		return err
	}
	return p.pickup(field, s)
}

// pickup checks and defaults how a source takes files.
func (p *connParser) pickup(field string, s *PickupSource) error {
	const what = "source"
	switch s.Stable {
	case "":
		s.Stable = StablePolls
	case StablePolls, StableMarker:
	case StableETag:
		if s.Type != KindS3 {
			return p.entryFail(field+".stable", what, s.Name, "stable: etag needs an s3 source", "use polls (size and time unchanged across two polls) or marker (NAME.done present)")
		}
	default:
		return p.entryFail(field+".stable", what, s.Name, fmt.Sprintf("stable %q is not polls, marker or etag", s.Stable), "set stable: polls (the default), marker or etag (s3)")
	}
	switch s.After {
	case "":
		s.After = AfterArchive
	case AfterArchive, AfterDelete:
	default:
		return p.entryFail(field+".after", what, s.Name, fmt.Sprintf("after %q is not archive or delete", s.After), "set after: archive (the default: moved to the archive path) or delete")
	}
	switch {
	case s.After == AfterDelete && s.Archive != "":
		return p.entryFail(field+".archive", what, s.Name, "an archive path with after: delete", "remove archive, or set after: archive")
	case s.After == AfterArchive && s.Archive == "":
		s.Archive = DefaultArchive
	}
	if s.Archive != "" {
		if msg := relativePathProblem(strings.TrimSuffix(s.Archive, "/")); msg != "" {
			return p.entryFail(field+".archive", what, s.Name, "archive path "+msg, `write a path relative to the source's root, like "archive/"`)
		}
	}
	switch {
	case s.Poll == 0:
		s.Poll = Duration(DefaultPoll)
	case time.Duration(s.Poll) < minPoll:
		return p.entryFail(field+".poll", what, s.Name, fmt.Sprintf("poll %s is shorter than %s", time.Duration(s.Poll), minPoll), "poll every second or less often, like 10s")
	}
	return nil
}
