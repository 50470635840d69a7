package api

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// query returns r's query parameters; it answers 400 naming the first
// parameter that is not one of known, and returns false then.
func query(w http.ResponseWriter, r *http.Request, known ...string) (url.Values, bool) {
	q := r.URL.Query()
	for k := range q {
		if !slices.Contains(known, k) {
			writeError(w, http.StatusBadRequest, k, fmt.Sprintf("unknown query parameter %q (use %s)", k, strings.Join(known, ", ")))
			return nil, false
		}
	}
	return q, true
}

// oneOf returns query parameter name, which may be absent ("") or one of
// allowed; otherwise it answers 400 naming the parameter and the values,
// and returns false.
func oneOf(w http.ResponseWriter, q url.Values, name string, allowed ...string) (string, bool) {
	v := q.Get(name)
	if v != "" && !slices.Contains(allowed, v) {
		writeError(w, http.StatusBadRequest, name, fmt.Sprintf("%s %q: want %s", name, v, orList(allowed)))
		return "", false
	}
	return v, true
}

// orList joins "a", "b", "c" as "a, b or c".
func orList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// timeRange parses the query's since and until, RFC 3339 times, into
// since and until (left as they are when absent); false when it answered
// 400.
func timeRange(w http.ResponseWriter, q url.Values, since, until *time.Time) bool {
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"since", since}, {"until", until}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			writeError(w, http.StatusBadRequest, p.name, fmt.Sprintf("%s %q: want an RFC 3339 time like 2026-01-31T23:00:00Z", p.name, v))
			return false
		}
		*p.dst = t
	}
	return true
}
