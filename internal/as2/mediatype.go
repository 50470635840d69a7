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
