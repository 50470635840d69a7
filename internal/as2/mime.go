package as2

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime/quotedprintable"
	"strings"
	"unicode"
)

// ErrMalformedMIME means a MIME entity could not be parsed.
var ErrMalformedMIME = errors.New("as2: malformed MIME entity")

// ErrLimit means input exceeded one of the Limits.
var ErrLimit = errors.New("as2: limit exceeded")

// Limits bound the work done on untrusted input. Zero fields take the
// defaults shown.
type Limits struct {
	// MaxHeaderBytes bounds one entity's header block (64 KiB).
	MaxHeaderBytes int
	// MaxHeaders bounds the header fields of one entity (128).
	MaxHeaders int
	// MaxDepth bounds nesting of multiparts and of S/MIME layers (16).
	MaxDepth int
	// MaxParts bounds the body parts of one parsed entity, all levels (256).
	MaxParts int
	// MaxDecompressedSize bounds the decompressed bytes of one message,
	// all compressed layers together (512 MiB).
	MaxDecompressedSize int64
}

func (l Limits) withDefaults() Limits {
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = 64 << 10
	}
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = 128
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = 16
	}
	if l.MaxParts <= 0 {
		l.MaxParts = 256
	}
	if l.MaxDecompressedSize <= 0 {
		l.MaxDecompressedSize = 512 << 20
	}
	return l
}

// Field is one header field. Value is unfolded and trimmed; the bytes as
// received stay in Entity.Raw.
type Field struct {
	Name  string
	Value string
}

// Header is the ordered header fields of an entity.
type Header []Field

// Get returns the value of the first field named name (case-insensitive),
// or "".
func (h Header) Get(name string) string {
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

// Has reports whether a field named name is present.
func (h Header) Has(name string) bool {
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			return true
		}
	}
	return false
}

// Entity is a MIME entity. Raw, Body and the Raw of every part alias the
// parsed input; nothing is copied.
type Entity struct {
	// Raw is the entity exactly as received: header block, blank line and
	// body. It is nil for an entity assembled from HTTP headers.
	Raw []byte
	// Header holds the parsed header fields.
	Header Header
	// Body is the body as received, before transfer decoding.
	Body []byte
	// Parts holds the body parts of a multipart entity, in order.
	Parts []*Entity
}

// ParseEntity parses raw as a MIME entity: header fields ended by CRLF or
// bare LF (folded lines are unfolded), an empty line, the body. Multipart
// bodies are split per RFC 2046, recursively within lim.MaxDepth. An input
// without an empty line is all header. Errors wrap ErrMalformedMIME or
// ErrLimit.
func ParseEntity(raw []byte, lim Limits) (*Entity, error) {
	p := &mimeParser{lim: lim.withDefaults()}
	return p.entity(raw, 0)
}

// parseHeaderOnly parses the header of raw and leaves multipart bodies
// unsplit.
func parseHeaderOnly(raw []byte, lim Limits) (*Entity, error) {
	p := &mimeParser{lim: lim}
	h, body, err := p.header(raw)
	if err != nil {
		return nil, err
	}
	return &Entity{Raw: raw, Header: h, Body: body}, nil
}

type mimeParser struct {
	lim   Limits
	parts int
}

func (p *mimeParser) entity(raw []byte, depth int) (*Entity, error) {
	h, body, err := p.header(raw)
	if err != nil {
		return nil, err
	}
	e := &Entity{Raw: raw, Header: h, Body: body}
	if err := p.multipart(e, depth); err != nil {
		return nil, err
	}
	return e, nil
}

func (p *mimeParser) header(raw []byte) (Header, []byte, error) {
	// The header block is copied once, into one string that the fields'
	// names and values share (a value is not an alias of raw, which a
	// decryption in place may overwrite).
	blk := scanHeader(raw, p.lim.MaxHeaderBytes)
	block := string(raw[:blk.end])
	h := make(Header, 0, min(blk.lines, p.lim.MaxHeaders))
	// A folded field's continuation lines are collected in cont and
	// joined once, when the next field starts or the header ends: joining
	// per line would copy the value again for every line.
	var cont strings.Builder
	folded := false
	unfold := func() {
		if folded {
			h[len(h)-1].Value = strings.TrimSpace(cont.String())
			cont.Reset()
			folded = false
		}
	}
	rest := block
	for rest != "" {
		var line string
		if i := strings.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			line, rest = rest, ""
		}
		line = strings.TrimSuffix(line, "\r")
		if line[0] == ' ' || line[0] == '\t' {
			if len(h) == 0 {
				return nil, nil, fmt.Errorf("%w: continuation line before the first header field", ErrMalformedMIME)
			}
			if !folded {
				cont.WriteString(h[len(h)-1].Value)
				folded = true
			}
			// The same value as trimming after each line: the value so
			// far has no trailing space, and leading space goes at the end.
			cont.WriteString(strings.TrimRightFunc(line, unicode.IsSpace))
			continue
		}
		unfold()
		colon := strings.IndexByte(line, ':')
		if colon <= 0 {
			return nil, nil, fmt.Errorf("%w: header line without a field name", ErrMalformedMIME)
		}
		if len(h) >= p.lim.MaxHeaders {
			return nil, nil, fmt.Errorf("%w: more than %d header fields", ErrLimit, p.lim.MaxHeaders)
		}
		h = append(h, Field{Name: strings.TrimSpace(line[:colon]), Value: strings.TrimSpace(line[colon+1:])})
	}
	unfold()
	if blk.overLimit {
		return nil, nil, fmt.Errorf("%w: header block over %d bytes", ErrLimit, p.lim.MaxHeaderBytes)
	}
	if len(h) == 0 {
		h = nil
	}
	return h, blk.body, nil
}

// headerBlock is where an entity's header block ends (scanHeader).
type headerBlock struct {
	// end is the length of the header lines (their line ends included),
	// before the blank line, or up to the line where the block went over
	// the limit.
	end int
	// lines counts the lines up to end (at most one a field).
	lines int
	// body follows the blank line; nil when the input ends without a
	// line end (all header).
	body []byte
	// overLimit: the block goes on past the limit after end.
	overLimit bool
}

// scanHeader finds the blank line ending raw's header block (a line ended
// by LF or CRLF), or the line from which the block is over maxBytes.
func scanHeader(raw []byte, maxBytes int) headerBlock {
	var b headerBlock
	rest := raw
	for {
		consumed := len(raw) - len(rest)
		if consumed > maxBytes {
			b.end, b.overLimit = consumed, true
			return b
		}
		if len(rest) == 0 {
			b.end, b.body = consumed, rest
			return b
		}
		var line []byte
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			line, rest = rest, nil
		}
		if len(line) == 0 || (len(line) == 1 && line[0] == '\r') {
			b.end, b.body = consumed, rest
			return b
		}
		b.lines++
	}
}

func (p *mimeParser) multipart(e *Entity, depth int) error {
	mt, params := e.MediaType()
	if !strings.HasPrefix(mt, "multipart/") {
		return nil
	}
	if depth >= p.lim.MaxDepth {
		return fmt.Errorf("%w: multipart nesting deeper than %d", ErrLimit, p.lim.MaxDepth)
	}
	boundary := params["boundary"]
	if boundary == "" {
		return fmt.Errorf("%w: %s without boundary", ErrMalformedMIME, mt)
	}
	raws, err := splitMultipart(e.Body, boundary, p.lim.MaxParts-p.parts)
	if err != nil {
		return err
	}
	p.parts += len(raws)
	for _, r := range raws {
		part, err := p.entity(r, depth+1)
		if err != nil {
			return err
		}
		e.Parts = append(e.Parts, part)
	}
	return nil
}

// splitMultipart returns the body parts of a multipart body. Per RFC 2046
// the line break before a delimiter line belongs to the delimiter, so a
// part ends before the CRLF (or bare LF) that precedes "--boundary".
// A missing close delimiter is tolerated: the last part runs to the end.
func splitMultipart(body []byte, boundary string, maxParts int) ([][]byte, error) {
	delim := []byte("--" + boundary)
	var parts [][]byte
	start := -1 // start of the current part, -1 while in the preamble
	pos := 0
	for {
		i := bytes.Index(body[pos:], delim)
		if i < 0 {
			break
		}
		i += pos
		after := i + len(delim)
		pos = after
		if i > 0 && body[i-1] != '\n' {
			continue // not at the start of a line
		}
		closing := bytes.HasPrefix(body[after:], []byte("--"))
		if !closing && after < len(body) {
			switch body[after] {
			case ' ', '\t', '\r', '\n':
			default:
				continue // a longer boundary that shares our prefix
			}
		}
		if start >= 0 {
			end := i
			if end > 0 && body[end-1] == '\n' {
				end--
				if end > 0 && body[end-1] == '\r' {
					end--
				}
			}
			if end < start {
				end = start
			}
			if len(parts) >= maxParts {
				return nil, fmt.Errorf("%w: too many body parts", ErrLimit)
			}
			parts = append(parts, body[start:end])
		}
		if closing {
			return nilIfEmpty(parts, boundary)
		}
		// Skip transport padding to the end of the delimiter line.
		nl := bytes.IndexByte(body[after:], '\n')
		if nl < 0 {
			start = len(body)
			break
		}
		start = after + nl + 1
		pos = start
	}
	if start >= 0 && start < len(body) {
		if len(parts) >= maxParts {
			return nil, fmt.Errorf("%w: too many body parts", ErrLimit)
		}
		parts = append(parts, body[start:])
	}
	return nilIfEmpty(parts, boundary)
}

func nilIfEmpty(parts [][]byte, boundary string) ([][]byte, error) {
	if len(parts) == 0 {
		return nil, fmt.Errorf("%w: no body part delimited by %q", ErrMalformedMIME, boundary)
	}
	return parts, nil
}

// MediaType returns the lower-cased media type and the parameters of the
// Content-Type field, parsed leniently (ParseMediaType), or "" when it is
// absent. Parameter names are lower-cased.
func (e *Entity) MediaType() (string, map[string]string) {
	return ParseMediaType(e.Header.Get("Content-Type"))
}

// TransferEncoding returns the lower-cased Content-Transfer-Encoding, with
// "binary" for an absent field (AS2 over HTTP is binary-clean; RFC 4130
// §5.2, not the 7bit default of mail).
func (e *Entity) TransferEncoding() string {
	cte := strings.ToLower(strings.TrimSpace(e.Header.Get("Content-Transfer-Encoding")))
	if cte == "" {
		return "binary"
	}
	return cte
}

// DecodedBody returns the body with its Content-Transfer-Encoding removed:
// base64 (whitespace and line breaks ignored), quoted-printable, or
// binary/7bit/8bit (unchanged, no copy). Other encodings are an error
// wrapping ErrMalformedMIME.
func (e *Entity) DecodedBody() ([]byte, error) {
	return decodeTransfer(e.TransferEncoding(), e.Body)
}

func decodeTransfer(cte string, body []byte) ([]byte, error) {
	switch cte {
	case "binary", "7bit", "8bit":
		return body, nil
	case "base64":
		b, err := decodeBase64(body)
		if err != nil {
			return nil, fmt.Errorf("%w: base64 body: %w", ErrMalformedMIME, err)
		}
		return b, nil
	case "quoted-printable":
		b, err := io.ReadAll(quotedprintable.NewReader(bytes.NewReader(body)))
		if err != nil {
			return nil, fmt.Errorf("%w: quoted-printable body: %w", ErrMalformedMIME, err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("%w: unknown Content-Transfer-Encoding %q", ErrMalformedMIME, cte)
}

// decodeBase64 decodes base64 ignoring whitespace and tolerating missing
// padding, into one buffer when the input has no whitespace but line
// breaks (which the decoder skips).
func decodeBase64(b []byte) ([]byte, error) {
	out := make([]byte, base64.StdEncoding.DecodedLen(len(b)))
	if n, err := base64.StdEncoding.Decode(out, b); err == nil {
		return out[:n], nil
	}
	clean := make([]byte, 0, len(b))
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
		default:
			clean = append(clean, c)
		}
	}
	n, err := base64.StdEncoding.Decode(out, clean)
	if err != nil {
		trimmed := bytes.TrimRight(clean, "=")
		if need := base64.RawStdEncoding.DecodedLen(len(trimmed)); need > len(out) {
			out = make([]byte, need)
		}
		if n, err = base64.RawStdEncoding.Decode(out, trimmed); err != nil {
			return nil, err
		}
	}
	return out[:n], nil
}

// isBase64Text reports whether b consists of base64 characters and line
// breaks only (a body whose CTE header went missing).
func isBase64Text(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '+', c == '/', c == '=', c == '\r', c == '\n', c == ' ', c == '\t':
		default:
			return false
		}
	}
	return true
}

// encodeBase64Lines encodes b as base64 in CRLF-terminated 76-column lines.
func encodeBase64Lines(b []byte) []byte {
	enc := base64.StdEncoding.EncodedLen(len(b))
	out := make([]byte, 0, enc+enc/76*2+2)
	const lineBytes = 57 // 76 characters
	for len(b) > 0 {
		n := min(lineBytes, len(b))
		out = base64.StdEncoding.AppendEncode(out, b[:n])
		out = append(out, '\r', '\n')
		b = b[n:]
	}
	return out
}

// filename returns the filename parameter of a Content-Disposition value,
// tolerating unquoted values with spaces.
func filename(cd string) string {
	if cd == "" {
		return ""
	}
	_, params := ParseMediaType(cd)
	return params["filename"]
}

// toCRLF converts bare LF line ends to CRLF.
func toCRLF(b []byte) []byte {
	n := bytes.Count(b, []byte{'\n'}) - bytes.Count(b, []byte("\r\n"))
	if n <= 0 {
		return b
	}
	out := make([]byte, 0, len(b)+n)
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, c)
	}
	return out
}

// hasBareLF reports whether b has an LF not preceded by CR.
func hasBareLF(b []byte) bool {
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			return true
		}
	}
	return false
}

// writeHeader appends fields in wire form with CRLF line ends.
func writeHeader(dst []byte, h Header) []byte {
	for _, f := range h {
		dst = append(dst, f.Name...)
		dst = append(dst, ':', ' ')
		dst = append(dst, f.Value...)
		dst = append(dst, '\r', '\n')
	}
	return dst
}
