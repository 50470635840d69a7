package edi_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/edi"
)

// seg is a segment as a test writes it: the tag, then each element's
// repetitions, each a list of components.
type seg struct {
	Tag      string
	Elements [][][]string
	Index    int64
	SetPos   int
}

func readAll(t testing.TB, r io.Reader, opts edi.SegmentReaderOptions) ([]seg, error) {
	t.Helper()
	sr, err := edi.NewSegmentReader(r, opts)
	if err != nil {
		t.Fatalf("NewSegmentReader = %v", err)
	}
	var out []seg
	for {
		s, err := sr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, toSeg(s))
	}
}

func toSeg(s *edi.Segment) seg {
	g := seg{Tag: s.Tag, Index: s.Index, SetPos: s.SetPosition}
	for i := 1; i <= s.Len(); i++ {
		e := s.Element(i)
		var reps [][]string
		for r := 0; r < e.Repetitions(); r++ {
			rep := e.Repetition(r)
			var comps []string
			for c := 1; c <= rep.Components(); c++ {
				comps = append(comps, string(rep.Component(c)))
			}
			reps = append(reps, comps)
		}
		g.Elements = append(g.Elements, reps)
	}
	return g
}

// v is one element of one repetition of the given components.
func v(comps ...string) [][]string { return [][]string{comps} }

const isa00401 = "ISA*00*          *00*          *ZZ*A              *ZZ*B              *260101*1200*U*00401*000000001*0*P*>~"

func isaElems(isa11, version, isa16 string) [][][]string {
	return [][][]string{v("00"), v("          "), v("00"), v("          "), v("ZZ"), v("A              "), v("ZZ"), v("B              "),
		v("260101"), v("1200"), v(isa11), v(version), v("000000001"), v("0"), v("P"), v(isa16)}
}

func TestSegmentReader(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []seg
	}{
		{"x12 elements, composites, empty elements, CRLF",
			isa00401 + "\r\nGS*PO*A*B~\r\nST*850*0001~\r\nPO1*1**EA*9.5*PE>X>>Y~\r\nREF*ZZ~\r\nSE*4*0001~\r\nGE*1*1~\r\nIEA*1*000000001~\r\n",
			[]seg{
				{Tag: "ISA", Elements: isaElems("U", "00401", ">"), Index: 1},
				{Tag: "GS", Elements: [][][]string{v("PO"), v("A"), v("B")}, Index: 2},
				{Tag: "ST", Elements: [][][]string{v("850"), v("0001")}, Index: 3, SetPos: 1},
				{Tag: "PO1", Elements: [][][]string{v("1"), v(""), v("EA"), v("9.5"), v("PE", "X", "", "Y")}, Index: 4, SetPos: 2},
				{Tag: "REF", Elements: [][][]string{v("ZZ")}, Index: 5, SetPos: 3},
				{Tag: "SE", Elements: [][][]string{v("4"), v("0001")}, Index: 6, SetPos: 4},
				{Tag: "GE", Elements: [][][]string{v("1"), v("1")}, Index: 7},
				{Tag: "IEA", Elements: [][][]string{v("1"), v("000000001")}, Index: 8},
			}},
		{"x12 00501 repetitions, other delimiters, no line breaks",
			"ISA|00|          |00|          |ZZ|A              |ZZ|B              |260101|1200|^|00501|000000001|0|P|:\nST|835|1\nNM1|QC|1|A^B:C^|\nSE|3|1\n",
			[]seg{
				{Tag: "ISA", Elements: isaElems("^", "00501", ":"), Index: 1},
				{Tag: "ST", Elements: [][][]string{v("835"), v("1")}, Index: 2, SetPos: 1},
				{Tag: "NM1", Elements: [][][]string{v("QC"), v("1"), {{"A"}, {"B", "C"}, {""}}, v("")}, Index: 3, SetPos: 2},
				{Tag: "SE", Elements: [][][]string{v("3"), v("1")}, Index: 4, SetPos: 3},
			}},
		{"x12 00401: ISA11 is no repetition separator",
			strings.Replace(isa00401, "*U*", "*^*", 1) + "N1*A^B~",
			[]seg{
				{Tag: "ISA", Elements: isaElems("^", "00401", ">"), Index: 1},
				{Tag: "N1", Elements: [][][]string{v("A^B")}, Index: 2},
			}},
		{"edifact defaults, release characters, segment without elements",
			"UNB+UNOC:3+A?+B:14+C+260101:1200+R?'1'UNH+1+ORDERS:D:96A:UN'FTX+AAI+++A?:B?+C???'D'ODI'UNT+4+1'UNZ+1+R?'1'",
			[]seg{
				{Tag: "UNB", Elements: [][][]string{v("UNOC", "3"), v("A+B", "14"), v("C"), v("260101", "1200"), v("R'1")}, Index: 1},
				{Tag: "UNH", Elements: [][][]string{v("1"), v("ORDERS", "D", "96A", "UN")}, Index: 2, SetPos: 1},
				{Tag: "FTX", Elements: [][][]string{v("AAI"), v(""), v(""), v("A:B+C?'D")}, Index: 3, SetPos: 2},
				{Tag: "ODI", Index: 4, SetPos: 3},
				{Tag: "UNT", Elements: [][][]string{v("4"), v("1")}, Index: 5, SetPos: 4},
				{Tag: "UNZ", Elements: [][][]string{v("1"), v("R'1")}, Index: 6},
			}},
		{"edifact UNA with other characters and a repetition separator",
			"\xef\xbb\xbfUNA^|,!*~\nUNB|UNOC^4|A|B|260101^1200|1~\nUNH|1|X~\nNAD|BY|A*B^C!*D~\nUNT|3|1~\nUNZ|1|1~\n",
			[]seg{
				{Tag: "UNA", Elements: [][][]string{v("^|,!*~")}},
				{Tag: "UNB", Elements: [][][]string{v("UNOC", "4"), v("A"), v("B"), v("260101", "1200"), v("1")}, Index: 1},
				{Tag: "UNH", Elements: [][][]string{v("1"), v("X")}, Index: 2, SetPos: 1},
				{Tag: "NAD", Elements: [][][]string{v("BY"), {{"A"}, {"B", "C*D"}}}, Index: 3, SetPos: 2},
				{Tag: "UNT", Elements: [][][]string{v("3"), v("1")}, Index: 4, SetPos: 3},
				{Tag: "UNZ", Elements: [][][]string{v("1"), v("1")}, Index: 5},
			}},
		{"edifact syntax 4 without UNA: * repeats after the UNB",
			"UNB+UNOC:4+A*1+B+20260101:1200+1'UNH+1+X'NAD+BY+A*B'UNT+3+1'",
			[]seg{
				{Tag: "UNB", Elements: [][][]string{v("UNOC", "4"), v("A*1"), v("B"), v("20260101", "1200"), v("1")}, Index: 1},
				{Tag: "UNH", Elements: [][][]string{v("1"), v("X")}, Index: 2, SetPos: 1},
				{Tag: "NAD", Elements: [][][]string{v("BY"), {{"A"}, {"B"}}}, Index: 3, SetPos: 2},
				{Tag: "UNT", Elements: [][][]string{v("3"), v("1")}, Index: 4, SetPos: 3},
			}},
		{"edifact syntax 3 without UNA: * is data",
			"UNB+UNOC:3+A+B+260101:1200+1'NAD+BY+A*B'",
			[]seg{
				{Tag: "UNB", Elements: [][][]string{v("UNOC", "3"), v("A"), v("B"), v("260101", "1200"), v("1")}, Index: 1},
				{Tag: "NAD", Elements: [][][]string{v("BY"), v("A*B")}, Index: 2},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tt.give), iotest.OneByteReader(strings.NewReader(tt.give))} {
				got, err := readAll(t, r, edi.SegmentReaderOptions{})
				if err != nil {
					t.Fatalf("Next(%q) = %v", tt.give, err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("segments of %q (-want +got):\n%s", tt.give, diff)
				}
			}
		})
	}
}

// TestSegmentReaderLongSegments reads segments longer than the reader's
// buffer, whose released terminators and release characters fall on every
// position of a buffer boundary.
func TestSegmentReaderLongSegments(t *testing.T) {
	value := strings.Repeat("ab?'cd??e?+", 400) // released: ' ? +
	want := strings.Repeat("ab'cd?e+", 400)
	var doc strings.Builder
	doc.WriteString("UNB+UNOC:3+A+B+260101:1200+1'")
	for i := range 40 {
		doc.WriteString("FTX+AAI+++" + strings.Repeat("x", i) + value + "'")
	}
	got, err := readAll(t, bufio.NewReaderSize(strings.NewReader(doc.String()), 1030), edi.SegmentReaderOptions{})
	if err != nil || len(got) != 41 {
		t.Fatalf("Next = %d segments, %v; want 41", len(got), err)
	}
	for i, g := range got[1:] {
		if len(g.Elements) != 4 || g.Elements[3][0][0] != strings.Repeat("x", i)+want {
			t.Fatalf("FTX %d = %v, want its fourth element %d x and the value unescaped", i, g.Elements, i)
		}
	}
}

func TestSegmentReaderErrors(t *testing.T) {
	long := "UNB+UNOC:3+A+B+1:1+1'UNH+1+X'FTX+" + strings.Repeat("y", 300) + "'"
	sr, _ := edi.NewSegmentReader(strings.NewReader(long), edi.SegmentReaderOptions{MaxSegment: 256})
	var err error
	for err == nil {
		_, err = sr.Next()
	}
	var se *edi.SyntaxError
	if !errors.Is(err, edi.ErrSegmentTooLong) || !errors.As(err, &se) || se.Segment != 3 || se.Offset != 29 ||
		!strings.Contains(err.Error(), "256 bytes (MaxSegment)") || !strings.Contains(err.Error(), `"FTX"`) {
		t.Errorf("Next(300-byte FTX, limit 256) = %v, want ErrSegmentTooLong at segment 3, byte 29, naming FTX and the limit", err)
	}
	if _, again := sr.Next(); again != err {
		t.Errorf("Next after an error = %v, want the same error %v", again, err)
	}

	for _, give := range []string{
		"ISA*00*          *00*          *ZZ*A              *ZZ*B              *260101*1200*U*00401*000000001*0*P***",
		"ISA*00*short",
		"UNA:+",
		"UNA:::? 'UNB",
	} {
		if _, err := readAll(t, strings.NewReader(give), edi.SegmentReaderOptions{}); !errors.As(err, &se) {
			t.Errorf("Next(%q) = %v, want a SyntaxError", give, err)
		}
	}
	if _, err := readAll(t, strings.NewReader("%PDF-1.7"), edi.SegmentReaderOptions{}); !errors.Is(err, edi.ErrNotEDI) {
		t.Errorf("Next(PDF) = %v, want ErrNotEDI", err)
	}
	if _, err := edi.NewSegmentReader(strings.NewReader(""), edi.SegmentReaderOptions{MaxSegment: -1}); err == nil || !strings.Contains(err.Error(), "MaxSegment") {
		t.Errorf("NewSegmentReader(MaxSegment -1) = %v, want an error naming MaxSegment", err)
	}
}

// TestSegmentReaderSelect: a rejected segment is skipped at any length,
// past MaxSegment, and still counted in the positions.
func TestSegmentReaderSelect(t *testing.T) {
	doc := isa00401 + "ST*850*1~PO1*" + strings.Repeat("z", 100000) + "~SE*3*1~"
	got, err := readAll(t, strings.NewReader(doc), edi.SegmentReaderOptions{MaxSegment: 128, Select: func(tag string) bool { return tag != "PO1" }})
	if err != nil {
		t.Fatalf("Next = %v", err)
	}
	want := []seg{
		{Tag: "ISA", Elements: isaElems("U", "00401", ">"), Index: 1},
		{Tag: "ST", Elements: [][][]string{v("850"), v("1")}, Index: 2, SetPos: 1},
		{Tag: "PO1", Index: 3, SetPos: 2},
		{Tag: "SE", Elements: [][][]string{v("3"), v("1")}, Index: 4, SetPos: 3},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("segments (-want +got):\n%s", diff)
	}
}

func TestAppendTo(t *testing.T) {
	tests := []struct {
		name string
		give string
		d    edi.Delimiters
		want string // "" for an error
	}{
		{"same delimiters", "UNB+UNOC:3+A?+B+1:1+1'FTX+A?:B?'C??'", edi.EDIFACTDefaults, "FTX+A?:B?'C??'"},
		{"other EDIFACT delimiters", "UNB+UNOC:3+A?+B+1:1+1'FTX+A|B^C+D'", edi.Delimiters{Element: '|', Component: '^', Segment: '~', Release: '!'}, "FTX|A!|B!^C|D~"},
		{"X12 cannot release", "UNB+UNOC:3+A+B+1:1+1'FTX+A*B'", edi.X12Defaults, ""},
		{"repetitions without a separator", "UNB+UNOC:4+A+B+1:1+1'NAD+A*B'", edi.Delimiters{Element: '+', Component: ':', Segment: '\'', Release: '?'}, ""},
	}
	for _, tt := range tests {
		sr, _ := edi.NewSegmentReader(strings.NewReader(tt.give), edi.SegmentReaderOptions{})
		var s *edi.Segment
		for range 2 {
			var err error
			if s, err = sr.Next(); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.AppendTo([]byte("prefix"), tt.d)
		if tt.want == "" {
			if !errors.Is(err, edi.ErrDelimiterInValue) || string(got) != "prefix" {
				t.Errorf("%s: AppendTo = %q, %v; want ErrDelimiterInValue and dst unchanged", tt.name, got, err)
			}
			continue
		}
		if err != nil || string(got) != "prefix"+tt.want {
			t.Errorf("%s: AppendTo = %q, %v; want %q", tt.name, got, err, "prefix"+tt.want)
		}
	}
}

// roundTrip reads doc and writes every segment back with the delimiters
// it was read with, checking each against its bytes in doc.
func roundTrip(t testing.TB, doc []byte, opts edi.SegmentReaderOptions) {
	sr, err := edi.NewSegmentReader(bytes.NewReader(doc), opts)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for {
		s, err := sr.Next()
		if err != nil {
			return
		}
		// The segment's bytes (twice, as a buffer grows) and the positions
		// of its values (16 bytes for each delimiter, twice).
		if n := edi.HeldBytes(sr); n > 40*opts.MaxSegment+1024 {
			t.Fatalf("reader holds %d bytes, MaxSegment %d", n, opts.MaxSegment)
		}
		d := sr.Delimiters()
		raw := doc[s.Offset:sr.Offset()]
		out, err = s.AppendTo(out[:0], d)
		if err != nil {
			if canonical(s.Tag, raw, d) {
				t.Fatalf("AppendTo(%q) = %v", raw, err)
			}
			continue
		}
		if !s.Unterminated && canonical(s.Tag, raw, d) && !bytes.Equal(out, raw) {
			t.Fatalf("segment %q written back as %q", raw, out)
		}
	}
}

// canonical reports whether raw is written the way AppendTo writes it:
// no release character in the tag, and each one in the data releasing a
// delimiter.
func canonical(tag string, raw []byte, d edi.Delimiters) bool {
	if d.Release == 0 || tag == "UNA" {
		return true
	}
	if strings.IndexByte(tag, d.Release) >= 0 {
		return false
	}
	for i := len(tag); i < len(raw); i++ {
		if raw[i] != d.Release {
			continue
		}
		if i+1 >= len(raw) {
			return false
		}
		switch c := raw[i+1]; {
		case c == d.Element, c == d.Component, c == d.Segment, c == d.Release, d.Repetition != 0 && c == d.Repetition:
			i++
		default:
			return false
		}
	}
	return true
}

func FuzzSegmentReader(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.edi")
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Add([]byte("UNA^|,!*~\nUNB|UNOC^4|A|B|260101^1200|1~\nUNH|1|X~\nNAD|BY|A*B^C!*D~\nUNT|3|1~\n"))
	f.Add([]byte("UNB+UNOC:4+A+B+1:1+1'NAD+A*B?*C'"))
	f.Add([]byte("ISA|00|          |00|          |ZZ|A              |ZZ|B              |260101|1200|^|00501|000000001|0|P|:\nST|835|1\nNM1|QC|1|A^B:C^|\nSE|3|1\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, b, edi.SegmentReaderOptions{MaxSegment: 256})
	})
}
