package connector

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// DefaultTemplate is the file-name template of a destination that names
// none.
const DefaultTemplate = "{partner}/{yyyy}/{mm}/{dd}/{icn}-{message_id}.{ext}"

// Bounds of templates and the names they expand to: a segment (the text
// between two slashes) longer than MaxSegment bytes is shortened and made
// unique again with a hash, which keeps names within what SFTP servers,
// S3 keys and Windows shares accept.
const (
	MaxSegment     = 200
	maxTemplateLen = 512
)

// Missing is what a placeholder expands to when the document has no value
// for it (no ICN for a payload that is not EDI, no original file name).
const Missing = "none"

// ErrTemplate is wrapped by every ParseTemplate error.
var ErrTemplate = errors.New("connector: file-name template")

// placeholders are the names a template may use, each with the document
// value it expands to (before sanitising).
var placeholders = map[string]func(d Document) string{
	"partner":    func(d Document) string { return d.Partner },
	"station":    func(d Document) string { return d.Station },
	"message_id": func(d Document) string { return d.MessageID },
	"id":         func(d Document) string { return idString(d.ID) },
	"icn":        func(d Document) string { return d.ICN },
	"type":       func(d Document) string { return d.Type },
	"group":      func(d Document) string { return d.GroupType },
	"standard":   func(d Document) string { return d.Standard },
	"direction":  func(d Document) string { return d.Direction },
	"yyyy":       func(d Document) string { return dateField(d, "2006") },
	"mm":         func(d Document) string { return dateField(d, "01") },
	"dd":         func(d Document) string { return dateField(d, "02") },
	"hh":         func(d Document) string { return dateField(d, "15") },
	"min":        func(d Document) string { return dateField(d, "04") },
	"ss":         func(d Document) string { return dateField(d, "05") },
	"ext":        Ext,
	"filename":   func(d Document) string { return baseName(d.FileName) },
}

// unique are the placeholders of which a template needs one, so that two
// documents never get the same name (the second would replace the first).
var unique = []string{"id", "message_id"}

// Placeholders lists the placeholder names a template may use, sorted.
func Placeholders() []string {
	names := make([]string, 0, len(placeholders))
	for n := range placeholders {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Template turns a Document into a file name: a relative path with forward
// slashes, the same for the same document every time (no clock, no
// randomness), so a delivery retried after a lost answer replaces its
// first copy. The zero Template expands DefaultTemplate.
type Template struct {
	src  string
	segs [][]part // one per path segment
}

// part is a literal (name == "") or a placeholder.
type part struct {
	lit  string
	name string
}

// ParseTemplate parses s. It refuses, with ErrTemplate and the reason: an
// empty template, one longer than 512 bytes, an unknown placeholder
// (naming it and the valid ones), an unclosed or stray brace, an absolute
// path, an empty or "." or ".." segment, a backslash or control character,
// and a template with neither {id} nor {message_id} (two documents would
// share a name). Literal text is kept as written; values are sanitised
// at Expand.
func ParseTemplate(s string) (Template, error) {
	switch {
	case s == "":
		return Template{}, fmt.Errorf("%w: empty; the default is %q", ErrTemplate, DefaultTemplate)
	case len(s) > maxTemplateLen:
		return Template{}, fmt.Errorf("%w: %d bytes, at most %d", ErrTemplate, len(s), maxTemplateLen)
	case !utf8.ValidString(s):
		return Template{}, fmt.Errorf("%w: %q is not UTF-8", ErrTemplate, s)
	case strings.HasPrefix(s, "/"):
		return Template{}, fmt.Errorf("%w: %q starts with /; names are relative to the destination's root", ErrTemplate, s)
	case strings.ContainsFunc(s, func(r rune) bool { return strings.ContainsRune(`\<>:"|?*`, r) || unsafeRune(r) }):
		return Template{}, fmt.Errorf("%w: %q has a control character or one of \\<>:\"|?*, which some destinations refuse; separate directories with /", ErrTemplate, s)
	}
	t := Template{src: s}
	used := map[string]bool{}
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return Template{}, fmt.Errorf("%w: %q has an empty, . or .. segment", ErrTemplate, s)
		}
		parts, err := parseSegment(seg, used)
		if err != nil {
			return Template{}, fmt.Errorf("%w: %q: %s", ErrTemplate, s, err)
		}
		t.segs = append(t.segs, parts)
	}
	if !slices.ContainsFunc(unique, func(n string) bool { return used[n] }) {
		return Template{}, fmt.Errorf("%w: %q uses neither {id} nor {message_id}; without one, two documents get the same name and the second replaces the first", ErrTemplate, s)
	}
	return t, nil
}

// parseSegment splits one path segment into literals and placeholders,
// recording the placeholders in used.
func parseSegment(seg string, used map[string]bool) ([]part, error) {
	var parts []part
	for seg != "" {
		open := strings.IndexAny(seg, "{}")
		if open < 0 {
			parts = append(parts, part{lit: seg})
			break
		}
		if seg[open] == '}' {
			return nil, errors.New("a } without its {")
		}
		if open > 0 {
			parts = append(parts, part{lit: seg[:open]})
		}
		end := strings.IndexAny(seg[open+1:], "{}")
		if end < 0 || seg[open+1+end] == '{' {
			return nil, errors.New("a { without its }")
		}
		name := seg[open+1 : open+1+end]
		if _, ok := placeholders[name]; !ok {
			return nil, fmt.Errorf("unknown placeholder {%s}; valid: {%s}", name, strings.Join(Placeholders(), "}, {"))
		}
		used[name] = true
		parts = append(parts, part{name: name})
		seg = seg[open+1+end+1:]
	}
	return parts, nil
}

// String returns the template's source text.
func (t Template) String() string {
	if t.segs == nil {
		return DefaultTemplate
	}
	return t.src
}

// Expand returns d's name under t. Each value is sanitised: a slash,
// backslash, control character, invalid UTF-8 or one of <>:"|?* becomes
// "_"; an empty value becomes Missing; dates are d.Time in UTC. Each
// resulting segment is then made safe for every kind of destination: a
// leading "." (hidden files, and the temporary names of writers) and
// trailing dots and spaces become "_", a Windows device name (CON, NUL,
// COM1 …) gets a "_" prefix, and a segment over MaxSegment bytes is cut
// and ends with "~" and 12 hex digits of its SHA-256 (keeping a short
// extension). The result is never absolute and has no empty, "." or ".."
// segment. The error is reserved for future placeholders; today Expand
// always succeeds.
func (t Template) Expand(d Document) (string, error) {
	if t.segs == nil {
		def, err := ParseTemplate(DefaultTemplate)
		if err != nil {
			return "", err
		}
		t = def
	}
	segs := make([]string, len(t.segs))
	for i, parts := range t.segs {
		var b strings.Builder
		for _, p := range parts {
			if p.name == "" {
				b.WriteString(p.lit)
				continue
			}
			v := sanitize(placeholders[p.name](d))
			if v == "" {
				v = Missing
			}
			b.WriteString(v)
		}
		segs[i] = safeSegment(b.String())
	}
	return strings.Join(segs, "/"), nil
}

// sanitize replaces what must not reach a file name with "_".
func sanitize(v string) string {
	var b strings.Builder
	for _, r := range v {
		if r == '/' || r == '\\' || strings.ContainsRune(`<>:"|?*`, r) || unsafeRune(r) {
			b.WriteByte('_')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// unsafeRune reports control and format characters (which terminals and
// file managers render misleadingly).
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError
}

// windowsDevices are names a Windows share cannot hold, with or without
// an extension.
var windowsDevices = map[string]bool{
	"CON": true, "PRN": true, "AUX": true, "NUL": true,
	"COM1": true, "COM2": true, "COM3": true, "COM4": true, "COM5": true, "COM6": true, "COM7": true, "COM8": true, "COM9": true,
	"LPT1": true, "LPT2": true, "LPT3": true, "LPT4": true, "LPT5": true, "LPT6": true, "LPT7": true, "LPT8": true, "LPT9": true,
}

// safeSegment makes one expanded segment safe (see Expand).
func safeSegment(s string) string {
	if s == "" {
		return "_"
	}
	if s[0] == '.' {
		s = "_" + s[1:]
	}
	if trimmed := strings.TrimRight(s, ". "); len(trimmed) < len(s) {
		s = trimmed + strings.Repeat("_", len(s)-len(trimmed))
	}
	stem, _, _ := strings.Cut(s, ".")
	if windowsDevices[strings.ToUpper(strings.TrimRight(stem, " "))] {
		s = "_" + s
	}
	if len(s) <= MaxSegment {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	mark := "~" + hex.EncodeToString(sum[:6])
	ext := ""
	if i := strings.LastIndexByte(s, '.'); i >= 0 && len(s)-i <= 16 {
		ext = s[i:]
	}
	keep := MaxSegment - len(mark) - len(ext)
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + mark + ext
}

// Ext returns the file extension (without the dot) for d: "edi" for an
// X12 or EDIFACT interchange or an EDI content type, "xml", "json",
// "txt", "pdf" by content type, else the extension of d's original file
// name when it has a short alphanumeric one, else "bin".
func Ext(d Document) string {
	if d.Standard != "" {
		return "edi"
	}
	mt, _, _ := mime.ParseMediaType(d.ContentType)
	switch {
	case strings.HasPrefix(mt, "application/edi") || mt == "application/edifact":
		return "edi"
	case mt == "application/xml" || mt == "text/xml" || strings.HasSuffix(mt, "+xml"):
		return "xml"
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return "json"
	case mt == "text/plain":
		return "txt"
	case mt == "application/pdf":
		return "pdf"
	}
	if e := strings.TrimPrefix(path.Ext(baseName(d.FileName)), "."); e != "" && len(e) <= 10 &&
		!strings.ContainsFunc(e, func(r rune) bool { return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9') }) {
		return strings.ToLower(e)
	}
	return "bin"
}

// baseName is the last element of a file name a partner sent, whichever
// separator its system uses.
func baseName(name string) string {
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return name
}

func idString(id int64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatInt(id, 10)
}

func dateField(d Document, layout string) string {
	if d.Time.IsZero() {
		return ""
	}
	return d.Time.UTC().Format(layout)
}
