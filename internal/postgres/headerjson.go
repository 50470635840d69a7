package postgres

import (
	"encoding/json"
	"net/http"
	"slices"
)

// headerJSON is json.Marshal(h), byte for byte, for the header fields
// stored with an MDN: it writes the common case (printable ASCII names
// and values) without reflection and leaves any other byte to
// encoding/json.
func headerJSON(h http.Header) ([]byte, error) {
	if h == nil {
		return []byte("null"), nil
	}
	keys := make([]string, 0, len(h))
	size := 2 // {}
	for k, vs := range h {
		n, ok := plainJSON(k)
		if !ok {
			return json.Marshal(h)
		}
		keys = append(keys, k)
		size += n + 4 // "k":[],
		for _, v := range vs {
			n, ok := plainJSON(v)
			if !ok {
				return json.Marshal(h)
			}
			size += n + 1 // "v",
		}
	}
	slices.Sort(keys)
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		vs := h[k]
		if vs == nil {
			b = append(b, "null"...)
			continue
		}
		b = append(b, '[')
		for j, v := range vs {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, v)
		}
		b = append(b, ']')
	}
	return append(b, '}'), nil
}

// plainJSON reports a string of printable ASCII, which appendJSONString
// writes as encoding/json does, and the size it writes.
func plainJSON(s string) (int, bool) {
	n := len(s) + 2
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e:
			return 0, false
		case c == '"' || c == '\\':
			n++
		case c == '<' || c == '>' || c == '&':
			n += 5
		}
	}
	return n, true
}

// appendJSONString appends printable ASCII s quoted as encoding/json
// quotes it: '"' and '\' escaped, and '<', '>' and '&' as \u00XX (its
// HTML-safe default).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '<':
			b = append(b, `\u003c`...)
		case '>':
			b = append(b, `\u003e`...)
		case '&':
			b = append(b, `\u0026`...)
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
