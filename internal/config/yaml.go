package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Keys each mapping accepts, in the order the documentation lists them. The
// decoder enforces them through the yaml struct tags with KnownFields; these
// lists only make the error's fix useful.
var (
	topKeys     = []string{"station", "stations", "partners"}
	stationKeys = []string{"as2_id", "private_key", "certificate", "keys", "async_mdn_url"}
	keyKeys     = []string{"private_key", "certificate", "active", "not_before_use"}
	certKeys    = []string{"certificate", "not_before_use", "switch_on_first_use"}
	partnerKeys = []string{
		"as2_id", "station", "url", "certificate", "certificates", "sign", "encrypt", "compress", "mdn", "mdn_signed",
		"mdn_micalg", "require_signed", "require_encrypted", "key_encryption",
		"transfer_encoding", "chunked", "compress_order", "async_mdn_url", "timeout", "max_attempts",
		"resend_overdue",
		"retry_window",
		"mic_include_headers", "mdn_hosts", "allow_private_mdn_targets", "auth",
		"tls", "headers", "proxy", "replay_window", "refuse_replays", "as2_restart",
		"profile", "micalg_names",
		"edi_acks", "edi_x12_ack", "edi_ack_due", "edi_duplicates", "edi_duplicate_window",
	}
)

// rawFile mirrors the YAML document. Fields whose default differs from the
// zero value, or whose zero value must be told apart from "absent", are
// pointers.
type rawFile struct {
	Station  *rawStation  `yaml:"station"`
	Stations []rawStation `yaml:"stations"`
	Partners []rawPartner `yaml:"partners"`
}

type rawStation struct {
	AS2ID       string          `yaml:"as2_id"`
	PrivateKey  string          `yaml:"private_key"`
	Certificate string          `yaml:"certificate"`
	Keys        []rawStationKey `yaml:"keys"`
	AsyncMDNURL string          `yaml:"async_mdn_url"`
}

type rawStationKey struct {
	PrivateKey   string `yaml:"private_key"`
	Certificate  string `yaml:"certificate"`
	Active       bool   `yaml:"active"`
	NotBeforeUse string `yaml:"not_before_use"`
}

// rawCertificate is one entry of a partner's certificates list.
type rawCertificate struct {
	Certificate      string `yaml:"certificate,omitempty"`
	NotBeforeUse     string `yaml:"not_before_use,omitempty"`
	SwitchOnFirstUse bool   `yaml:"switch_on_first_use,omitempty"`
}

type rawPartner struct {
	AS2ID                  string            `yaml:"as2_id,omitempty"`
	Station                string            `yaml:"station,omitempty"`
	URL                    string            `yaml:"url,omitempty"`
	Certificate            string            `yaml:"certificate,omitempty"`
	Certificates           []rawCertificate  `yaml:"certificates,omitempty"`
	Sign                   string            `yaml:"sign,omitempty"`
	Encrypt                string            `yaml:"encrypt,omitempty"`
	Compress               bool              `yaml:"compress,omitempty"`
	MDN                    string            `yaml:"mdn,omitempty"`
	MDNSigned              bool              `yaml:"mdn_signed,omitempty"`
	MDNMICAlg              string            `yaml:"mdn_micalg,omitempty"`
	RequireSigned          *bool             `yaml:"require_signed,omitempty"`
	RequireEncrypted       *bool             `yaml:"require_encrypted,omitempty"`
	KeyEncryption          string            `yaml:"key_encryption,omitempty"`
	TransferEncoding       string            `yaml:"transfer_encoding,omitempty"`
	Chunked                bool              `yaml:"chunked,omitempty"`
	CompressOrder          string            `yaml:"compress_order,omitempty"`
	AsyncMDNURL            string            `yaml:"async_mdn_url,omitempty"`
	Timeout                string            `yaml:"timeout,omitempty"`
	MaxAttempts            *int              `yaml:"max_attempts,omitempty"`
	ResendOverdue          *int              `yaml:"resend_overdue,omitempty"`
	RetryWindow            string            `yaml:"retry_window,omitempty"`
	MICIncludeHeaders      bool              `yaml:"mic_include_headers,omitempty"`
	MDNHosts               []string          `yaml:"mdn_hosts,omitempty"`
	AllowPrivateMDNTargets bool              `yaml:"allow_private_mdn_targets,omitempty"`
	Auth                   *rawAuth          `yaml:"auth,omitempty"`
	TLS                    *rawTLS           `yaml:"tls,omitempty"`
	Headers                map[string]string `yaml:"headers,omitempty"`
	Proxy                  string            `yaml:"proxy,omitempty"`
	ReplayWindow           string            `yaml:"replay_window,omitempty"`
	RefuseReplays          bool              `yaml:"refuse_replays,omitempty"`
	AS2Restart             *bool             `yaml:"as2_restart,omitempty"`
	Profile                string            `yaml:"profile,omitempty"`
	MICAlgNames            string            `yaml:"micalg_names,omitempty"`
	EDIAcks                bool              `yaml:"edi_acks,omitempty"`
	EDIX12Ack              string            `yaml:"edi_x12_ack,omitempty"`
	EDIAckDue              string            `yaml:"edi_ack_due,omitempty"`
	EDIDuplicates          string            `yaml:"edi_duplicates,omitempty"`
	EDIDuplicateWindow     string            `yaml:"edi_duplicate_window,omitempty"`
}

type rawTLS struct {
	CAFile   string `yaml:"ca_file,omitempty"`
	CertFile string `yaml:"cert_file,omitempty"`
	KeyFile  string `yaml:"key_file,omitempty"`
}

type rawAuth struct {
	User         string `yaml:"user,omitempty"`
	PasswordFile string `yaml:"password_file,omitempty"`
}

// nodeIndex maps YAML paths to line numbers, so that errors found after
// decoding (a missing certificate, an unsupported cipher) can still name the
// line, and translates the decoder's line-only messages back to paths.
type nodeIndex struct {
	lines  map[string]int // path → line of its key (or sequence item)
	keys   []keyPos       // every mapping key, for unknown-key errors
	values []valuePos     // every value node, for type errors
}

type keyPos struct {
	line       int
	name, path string
	parent     string
}

type valuePos struct {
	line int
	kind yaml.Kind
	path string
}

func newNodeIndex(doc *yaml.Node) *nodeIndex {
	ix := &nodeIndex{lines: map[string]int{}}
	if doc != nil && doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
		ix.walk(doc.Content[0], "")
	}
	return ix
}

func (ix *nodeIndex) walk(n *yaml.Node, path string) {
	if path != "" {
		ix.values = append(ix.values, valuePos{line: n.Line, kind: n.Kind, path: path})
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := k.Value
			if path != "" {
				p = path + "." + k.Value
			}
			if _, seen := ix.lines[p]; !seen {
				ix.lines[p] = k.Line
			}
			ix.keys = append(ix.keys, keyPos{line: k.Line, name: k.Value, path: p, parent: path})
			ix.walk(v, p)
		}
	case yaml.SequenceNode:
		for i, item := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			ix.lines[p] = item.Line
			ix.walk(item, p)
		}
	}
	// Aliases are not followed: the decoder reports their problems at the
	// anchor's line, and following them could loop.
}

// line returns the line of path, or of its nearest ancestor that appears in
// the file, or 0.
func (ix *nodeIndex) line(path string) int {
	for path != "" {
		if l, ok := ix.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			return 0
		}
		path = path[:i]
	}
	return 0
}

var (
	lineRE       = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)
	unknownRE    = regexp.MustCompile(`^line (\d+): field (.*) not found in type `)
	unmarshalRE  = regexp.MustCompile(`^line (\d+): cannot unmarshal (\S+)(?: ` + "`" + `(.*)` + "`" + `)? into (.+)$`)
	duplicateRE  = regexp.MustCompile(`^line (\d+): mapping key (".*") already defined at line (\d+)$`)
	errMultiDocs = errors.New("more than one YAML document")
)

// decode parses data into the raw model. It enforces known keys and reports
// the first problem as an *Error naming the line and, where it can, the field.
func (p *parser) decode(data []byte) (*rawFile, error) {
	var raw rawFile
	if err := p.decodeStrict(data, &raw, "add a station section and a partners list; see the config documentation"); err != nil {
		return nil, err
	}
	return &raw, nil
}

// decodeStrict parses data, one YAML document, into v with known keys
// enforced (v's yaml tags), indexing its lines for later errors; the
// first problem is an *Error naming the line and, where it can, the
// field. emptyFix says what to write in an empty document.
func (p *parser) decodeStrict(data []byte, v any, emptyFix string) error {
	var doc yaml.Node
	if err := safeDecode(yaml.NewDecoder(bytes.NewReader(data)), &doc, false); err != nil {
		if errors.Is(err, io.EOF) {
			return p.fail("", "the file is empty", emptyFix)
		}
		return p.syntaxError(err)
	}
	p.ix = newNodeIndex(&doc)

	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	err := safeDecode(dec, v, true)
	var te *yaml.TypeError
	switch {
	case errors.As(err, &te) && len(te.Errors) > 0:
		return p.typeError(te.Errors[0], err)
	case errors.Is(err, errMultiDocs):
		return p.fail("", "the file holds more than one YAML document", "keep one document: remove the extra \"---\" separator and what follows it")
	case err != nil:
		return p.syntaxError(err)
	}
	return nil
}

// safeDecode decodes one document into v. With single it also insists that
// no second document follows. A panic inside the YAML library becomes an
// error: a configuration file must never crash the process.
func safeDecode(dec *yaml.Decoder, v any, single bool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("yaml: %v", r)
		}
	}()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if single {
		var extra yaml.Node
		switch err := dec.Decode(&extra); {
		case errors.Is(err, io.EOF):
		case err != nil:
			return err
		default:
			return errMultiDocs
		}
	}
	return nil
}

func (p *parser) syntaxError(err error) *Error {
	msg := err.Error()
	line := 0
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	} else {
		msg = strings.TrimPrefix(msg, "yaml: ")
	}
	return &Error{File: p.name, Line: line, Msg: "invalid YAML: " + msg, Fix: "correct the YAML syntax at that line (indent with spaces, quote values that contain \": \" or start with a special character)", Err: err}
}

// typeError translates one of yaml.TypeError's messages.
func (p *parser) typeError(msg string, err error) *Error {
	if m := unknownRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		field, parent := m[2], ""
		for _, k := range p.ix.keys {
			if k.line == line && k.name == m[2] {
				field, parent = k.path, k.parent
				break
			}
		}
		known := partnerKeys
		switch {
		case p.knownKeys != nil:
			known = p.knownKeys(parent)
		case parent == "":
			known = topKeys
		case parent == "station", strings.HasPrefix(parent, "stations[") && !strings.Contains(parent, "."):
			known = stationKeys
		case strings.Contains(parent, ".keys["):
			known = keyKeys
		case strings.Contains(parent, ".certificates["):
			known = certKeys
		}
		where := parent
		if where == "" {
			where = "the top level"
		}
		return &Error{File: p.name, Field: field, Line: line,
			Msg: fmt.Sprintf("unknown key %q", m[2]),
			Fix: fmt.Sprintf("remove it or correct the spelling; %s accepts %s", where, strings.Join(known, ", ")),
			Err: err}
	}
	if m := duplicateRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		name, _ := strconv.Unquote(m[2])
		field := ""
		for _, k := range p.ix.keys {
			if k.line == line && k.name == name {
				field = k.path
				break
			}
		}
		return &Error{File: p.name, Field: field, Line: line,
			Msg: fmt.Sprintf("key %s appears twice (first at line %s)", m[2], m[3]),
			Fix: "keep one of the two", Err: err}
	}
	if m := unmarshalRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		tag, value, into := m[2], m[3], m[4]
		kind := yaml.ScalarNode
		switch tag {
		case "!!map":
			kind = yaml.MappingNode
		case "!!seq":
			kind = yaml.SequenceNode
		}
		field := ""
		for _, v := range p.ix.values {
			if v.line == line && v.kind == kind {
				field = v.path
				break
			}
		}
		want, fix := expected(into, field)
		if field == "" && p.knownKeys != nil {
			want, fix = "a mapping", "make the top level a mapping of "+strings.Join(p.knownKeys(""), ", ")
		}
		return &Error{File: p.name, Field: field, Line: line,
			Msg: "wrong type: " + describeNode(tag, value) + " where " + want + " is expected", Fix: fix, Err: err}
	}
	line := 0
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	return &Error{File: p.name, Line: line, Msg: "invalid YAML: " + msg, Fix: "correct the value at that line", Err: err}
}

func describeNode(tag, value string) string {
	switch tag {
	case "!!map":
		return "a mapping"
	case "!!seq":
		return "a list"
	}
	if value != "" {
		return fmt.Sprintf("%q", value)
	}
	return "a " + strings.TrimPrefix(tag, "!!") + " value"
}

// expected says what a value decoded into the Go type into (at field)
// should be, and how to write it.
func expected(into, field string) (want, fix string) {
	switch {
	case field == "":
		return "a mapping with station and partners", "make the top level a mapping: station: {...} and partners: [...]"
	case field == "partners":
		return "a list", "write partners as a list, each item starting with \"- as2_id: ...\""
	case into == "config.Duration":
		return "a duration", "write a duration like 10s, 1m or 1h30m"
	case into == "bool":
		return "true or false", "write true or false"
	case into == "int", strings.HasPrefix(into, "*int"):
		return "a whole number", "write a whole number without quotes"
	case strings.HasPrefix(into, "[]"):
		return "a list", "write a list, each item on a line starting with \"- \""
	case strings.Contains(into, "config.raw"):
		return "a mapping", "write it as a mapping of keys and values"
	}
	return "a single value", "write a single value; quote it if it contains special characters"
}
