package config

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	yaml "go.yaml.in/yaml/v3"
)

// Source gives the configuration in force now. A replica's partners change
// while it runs (see internal/partners), so a component asks its Source for
// the configuration at the start of each unit of work (a message, a batch)
// and keeps that snapshot to its end: a message in flight keeps the profile
// it started with. Implementations are safe for concurrent use.
type Source interface {
	Current() *File
}

// Current returns f itself: a loaded file is a Source that never changes.
func (f *File) Current() *File { return f }

// PartnerSpec is one partner entry as written in YAML, the form partners
// are stored in: the same keys as an entry of a configuration file's
// partners list. In a stored spec the partner's certificates and TLS CA
// bundle are PEM text written inline instead of paths; secrets (the HTTP
// password, our TLS client certificate and key) are names of files in
// each replica's secrets directory (Options.SecretsDir), never paths.
type PartnerSpec = rawPartner

// PartnerDoc is a validated partners document (see ParsePartnerDoc).
type PartnerDoc struct {
	// Specs are the entries in document order, their certificates and CA
	// bundles inlined: ready to store.
	Specs []PartnerSpec
	// Partners are the profiles the specs make, in the same order.
	Partners []Partner
	// Warnings are the problems that do not refuse the document.
	Warnings []string
}

// PartnerDocOptions tune ParsePartnerDoc.
type PartnerDocOptions struct {
	// Now is the time certificates are checked against; nil is time.Now.
	Now func() time.Time
	// SecretsOptional makes a secret (auth.password_file, tls.cert_file,
	// tls.key_file) that cannot be read here, or no secrets directory
	// here, a warning: the replicas read it from their own secrets
	// directory. A secret that is not a name is an error all the same.
	SecretsOptional bool
	// InlineOnly refuses certificates and CA bundles given as paths: a
	// document that came over the network must not make the server read
	// its own files.
	InlineOnly bool
}

// ParsePartnerDoc validates data, a partners document called name in
// directory dir, against the stations of base: the YAML shape of a
// configuration file's partners list, as `partners: [...]`. A whole
// configuration file is accepted too (its station section is ignored), so
// that an old file upgrades in one command. Paths of certificates and CA
// bundles are resolved against dir and their PEM inlined into the specs.
// Secrets are names in base's secrets directory (Options.SecretsDir),
// read there as the replicas read them: a path, or a name that leads out
// of the directory, is refused, and with no secrets directory no secret
// may be named (unless SecretsOptional). The first problem is an *Error with the file, line, field and fix
// of Load; nothing of a document with an error is returned.
func ParsePartnerDoc(data []byte, dir, name string, base *File, opts PartnerDocOptions) (*PartnerDoc, error) {
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	p := &parser{name: name, dir: dir, secretRefs: true, secretsDir: base.secretsDir, secretsOptional: opts.SecretsOptional, inlineOnly: opts.InlineOnly, now: now()}
	if len(data) > maxFileSize {
		return nil, p.fail("", fmt.Sprintf("the file is larger than %d MiB", maxFileSize>>20), "split the partners over several files")
	}
	raw, err := p.decode(data)
	if err != nil {
		return nil, err
	}
	doc := &PartnerDoc{}
	seen := map[string]int{}
	for i := range raw.Partners {
		field := fmt.Sprintf("partners[%d]", i)
		rp := raw.Partners[i]
		pa, err := p.partner(field, &rp, base.stations())
		if err != nil {
			return nil, err
		}
		if j, dup := seen[pa.AS2ID]; dup {
			return nil, p.fail(field+".as2_id", fmt.Sprintf("AS2 ID %q is also the AS2 ID of partners[%d]", pa.AS2ID, j),
				fmt.Sprintf("give partners[%d] and partners[%d] distinct AS2 IDs, or merge them into one entry", j, i))
		}
		seen[pa.AS2ID] = i
		spec, err := p.inline(field, rp)
		if err != nil {
			return nil, err
		}
		doc.Specs = append(doc.Specs, spec)
		doc.Partners = append(doc.Partners, pa)
	}
	doc.Warnings = p.warnings
	return doc, nil
}

// inline returns raw with its certificate and CA bundle read into the
// spec as PEM text.
func (p *parser) inline(field string, raw rawPartner) (PartnerSpec, error) {
	if raw.Certificate != "" && !IsInlinePEM(raw.Certificate) {
		data, err := p.readRef(field+".certificate", raw.Certificate, "the partner's PEM certificate file")
		if err != nil {
			return raw, err
		}
		raw.Certificate = string(data)
	}
	if len(raw.Certificates) > 0 {
		list := make([]rawCertificate, len(raw.Certificates))
		for i, e := range raw.Certificates {
			if !IsInlinePEM(e.Certificate) {
				data, err := p.readRef(fmt.Sprintf("%s.certificates[%d].certificate", field, i), e.Certificate, "the partner's PEM certificate file")
				if err != nil {
					return raw, err
				}
				e.Certificate = string(data)
			}
			list[i] = e
		}
		raw.Certificates = list
	}
	if raw.TLS != nil && raw.TLS.CAFile != "" && !IsInlinePEM(raw.TLS.CAFile) {
		data, err := p.readRef(field+".tls.ca_file", raw.TLS.CAFile, "the partner's CA certificates in PEM")
		if err != nil {
			return raw, err
		}
		tls := *raw.TLS
		tls.CAFile = string(data)
		raw.TLS = &tls
	}
	if raw.Headers != nil {
		h := make(map[string]string, len(raw.Headers))
		for k, v := range raw.Headers {
			h[k] = v
		}
		raw.Headers = h
	}
	return raw, nil
}

// BuildPartner makes the profile of a stored spec for base's stations, as
// a replica serves it: name says where the spec comes from in errors and
// warnings (like `partner "ACME" version 3`). Its secrets are names read
// from base's secrets directory and its certificates are PEM text: a
// stored spec never makes a replica read a path. The checks are those of
// Load.
func BuildPartner(base *File, spec PartnerSpec, name string, now time.Time) (Partner, []string, error) {
	p := &parser{name: name, dir: base.dir, secretRefs: true, secretsDir: base.secretsDir, inlineOnly: true, now: now, profileApplied: true}
	pa, err := p.partner("partner", &spec, base.stations())
	pa.files = p.files
	return pa, p.warnings, err
}

// WithPartners returns a copy of f that serves partners (in the order
// given) as revision revision of the partner set. The stations and the
// file's own warnings are f's.
func (f *File) WithPartners(partners []Partner, revision int64) *File {
	g := &File{Path: f.Path, Station: f.Station, Stations: f.Stations, Warnings: f.Warnings, dir: f.dir, secretsDir: f.secretsDir, files: f.files, Revision: revision,
		Partners: partners, index: make(map[string]int, len(partners))}
	for i := range partners {
		g.index[partners[i].AS2ID] = i
	}
	return g
}

// Specs returns the partner entries of a configuration file as specs, their
// certificates inlined, for the one-time import of a file's partners into
// the database. It reads the file again.
func (f *File) Specs(opts PartnerDocOptions) ([]PartnerSpec, error) {
	if f.Path == "" {
		return nil, errors.New("config: the configuration has no file to read partners from")
	}
	data, err := readFile(f.Path)
	if err != nil {
		return nil, &Error{File: f.Path, Msg: describeReadError(err, f.Path), Fix: "check the path in EDIHUB_CONFIG", Err: err}
	}
	doc, err := ParsePartnerDoc(data, filepath.Dir(f.Path), f.Path, f, opts)
	if err != nil {
		return nil, err
	}
	return doc.Specs, nil
}

// EncodeSpec is spec in its canonical YAML form: the keys in the order of
// the documentation, unset keys left out. Equal specs encode equally. A
// spec of ParsePartnerDoc holds its profile's settings filled in; a key
// the entry set to false over its profile's true is written out, so that
// the spec applied again keeps it.
func EncodeSpec(spec PartnerSpec) (string, error) {
	var n yaml.Node
	if err := n.Encode(spec); err != nil {
		return "", fmt.Errorf("encode partner %q: %w", spec.AS2ID, err)
	}
	keepFalse(&n, &spec)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return "", fmt.Errorf("encode partner %q: %w", spec.AS2ID, err)
	}
	if err := enc.Close(); err != nil {
		return "", fmt.Errorf("encode partner %q: %w", spec.AS2ID, err)
	}
	return b.String(), nil
}

// DecodeSpec reads one partner entry in YAML (as EncodeSpec writes it, or
// as a user writes one entry of a partners list) strictly: unknown keys
// are an *Error naming the field, like Load's.
func DecodeSpec(name, text string) (PartnerSpec, error) {
	p := &parser{name: name}
	raw, err := p.decode(EntryDoc(text))
	if err != nil {
		return PartnerSpec{}, err
	}
	if len(raw.Partners) != 1 {
		return PartnerSpec{}, &Error{File: name, Msg: fmt.Sprintf("%d partner entries, want one", len(raw.Partners)), Fix: "give one partner's keys"}
	}
	return raw.Partners[0], nil
}

// EntryDoc is the partners document of one entry's YAML text.
func EntryDoc(text string) []byte { return []byte("partners:\n" + indentItem(text)) }

// EntryError is err, when it is an *Error found in a document built by
// EntryDoc, with its field and line as they are in the entry's own text
// (the document has one line more, and names the entry partners[0]);
// nil for any other error.
func EntryError(err error) *Error {
	var ce *Error
	if !errors.As(err, &ce) {
		return nil
	}
	e := *ce
	if e.Line > 1 {
		e.Line--
	}
	e.Field = strings.TrimPrefix(e.Field, "partners[0].")
	return &e
}

// Dir is the directory relative paths of the file are resolved against.
func (f *File) Dir() string { return f.dir }

// indentItem turns a mapping's YAML text into one item of a list.
func indentItem(text string) string {
	var b strings.Builder
	for i, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if i == 0 {
			b.WriteString("  - ")
		} else {
			b.WriteString("    ")
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	return b.String()
}

// keepFalse adds to n (spec's mapping) the keys spec's profile sets to
// true that spec holds false: omitted, they would read as not set.
func keepFalse(n *yaml.Node, spec *PartnerSpec) {
	pr, ok := lookupProfile(spec.Profile)
	if !ok || n.Kind != yaml.MappingNode {
		return
	}
	for _, s := range pr.settings {
		if s.value != "true" || profileKeys[s.key].get(spec) != "" {
			continue
		}
		n.Content = append(n.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s.key},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "false"})
	}
}
