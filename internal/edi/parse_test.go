package edi_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/testenv/edioracle"
)

// The summary shapes are the ones oracle.js answers with, so that the
// independent parser and edi.Parse are compared field by field.
type sumSet struct {
	Type     string `json:"type"`
	Control  string `json:"control"`
	Version  string `json:"version"`
	Segments int    `json:"segments"`
	Declared int    `json:"declared"`
}

type sumGroup struct {
	Implicit bool      `json:"implicit,omitempty"`
	FID      string    `json:"fid,omitempty"`
	Sender   edi.Party `json:"sender"`
	Receiver edi.Party `json:"receiver"`
	Control  string    `json:"control,omitempty"`
	Version  string    `json:"version,omitempty"`
	Declared int       `json:"declared,omitempty"`
	Sets     []sumSet  `json:"sets"`
}

type sumIC struct {
	Sender       edi.Party  `json:"sender"`
	Receiver     edi.Party  `json:"receiver"`
	Control      string     `json:"control"`
	Date         string     `json:"date"`
	Time         string     `json:"time"`
	Version      string     `json:"version"`
	Test         bool       `json:"test"`
	AckRequested bool       `json:"ackRequested"`
	Declared     int        `json:"declared"`
	Groups       []sumGroup `json:"groups"`
}

// summarize turns a Document into the oracle's shape. X12 interchange
// control numbers lose their leading zeros there: node-x12 reads ISA13 as
// a number.
func summarize(doc *edi.Document) []sumIC {
	var out []sumIC
	for _, ic := range doc.Interchanges {
		s := sumIC{
			Sender: ic.Sender, Receiver: ic.Receiver, Control: ic.ControlNumber,
			Date: ic.Date, Time: ic.Time, Version: ic.Version, Test: ic.Test,
			AckRequested: ic.AckRequested, Declared: ic.DeclaredCount,
		}
		if doc.Standard == edi.X12 {
			s.Control = strings.TrimLeft(s.Control, "0")
		}
		for _, g := range ic.Groups {
			sg := sumGroup{
				Implicit: g.Implicit, FID: g.FunctionalID, Sender: g.Sender, Receiver: g.Receiver,
				Control: g.ControlNumber, Version: g.Version, Sets: []sumSet{},
			}
			if !g.Implicit {
				sg.Declared = g.DeclaredCount
			}
			for _, t := range g.Sets {
				sg.Sets = append(sg.Sets, sumSet{Type: t.Type, Control: t.ControlNumber, Version: t.Version, Segments: t.Segments, Declared: t.DeclaredCount})
			}
			s.Groups = append(s.Groups, sg)
		}
		out = append(out, s)
	}
	return out
}

func oracleParse(t *testing.T, std edi.Standard, doc []byte) []sumIC {
	t.Helper()
	op := map[edi.Standard]string{edi.X12: "x12-parse", edi.EDIFACT: "edifact-parse"}[std]
	var got []sumIC
	edioracle.New(t).Call(t, map[string]any{"op": op, "document": string(doc)}, &got)
	for i := range got {
		for j := range got[i].Groups {
			if got[i].Groups[j].Sets == nil {
				got[i].Groups[j].Sets = []sumSet{}
			}
		}
	}
	return got
}

func mustParse(t *testing.T, b []byte) *edi.Document {
	t.Helper()
	doc, err := edi.Parse(bytes.NewReader(b), edi.Limits{})
	if err != nil {
		t.Fatalf("Parse = %v, want no error", err)
	}
	return doc
}

// TestParsePublished parses the published examples in testdata (sources in
// testdata/SOURCES.md) and compares every envelope value with the values
// the independent parser reads from the same bytes, and the key values
// with the ones printed in the source.
func TestParsePublished(t *testing.T) {
	tests := []struct {
		file     string
		std      edi.Standard
		sender   edi.Party
		control  string
		setTypes []string
		test     bool
	}{
		{"x12-850-x12org-004010X357-ex1.edi", edi.X12, edi.Party{Qualifier: "ZZ", ID: "ABCAEROSPACE"}, "000000101", []string{"850"}, false},
		{"x12-850-ibm-sterling-007040.edi", edi.X12, edi.Party{Qualifier: "08", ID: "WALLY"}, "000000002", []string{"850"}, true},
		{"edifact-paores-wikipedia.edi", edi.EDIFACT, edi.Party{Qualifier: "ZZ", ID: "6XPPC"}, "1", []string{"PAORES"}, false},
		{"edifact-orders-release-groups.edi", edi.EDIFACT, edi.Party{Qualifier: "14", ID: "A+B"}, "IC'1", []string{"ORDERS", "ORDERS"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			doc := mustParse(t, b)
			if doc.Standard != tt.std || len(doc.Interchanges) != 1 {
				t.Fatalf("Parse = %s with %d interchanges, want %s with 1", doc.Standard, len(doc.Interchanges), tt.std)
			}
			ic := doc.Interchanges[0]
			if !ic.OK() {
				t.Errorf("Parse: problems %+v, want none", ic)
			}
			var types []string
			for _, g := range ic.Groups {
				for _, s := range g.Sets {
					types = append(types, s.Type)
				}
			}
			if ic.Sender != tt.sender || ic.ControlNumber != tt.control || ic.Test != tt.test || !cmp.Equal(types, tt.setTypes) {
				t.Errorf("Parse = sender %+v control %q test %v sets %v, want %+v %q %v %v", ic.Sender, ic.ControlNumber, ic.Test, types, tt.sender, tt.control, tt.test, tt.setTypes)
			}
			if diff := cmp.Diff(oracleParse(t, tt.std, b), summarize(doc)); diff != "" {
				t.Errorf("Parse differs from the independent parser (-oracle +edi):\n%s", diff)
			}
		})
	}
}

// x12Spec is a document for node-x12's generator.
func x12Spec(opts map[string]any, icn string, groups int, sets int) map[string]any {
	isa := []string{"00", "          ", "00", "          ", "ZZ", "SENDER ID      ", "01", "RECEIVER       ", "260102", "0930", "U", "00401", icn, "0", "P", ">"}
	if c, ok := opts["subElementDelimiter"].(string); ok {
		isa[15] = c
	}
	if r, ok := opts["repetitionDelimiter"].(string); ok {
		isa[10], isa[11] = r, "00501"
	}
	var gs []map[string]any
	for g := 1; g <= groups; g++ {
		var ss []map[string]any
		for s := 1; s <= sets; s++ {
			ss = append(ss, map[string]any{
				"st":       []string{"850", fmt.Sprintf("%04d", s)},
				"segments": [][]string{{"BEG", "00", "SA", fmt.Sprintf("PO%d-%d", g, s), "", "20260102"}, {"PO1", "1", "2", "EA", "9.5"}, {"CTT", "1"}},
			})
		}
		gs = append(gs, map[string]any{
			"gs":   []string{"PO", "SENDERAPP", "RECVAPP", "20260102", "0930", fmt.Sprint(1000 + g), "X", "004010"},
			"sets": ss,
		})
	}
	return map[string]any{"op": "x12-build", "options": opts, "isa": isa, "groups": gs}
}

// TestParseOracleBuilt parses interchanges written by node-x12's generator
// with different delimiters and line breaks, and compares the envelope
// values with what node-x12 reads back.
func TestParseOracleBuilt(t *testing.T) {
	tests := []struct {
		name   string
		opts   map[string]any
		groups int
		sets   int
	}{
		{"tilde star", map[string]any{"elementDelimiter": "*", "segmentTerminator": "~", "subElementDelimiter": ">"}, 1, 1},
		{"tilde with CRLF", map[string]any{"elementDelimiter": "*", "segmentTerminator": "~", "subElementDelimiter": ":", "endOfLine": "\r\n", "format": true}, 2, 3},
		{"pipe and newline terminator", map[string]any{"elementDelimiter": "|", "segmentTerminator": "\n", "subElementDelimiter": "^"}, 3, 2},
		{"repetition separator 00501", map[string]any{"elementDelimiter": "*", "segmentTerminator": "'", "subElementDelimiter": ":", "repetitionDelimiter": "^", "endOfLine": "\n", "format": true}, 1, 5},
	}
	o := edioracle.New(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var doc string
			o.Call(t, x12Spec(tt.opts, "000004711", tt.groups, tt.sets), &doc)
			got := mustParse(t, []byte(doc))
			if len(got.Interchanges) != 1 || !got.Interchanges[0].OK() {
				t.Fatalf("Parse(%q) = %+v, want one interchange without problems", doc, got)
			}
			ic := got.Interchanges[0]
			if ic.GroupCount != tt.groups || len(ic.Groups[0].Sets) != tt.sets || ic.ControlNumber != "000004711" {
				t.Errorf("Parse = %d groups, %d sets, ICN %q; want %d, %d, 000004711", ic.GroupCount, len(ic.Groups[0].Sets), ic.ControlNumber, tt.groups, tt.sets)
			}
			if diff := cmp.Diff(oracleParse(t, edi.X12, []byte(doc)), summarize(got)); diff != "" {
				t.Errorf("Parse differs from node-x12 (-oracle +edi):\n%s", diff)
			}
		})
	}
}

func TestDetect(t *testing.T) {
	tests := []struct {
		give string
		want edi.Standard
	}{
		{"ISA*00*", edi.X12},
		{"\xef\xbb\xbf\r\n  ISA|00|", edi.X12},
		{"UNA:+.? 'UNB+", edi.EDIFACT},
		{"UNB+UNOC:3+", edi.EDIFACT},
		{"<?xml version=\"1.0\"?><Order/>", ""},
		{"id,name,qty\n1,ISA,2\n", ""},
		{"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", ""},
		{"ISAAC NEWTON", ""},
		{"UNBELIEVABLE", ""},
		{"", ""},
	}
	for _, tt := range tests {
		got, err := edi.Detect(bufio.NewReader(strings.NewReader(tt.give)))
		if got != tt.want || (tt.want == "") != errors.Is(err, edi.ErrNotEDI) {
			t.Errorf("Detect(%q) = %q, %v; want %q", tt.give, got, err, tt.want)
		}
	}
}

// TestDetectReadsLittle: a large non-EDI document is told apart from its
// first bytes; Parse does not read it.
func TestDetectReadsLittle(t *testing.T) {
	r := &countingReader{r: bytes.NewReader(append([]byte("%PDF-1.7\n"), make([]byte, 10<<20)...))}
	if _, err := edi.Parse(r, edi.Limits{}); !errors.Is(err, edi.ErrNotEDI) {
		t.Fatalf("Parse(PDF) = %v, want ErrNotEDI", err)
	}
	if r.n > 8192 {
		t.Errorf("Parse(PDF) read %d bytes, want at most 8192", r.n)
	}
}

type countingReader struct {
	r *bytes.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestParseProblems(t *testing.T) {
	const isa = "ISA*00*          *00*          *ZZ*A              *ZZ*B              *260101*1200*U*00401*000000001*0*P*>~"
	const unb = "UNB+UNOC:3+A:14+B:14+260101:1200+R1'"
	type where struct{ ic, group, set []edi.Problem }
	tests := []struct {
		name string
		give string
		want where
	}{
		{"x12 fine", isa + "GS*PO*A*B*20260101*1200*1*X*004010~ST*850*0001~BEG*00~SE*3*0001~GE*1*1~IEA*1*000000001~", where{}},
		{"x12 segment count", isa + "GS*PO*A*B*20260101*1200*1*X*004010~ST*850*0001~BEG*00~SE*4*0001~GE*1*1~IEA*1*000000001~", where{set: []edi.Problem{edi.ProblemCountMismatch}}},
		{"x12 set control", isa + "GS*PO*A*B*20260101*1200*1*X*004010~ST*850*0001~SE*2*0002~GE*1*1~IEA*1*000000001~", where{set: []edi.Problem{edi.ProblemControlMismatch}}},
		{"x12 group count and control", isa + "GS*PO*A*B*20260101*1200*1*X*004010~ST*850*0001~SE*2*0001~GE*2*9~IEA*1*000000001~", where{group: []edi.Problem{edi.ProblemCountMismatch, edi.ProblemControlMismatch}}},
		{"x12 interchange trailer", isa + "GS*PO*A*B*20260101*1200*1*X*004010~ST*850*0001~SE*2*0001~GE*1*1~IEA*2*000000002~", where{ic: []edi.Problem{edi.ProblemCountMismatch, edi.ProblemControlMismatch}}},
		{"x12 truncated", isa + "GS*PO*A*B*20260101*1200*1*X*004010~ST*850*0001~BEG*00~", where{ic: []edi.Problem{edi.ProblemTrailerMissing}, group: []edi.Problem{edi.ProblemTrailerMissing}, set: []edi.Problem{edi.ProblemTrailerMissing}}},
		{"x12 set outside group", isa + "ST*850*0001~SE*2*0001~IEA*0*000000001~", where{ic: []edi.Problem{edi.ProblemStructure, edi.ProblemCountMismatch}}},
		{"edifact fine", unb + "UNH+1+ORDERS:D:96A:UN'BGM+220'UNT+3+1'UNZ+1+R1'", where{}},
		{"edifact message count", unb + "UNH+1+ORDERS:D:96A:UN'BGM+220'UNT+3+1'UNZ+2+R1'", where{ic: []edi.Problem{edi.ProblemCountMismatch}}},
		{"edifact segment count", unb + "UNH+1+ORDERS:D:96A:UN'BGM+220'UNT+2+1'UNZ+1+R1'", where{set: []edi.Problem{edi.ProblemCountMismatch}}},
		{"edifact group", unb + "UNG+ORDERS+A+B+260101:1200+G1+UN+D:96A'UNH+1+ORDERS:D:96A:UN'UNT+2+1'UNE+2+G2'UNZ+1+R1'", where{group: []edi.Problem{edi.ProblemCountMismatch, edi.ProblemControlMismatch}}},
		{"edifact no UNZ", unb + "UNH+1+ORDERS:D:96A:UN'UNT+2+1'", where{ic: []edi.Problem{edi.ProblemTrailerMissing}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := mustParse(t, []byte(tt.give))
			ic := doc.Interchanges[0]
			got := where{ic: ic.Problems}
			if len(ic.Groups) > 0 {
				got.group = ic.Groups[0].Problems
				if len(ic.Groups[0].Sets) > 0 {
					got.set = ic.Groups[0].Sets[0].Problems
				}
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(where{})); diff != "" {
				t.Errorf("Parse(%q) problems (-want +got):\n%s", tt.give, diff)
			}
			if ic.OK() != (len(tt.want.ic)+len(tt.want.group)+len(tt.want.set) == 0) {
				t.Errorf("OK() = %v with problems %+v", ic.OK(), tt.want)
			}
		})
	}
}

// TestParseLimits: past the limits counts stay exact while nothing more
// is recorded; an overlong envelope segment is a SyntaxError, an overlong
// content segment is skipped.
func TestParseLimits(t *testing.T) {
	var b strings.Builder
	b.WriteString("UNB+UNOC:3+A:14+B:14+260101:1200+R1'")
	for i := 1; i <= 50; i++ {
		fmt.Fprintf(&b, "UNH+%d+ORDERS:D:96A:UN'FTX+AAI+++%s'UNT+3+%d'", i, strings.Repeat("x", 100000), i)
	}
	b.WriteString("UNZ+50+R1'")
	doc, err := edi.Parse(strings.NewReader(b.String()), edi.Limits{MaxSets: 10, MaxSegment: 256})
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	ic := doc.Interchanges[0]
	if !doc.Truncated || ic.Groups[0].SetCount != 50 || len(ic.Groups[0].Sets) != 10 || !ic.OK() {
		t.Errorf("Parse = truncated %v, %d sets counted, %d recorded, problems %v; want true, 50, 10, none", doc.Truncated, ic.Groups[0].SetCount, len(ic.Groups[0].Sets), ic.Problems)
	}
	long := "UNB+UNOC:3+" + strings.Repeat("A", 300) + ":14+B:14+260101:1200+R1'"
	var se *edi.SyntaxError
	if _, err := edi.Parse(strings.NewReader(long), edi.Limits{MaxSegment: 256}); !errors.As(err, &se) {
		t.Errorf("Parse(300-byte UNB, limit 256) = %v, want a SyntaxError", err)
	}
}

// TestParseChunking: the result does not depend on how the reader hands
// out bytes (the receive path streams).
func TestParseChunking(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.edi")
	for _, f := range files {
		b, _ := os.ReadFile(f)
		want := mustParse(t, b)
		got, err := edi.Parse(iotest.OneByteReader(bytes.NewReader(b)), edi.Limits{})
		if err != nil || !cmp.Equal(want, got) {
			t.Errorf("Parse(%s, one byte at a time) = %v, differs: %s", f, err, cmp.Diff(want, got))
		}
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.edi")
	for _, p := range files {
		b, _ := os.ReadFile(p)
		f.Add(b)
	}
	f.Add([]byte("UNA:+.? 'UNB+UNOC:3+A+B+1:1+1'UNG+X+A+B+1:1+1'UNH+1+X'UNT+2+1'UNE+1+1'UNZ+1+1'"))
	f.Fuzz(func(t *testing.T, b []byte) {
		lim := edi.Limits{MaxSegment: 64, MaxInterchanges: 3, MaxGroups: 3, MaxSets: 5, MaxAckEntries: 3}
		doc, err := edi.Parse(bytes.NewReader(b), lim)
		if errors.Is(err, edi.ErrNotEDI) {
			return
		}
		again, err2 := edi.Parse(iotest.OneByteReader(bytes.NewReader(b)), lim)
		if fmt.Sprint(err) != fmt.Sprint(err2) || !cmp.Equal(doc, again) {
			t.Fatalf("Parse depends on read sizes: %v / %v\n%s", err, err2, cmp.Diff(doc, again))
		}
		if len(doc.Interchanges) > lim.MaxInterchanges {
			t.Fatalf("Parse recorded %d interchanges, limit %d", len(doc.Interchanges), lim.MaxInterchanges)
		}
		sets := 0
		for _, ic := range doc.Interchanges {
			if len(ic.Groups) > lim.MaxGroups || ic.GroupCount < len(ic.Groups) {
				t.Fatalf("Parse: %d groups recorded of %d counted, limit %d", len(ic.Groups), ic.GroupCount, lim.MaxGroups)
			}
			for _, g := range ic.Groups {
				sets += len(g.Sets)
				if g.SetCount < len(g.Sets) {
					t.Fatalf("Parse: %d sets recorded of %d counted", len(g.Sets), g.SetCount)
				}
			}
		}
		if sets > lim.MaxSets {
			t.Fatalf("Parse recorded %d sets, limit %d", sets, lim.MaxSets)
		}
	})
}

// bigX12 is an interchange of n 850s, built once.
func bigX12(n int) []byte {
	var b bytes.Buffer
	b.WriteString("ISA*00*          *00*          *ZZ*A              *ZZ*B              *260101*1200*U*00401*000000001*0*P*>~\n")
	b.WriteString("GS*PO*A*B*20260101*1200*1*X*004010~\n")
	for i := range n {
		fmt.Fprintf(&b, "ST*850*%04d~\nBEG*00*SA*PO%d**20260101~\n", i%10000, i)
		for range 20 {
			b.WriteString("PO1*1*48*EA*3*PE*MG*R5656-2*VN*1234567890*UP*012345678905~\n")
		}
		b.WriteString("CTT*20~\nSE*24*" + fmt.Sprintf("%04d", i%10000) + "~\n")
	}
	fmt.Fprintf(&b, "GE*%d*1~\nIEA*1*000000001~\n", n)
	return b.Bytes()
}

// BenchmarkParse reads a 10,000-set interchange (about 14 MB): the
// throughput of the envelope parser, and its allocations, which do not
// grow with the content segments.
func BenchmarkParse(b *testing.B) {
	doc := bigX12(10000)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := edi.Parse(bytes.NewReader(doc), edi.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseISADelimiters: the repetition separator is ISA11 from version
// 00402 on, the first version with one; before it ISA11 is the standards
// identifier (U) and no byte there is a repetition separator. An ISA whose
// element and component separators are the same byte cannot be read
// (a composite would split into elements) and is refused.
func TestParseISADelimiters(t *testing.T) {
	isa := func(isa11, version, isa16 string) string {
		return "ISA*00*          *00*          *ZZ*A              *ZZ*B              *260101*1200*" + isa11 + "*" + version + "*000000001*0*P*" + isa16 + "~" +
			"GS*PO*A*B*20260101*1200*1*X*004010~ST*850*0001~BEG*00~SE*3*0001~GE*1*1~IEA*1*000000001~"
	}
	tests := []struct {
		name string
		give string
		want edi.Delimiters
	}{
		{"00401 standards identifier", isa("U", "00401", ">"), edi.Delimiters{Element: '*', Component: '>', Segment: '~'}},
		{"00401 punctuation in ISA11", isa("^", "00401", ">"), edi.Delimiters{Element: '*', Component: '>', Segment: '~'}},
		{"00402 repetition separator", isa("^", "00402", ">"), edi.Delimiters{Element: '*', Component: '>', Segment: '~', Repetition: '^'}},
		{"00501 repetition separator", isa("!", "00501", ":"), edi.Delimiters{Element: '*', Component: ':', Segment: '~', Repetition: '!'}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := mustParse(t, []byte(tt.give))
			if got := doc.Interchanges[0].Delimiters; got != tt.want {
				t.Errorf("Parse(%q).Delimiters = %+v, want %+v", tt.give, got, tt.want)
			}
		})
	}

	same := isa("^", "00501", "*")
	var se *edi.SyntaxError
	if _, err := edi.Parse(strings.NewReader(same), edi.Limits{}); !errors.As(err, &se) {
		t.Errorf("Parse(%q) error = %v, want a SyntaxError: the component separator is the element separator", same, err)
	}
}
