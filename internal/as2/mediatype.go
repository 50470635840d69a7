package as2

import (
	"mime"
	"strings"
)

// ParseMediaType parses a Content-Type (or Content-Disposition) value the
// way AS2 peers mean it, where mime.ParseMediaType is strict: unquoted
// values holding '/', '=', '@', ':' or other tspecials
// (protocol=application/pkcs7-signature, boundary=----=_Part_1_2.3),
// spaces around '=' and ';', a trailing ';', parameter names in any case,
// a quoted value with backslash escapes, and junk it cannot parse, which
// is skipped. The media type is lower-cased and trimmed; parameter names
// are lower-cased; for repeated names the first wins. It returns "" and
// nil for an empty value. It never fails: what can be read is returned.
func ParseMediaType(v string) (string, map[string]string) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	if mt, params, ok := parsePlainMediaType(v); ok {
		return mt, params
	}
	return parseMediaTypeLenient(v)
}

// parseMediaTypeLenient is ParseMediaType for a trimmed, non-empty value
// of any form: mime.ParseMediaType, else the lenient reading.
func parseMediaTypeLenient(v string) (string, map[string]string) {
	if mt, params, err := mime.ParseMediaType(v); err == nil {
		// mime accepts an RFC 2231 continuation without a name
		// ("*0=x"): a parameter named "" is junk here, as below.
		delete(params, "")
		return mt, params
	}
	t, rest, _ := strings.Cut(v, ";")
	mt := strings.ToLower(strings.TrimSpace(t))
	params := map[string]string{}
	for rest != "" {
		var name string
		// The name runs to '='; a segment without '=' is junk up to ';'.
		eq := strings.IndexAny(rest, "=;")
		if eq < 0 {
			break
		}
		if rest[eq] == ';' {
			rest = rest[eq+1:]
			continue
		}
		name, rest = strings.ToLower(strings.TrimSpace(rest[:eq])), strings.TrimLeft(rest[eq+1:], " \t")
		var val string
		if strings.HasPrefix(rest, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(rest) && rest[i] != '"'; i++ {
				if rest[i] == '\\' && i+1 < len(rest) {
					i++
				}
				b.WriteByte(rest[i])
			}
			val = b.String()
			rest = rest[min(i+1, len(rest)):]
			// Anything between the closing quote and ';' is junk.
			if j := strings.IndexByte(rest, ';'); j >= 0 {
				rest = rest[j+1:]
			} else {
				rest = ""
			}
		} else {
			val, rest, _ = strings.Cut(rest, ";")
			val = strings.TrimSpace(val)
		}
		if name == "" || strings.ContainsAny(name, " \t\"") {
			continue
		}
		if _, dup := params[name]; !dup {
			params[name] = val
		}
	}
	return mt, params
}

// parsePlainMediaType reads the common form of a trimmed value without
// copying: an ASCII type ("type/subtype" or one token), then parameters
// "; name=token" or "; name=\"quoted\"" (no backslash, no line break in
// the quotes), distinct names without '*' (no RFC 2231), optional spaces
// around ';' and '=', at most one trailing ';'. For such a value it gives
// what mime.ParseMediaType gives (the type lower-cased, the names
// lower-cased, the values as written), with the type, names and values
// sharing v's memory; ok is false for any other form, which
// parseMediaTypeLenient reads. Every AS2 header field edihub and the
// products it trades with write is of this form, and the receive path
// reads several per message.
func parsePlainMediaType(v string) (mt string, params map[string]string, ok bool) {
	base, rest, _ := strings.Cut(v, ";")
	base = trimRightASCIISpace(base)
	typ, sub := base, ""
	if i := strings.IndexByte(base, '/'); i >= 0 {
		typ, sub = base[:i], base[i+1:]
		if sub == "" {
			return "", nil, false
		}
	}
	if typ == "" || !allTokenChars(typ) || !allTokenChars(sub) {
		return "", nil, false
	}
	params = map[string]string{}
	for {
		rest = trimLeftASCIISpace(rest)
		if rest == "" {
			break // nothing, or one trailing ';'
		}
		name, r := consumeTokenChars(rest)
		if name == "" || strings.IndexByte(name, '*') >= 0 {
			return "", nil, false
		}
		r = trimLeftASCIISpace(r)
		if r == "" || r[0] != '=' {
			return "", nil, false
		}
		r = trimLeftASCIISpace(r[1:])
		var val string
		if r != "" && r[0] == '"' {
			end := strings.IndexAny(r[1:], "\"\\\r\n")
			if end < 0 || r[1+end] != '"' {
				return "", nil, false
			}
			val, r = r[1:1+end], r[2+end:]
		} else {
			if val, r = consumeTokenChars(r); val == "" {
				return "", nil, false
			}
		}
		name = strings.ToLower(name)
		if _, dup := params[name]; dup {
			return "", nil, false // mime refuses differing repeats; the lenient reading keeps the first
		}
		params[name] = val
		r = trimLeftASCIISpace(r)
		if r == "" {
			break
		}
		if r[0] != ';' {
			return "", nil, false
		}
		rest = r[1:]
	}
	return strings.ToLower(base), params, true
}

// consumeTokenChars splits v after its leading RFC 2045 token characters.
func consumeTokenChars(v string) (token, rest string) {
	for i := 0; i < len(v); i++ {
		if !isTokenChar(v[i]) {
			return v[:i], v[i:]
		}
	}
	return v, ""
}

func allTokenChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isTokenChar(s[i]) {
			return false
		}
	}
	return true
}

// isTokenChar reports an RFC 2045 token character: printable ASCII but
// space and tspecials (mime's definition).
func isTokenChar(c byte) bool { return tokenChars[c] }

var tokenChars = func() (t [256]bool) {
	for c := '!'; c <= '~'; c++ {
		t[c] = !strings.ContainsRune(`()<>@,;:\"/[]?=`, c)
	}
	return t
}()

func trimLeftASCIISpace(s string) string {
	for s != "" && isASCIISpace(s[0]) {
		s = s[1:]
	}
	return s
}

func trimRightASCIISpace(s string) string {
	for s != "" && isASCIISpace(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

func isASCIISpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}
