package as2_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/as2"
)

func TestParseEntity(t *testing.T) {
	tests := []struct {
		name       string
		give       string
		wantHeader as2.Header
		wantBody   string
		wantParts  []string // Raw of each part
	}{
		{
			name:       "CRLF",
			give:       "Content-Type: text/plain\r\nX-A: 1\r\n\r\nbody\r\n",
			wantHeader: as2.Header{{"Content-Type", "text/plain"}, {"X-A", "1"}},
			wantBody:   "body\r\n",
		},
		{
			name:       "bare LF",
			give:       "Content-Type: text/plain\nX-A:1\n\nbody\n",
			wantHeader: as2.Header{{"Content-Type", "text/plain"}, {"X-A", "1"}},
			wantBody:   "body\n",
		},
		{
			name:       "folded",
			give:       "Content-Type: application/EDI-X12;\r\n\tname=\"a b.edi\"\r\nContent-Disposition: attachment;\r\n  filename=x.edi\r\n\r\nB",
			wantHeader: as2.Header{{"Content-Type", "application/EDI-X12;\tname=\"a b.edi\""}, {"Content-Disposition", "attachment;  filename=x.edi"}},
			wantBody:   "B",
		},
		{
			name:       "no headers",
			give:       "\r\nbody",
			wantHeader: nil,
			wantBody:   "body",
		},
		{
			name:       "headers only",
			give:       "Content-Type: text/plain\r\n",
			wantHeader: as2.Header{{"Content-Type", "text/plain"}},
			wantBody:   "",
		},
		{
			name:       "multipart with preamble, epilogue and a boundary prefix",
			give:       "Content-Type: multipart/mixed; boundary=\"b1\"\r\n\r\npreamble\r\n--b1\r\n\r\none\n\r\n--b1x not a boundary\r\n--b1\t \r\nX: y\r\n\r\ntwo\r\n--b1--\r\nepilogue",
			wantHeader: as2.Header{{"Content-Type", "multipart/mixed; boundary=\"b1\""}},
			wantBody:   "preamble\r\n--b1\r\n\r\none\n\r\n--b1x not a boundary\r\n--b1\t \r\nX: y\r\n\r\ntwo\r\n--b1--\r\nepilogue",
			wantParts:  []string{"\r\none\n\r\n--b1x not a boundary", "X: y\r\n\r\ntwo"},
		},
		{
			name:       "multipart with bare LF and missing close delimiter",
			give:       "Content-Type: multipart/mixed; boundary=b\n\n--b\n\nfirst\n--b\n\nsecond\n",
			wantHeader: as2.Header{{"Content-Type", "multipart/mixed; boundary=b"}},
			wantBody:   "--b\n\nfirst\n--b\n\nsecond\n",
			wantParts:  []string{"\nfirst", "\nsecond\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := as2.ParseEntity([]byte(tt.give), as2.Limits{})
			if err != nil {
				t.Fatalf("ParseEntity() error = %v", err)
			}
			if diff := cmp.Diff(tt.wantHeader, e.Header); diff != "" {
				t.Errorf("ParseEntity().Header mismatch (-want +got):\n%s", diff)
			}
			if string(e.Body) != tt.wantBody {
				t.Errorf("ParseEntity().Body = %q, want %q", e.Body, tt.wantBody)
			}
			if string(e.Raw) != tt.give {
				t.Errorf("ParseEntity().Raw = %q, want the input", e.Raw)
			}
			var parts []string
			for _, p := range e.Parts {
				parts = append(parts, string(p.Raw))
			}
			if diff := cmp.Diff(tt.wantParts, parts); diff != "" {
				t.Errorf("ParseEntity().Parts mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodedBody(t *testing.T) {
	tests := []struct {
		name    string
		give    string
		want    string
		wantErr bool
	}{
		{name: "missing CTE is binary", give: "Content-Type: a/b\r\n\r\n\x00\xff=41\r\n", want: "\x00\xff=41\r\n"},
		{name: "binary", give: "Content-Transfer-Encoding: BINARY\r\n\r\nxyz", want: "xyz"},
		{name: "8bit", give: "Content-Transfer-Encoding: 8bit\r\n\r\n\xe9", want: "\xe9"},
		{name: "base64 lines", give: "Content-Transfer-Encoding: base64\r\n\r\naGVs\r\nbG8=\r\n", want: "hello"},
		{name: "base64 no padding", give: "Content-Transfer-Encoding: Base64\r\n\r\naGVsbG8", want: "hello"},
		{name: "quoted-printable", give: "Content-Transfer-Encoding: quoted-printable\r\n\r\na=3Db=\r\nc", want: "a=bc"},
		{name: "bad base64", give: "Content-Transfer-Encoding: base64\r\n\r\n!!!!", wantErr: true},
		{name: "unknown", give: "Content-Transfer-Encoding: x-uuencode\r\n\r\nabc", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := as2.ParseEntity([]byte(tt.give), as2.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			got, err := e.DecodedBody()
			if (err != nil) != tt.wantErr || string(got) != tt.want {
				t.Errorf("DecodedBody() = %q, %v; want %q, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseEntityLimits(t *testing.T) {
	nested := "Content-Type: multipart/mixed; boundary=b0\r\n\r\n--b0\r\n"
	for i := 1; i < 30; i++ {
		nested += "Content-Type: multipart/mixed; boundary=b" + strings.Repeat("x", i) + "\r\n\r\n--b" + strings.Repeat("x", i) + "\r\n"
	}
	tests := []struct {
		name string
		give string
		lim  as2.Limits
		want error
	}{
		{name: "header count", give: strings.Repeat("X: y\r\n", 200) + "\r\n", want: as2.ErrLimit},
		{name: "header bytes", give: "X: " + strings.Repeat("y", 70000) + "\r\n\r\n", want: as2.ErrLimit},
		{name: "depth", give: nested, want: as2.ErrLimit},
		{name: "parts", give: "Content-Type: multipart/mixed; boundary=b\r\n\r\n" + strings.Repeat("--b\r\n\r\nx\r\n", 10) + "--b--",
			lim: as2.Limits{MaxParts: 5}, want: as2.ErrLimit},
		{name: "no colon", give: "not a header\r\n\r\n", want: as2.ErrMalformedMIME},
		{name: "leading continuation", give: " folded\r\n\r\n", want: as2.ErrMalformedMIME},
		{name: "no boundary", give: "Content-Type: multipart/mixed\r\n\r\n", want: as2.ErrMalformedMIME},
		{name: "boundary never found", give: "Content-Type: multipart/mixed; boundary=zz\r\n\r\nbody", want: as2.ErrMalformedMIME},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := as2.ParseEntity([]byte(tt.give), tt.lim)
			if !errors.Is(err, tt.want) {
				t.Errorf("ParseEntity() error = %v, want %v", err, tt.want)
			}
		})
	}
}

// foldedHeader is a header whose X-Long field has n continuation lines.
func foldedHeader(n int) ([]byte, string) {
	var b, want strings.Builder
	b.WriteString("Content-Type: text/plain\r\nX-Long: v0\r\n")
	want.WriteString("v0")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, " \tv%d \r\n", i)
		fmt.Fprintf(&want, " \tv%d", i)
	}
	b.WriteString("\t \r\nX-After: a\r\n\r\nbody")
	return []byte(b.String()), want.String()
}

func TestParseEntityManyContinuationLines(t *testing.T) {
	raw, want := foldedHeader(20000)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	e, err := as2.ParseEntity(raw, as2.Limits{MaxHeaderBytes: len(raw)})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("ParseEntity() error = %v", err)
	}
	// Unfolding line by line copies the value once per line (quadratic:
	// hundreds of MiB here); joined once it is a few times the input.
	if got := after.TotalAlloc - before.TotalAlloc; got > 16*uint64(len(raw)) {
		t.Errorf("ParseEntity(%d bytes, 20000 continuation lines) allocated %d bytes, want at most %d", len(raw), got, 16*len(raw))
	}
	if got := e.Header.Get("X-Long"); got != want {
		t.Errorf("X-Long = %d bytes %.40q..., want %d bytes %.40q...", len(got), got, len(want), want)
	}
	if got := e.Header.Get("X-After"); got != "a" {
		t.Errorf("X-After = %q, want %q", got, "a")
	}
	if string(e.Body) != "body" {
		t.Errorf("Body = %q, want %q", e.Body, "body")
	}
}

func TestParseEntityFoldedValues(t *testing.T) {
	tests := []struct {
		give string
		want string
	}{
		{"X: a\r\n b\r\n\r\n", "a b"},
		{"X:\r\n b\r\n\r\n", "b"},
		{"X: a  \r\n   \r\n c \r\n\r\n", "a c"},
		{"X: a\r\n\tb\r\n  c", "a\tb  c"},
	}
	for _, tt := range tests {
		e, err := as2.ParseEntity([]byte(tt.give), as2.Limits{})
		if err != nil {
			t.Fatalf("ParseEntity(%q) error = %v", tt.give, err)
		}
		if got := e.Header.Get("X"); got != tt.want {
			t.Errorf("ParseEntity(%q) X = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func BenchmarkParseEntityContinuationLines(b *testing.B) {
	raw, _ := foldedHeader(20000)
	lim := as2.Limits{MaxHeaderBytes: len(raw)}
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		if _, err := as2.ParseEntity(raw, lim); err != nil {
			b.Fatal(err)
		}
	}
}
