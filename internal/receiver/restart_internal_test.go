package receiver

import (
	"net/http"
	"strings"
	"testing"
)

func TestParseContentRange(t *testing.T) {
	tests := []struct {
		give string
		want contentRange
		ok   bool
	}{
		{"bytes 0-9/10", contentRange{0, 9, 10}, true},
		{"bytes 5-9/10", contentRange{5, 9, 10}, true},
		{"BYTES 9-9/10", contentRange{9, 9, 10}, true},
		{" bytes 100-199/200 ", contentRange{100, 199, 200}, true},
		{"bytes 0-9223372036854775806/9223372036854775807", contentRange{0, 9223372036854775806, 9223372036854775807}, true},
		{"bytes 0-9/9", contentRange{}, false},   // last past the end
		{"bytes 5-4/10", contentRange{}, false},  // first after last
		{"bytes 0-9/*", contentRange{}, false},   // unknown total
		{"bytes */10", contentRange{}, false},    // unsatisfied-range form
		{"bytes -5-9/10", contentRange{}, false}, // sign
		{"bytes +5-9/10", contentRange{}, false},
		{"bytes 0-9/10, 0-1/10", contentRange{}, false},
		{"bytes 0 - 9/10", contentRange{}, false},
		{"bits 0-9/10", contentRange{}, false},
		{"bytes=0-9/10", contentRange{}, false},
		{"bytes 0-9/10/11", contentRange{}, false},
		{"bytes 0-9223372036854775807/9223372036854775808", contentRange{}, false}, // overflow
		{"bytes 0-1/00000000000000000000002", contentRange{}, false},               // over 19 digits
		{"bytes 0x1-2/3", contentRange{}, false},
		{"", contentRange{}, false},
		{"bytes", contentRange{}, false},
	}
	for _, tt := range tests {
		got, err := parseContentRange(tt.give)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseContentRange(%q) = %+v, %v; want %+v, ok %v", tt.give, got, err, tt.want, tt.ok)
		}
	}
}

// FuzzParseContentRange: whatever it is given, parseContentRange does
// not panic, and what it accepts is a satisfiable range that formats
// back to itself.
func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-9/10", "bytes 5-4/10", "bytes 0-9223372036854775806/9223372036854775807", "bytes */10", "bytes -1-2/3", "bytes 1-2/3/4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseContentRange(s)
		if err != nil {
			if c != (contentRange{}) {
				t.Fatalf("parseContentRange(%q) = %+v with error %v, want the zero range", s, c, err)
			}
			return
		}
		if c.first < 0 || c.first > c.last || c.last >= c.total {
			t.Fatalf("parseContentRange(%q) = %+v, not a satisfiable range", s, c)
		}
		back, err := parseContentRange(c.String())
		if err != nil || back != c {
			t.Fatalf("parseContentRange(%q) = %+v, which formats as %q and parses back as %+v, %v", s, c, c.String(), back, err)
		}
	})
}

func TestTransferID(t *testing.T) {
	tests := []struct {
		ifMatch, etag string
		want          string
		ok            bool
	}{
		{`"abc-1"`, "", "abc-1", true},
		{"", `"abc-1"`, "abc-1", true},
		{`W/"abc"`, "", "abc", true},
		{"abc", `"other"`, "abc", true}, // If-Match first
		{"", "", "", false},
		{`""`, "", "", false},
		{`"a b"`, "", "", false},
		{"\"a\x01\"", "", "", false},
		{`"` + strings.Repeat("x", maxETag+1) + `"`, "", "", false},
		{`"` + strings.Repeat("x", maxETag) + `"`, "", strings.Repeat("x", maxETag), true},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.ifMatch != "" {
			h.Set("If-Match", tt.ifMatch)
		}
		if tt.etag != "" {
			h.Set("ETag", tt.etag)
		}
		got, ok := transferID(h)
		if got != tt.want || ok != tt.ok {
			t.Errorf("transferID(If-Match %q, ETag %q) = %q, %v; want %q, %v", tt.ifMatch, tt.etag, got, ok, tt.want, tt.ok)
		}
	}
}

func TestHasFeature(t *testing.T) {
	tests := []struct {
		give []string
		want bool
	}{
		{[]string{"AS2-Restart"}, true},
		{[]string{"multiple-attachments, as2-restart"}, true},
		{[]string{"CEM", " AS2-Restart "}, true},
		{[]string{"AS2-Reliability"}, false},
		{[]string{"AS2-Restarts"}, false},
		{nil, false},
	}
	for _, tt := range tests {
		h := http.Header{"Ediint-Features": tt.give}
		if got := hasFeature(h, restartFeature); got != tt.want {
			t.Errorf("hasFeature(%q) = %v, want %v", tt.give, got, tt.want)
		}
	}
}
