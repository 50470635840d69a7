package edi_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/testenv/edioracle"
)

var indent = regexp.MustCompile(`(?m)^[ \t]+`)

// rawSegments lists each segment as its tag and its elements written
// back, repetitions and components joined with the interchange's
// delimiters (X12) or, for EDIFACT, the first repetition's components
// joined with ':' after unescaping, as the independent readers give them.
func rawSegments(t *testing.T, doc string) (segs [][]string) {
	t.Helper()
	sr, err := edi.NewSegmentReader(strings.NewReader(doc), edi.SegmentReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		s, err := sr.Next()
		if errors.Is(err, io.EOF) {
			return segs
		}
		if err != nil {
			t.Fatalf("Next = %v", err)
		}
		d := sr.Delimiters()
		row := []string{s.Tag}
		for i := 1; i <= s.Len(); i++ {
			e := s.Element(i)
			var reps []string
			for r := 0; r < e.Repetitions(); r++ {
				var comps []string
				for c := 1; c <= e.Repetition(r).Components(); c++ {
					comps = append(comps, string(e.Repetition(r).Component(c)))
				}
				sep := string(d.Component)
				if sr.Standard() == edi.EDIFACT {
					sep = ":"
				}
				reps = append(reps, strings.Join(comps, sep))
			}
			row = append(row, strings.Join(reps, string(d.Repetition)))
		}
		segs = append(segs, row)
	}
}

// TestSegmentReaderOracle reads published and generated interchanges with
// SegmentReader and with the independent readers (node-x12's segment
// parser; edifact's reader, for the segments of each message) and
// compares every segment and element.
func TestSegmentReaderOracle(t *testing.T) {
	o := edioracle.New(t)
	var x12Docs, edifactDocs []string
	files, _ := filepath.Glob("testdata/*.edi")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(filepath.Base(f), "x12") {
			x12Docs = append(x12Docs, string(b))
		} else {
			edifactDocs = append(edifactDocs, string(b))
		}
	}
	// Repetitions and composites, as an 837 carries them.
	x12Docs = append(x12Docs, "ISA*00*          *00*          *ZZ*A              *ZZ*B              *260101*1200*^*00501*000000001*0*P*:~\n"+
		"GS*HC*A*B*20260101*1200*1*X*005010X222A1~\nST*837*0001*005010X222A1~\nHI*ABK:J449^ABF:R05^^ABF:M54:X~\n"+
		"SV1*HC:99213:25*125*UN*1***1:2~\nSE*4*0001~\nGE*1*1~\nIEA*1*000000001~\n")
	for _, opts := range []map[string]any{
		{"elementDelimiter": "*", "segmentTerminator": "~", "subElementDelimiter": ">", "endOfLine": "\r\n", "format": true},
		{"elementDelimiter": "|", "segmentTerminator": "\n", "subElementDelimiter": "^"},
		{"elementDelimiter": "*", "segmentTerminator": "'", "subElementDelimiter": ":", "repetitionDelimiter": "^"},
	} {
		var doc string
		o.Call(t, x12Spec(opts, "000000042", 2, 3), &doc)
		x12Docs = append(x12Docs, doc)
	}
	for _, doc := range x12Docs {
		// node-x12 reads no segment after an indented line (the
		// indentation is whitespace between segments, which SegmentReader
		// skips), and reads ISA13 and IEA02 as numbers.
		var want [][]string
		o.Call(t, map[string]any{"op": "x12-segments", "document": indent.ReplaceAllString(doc, "")}, &want)
		got := rawSegments(t, doc)
		for _, s := range got {
			switch {
			case s[0] == "ISA" && len(s) > 13:
				s[13] = strings.TrimLeft(s[13], "0")
			case s[0] == "IEA" && len(s) > 2:
				s[2] = strings.TrimLeft(s[2], "0")
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("segments of %q (-node-x12 +SegmentReader):\n%s", doc, diff)
		}
	}

	acme := edi.Party{ID: "ACME|EU", Qualifier: "ZZ"}
	edifactDocs = append(edifactDocs,
		una{component: '^', element: '|', decimal: ',', release: '!', reserved: ' ', terminator: '~', eol: "\r\n"}.write(
			edifactSpec{syntax: "UNOC:3", sender: acme, receiver: acme, control: "IC|1!", groups: []groupSpec{{messages: []string{"ORDERS", "INVOIC"}}}}),
		una{component: ':', element: '+', decimal: '.', release: '?', reserved: ' ', terminator: '\'', noUNA: true}.write(
			edifactSpec{syntax: "UNOC:3", sender: acme, receiver: acme, control: "7", groups: []groupSpec{{id: "G1", fid: "ORDERS", sender: acme, receiver: acme, messages: []string{"ORDERS"}}}}),
	)
	for _, doc := range edifactDocs {
		var ics []struct {
			Groups []struct {
				Sets []struct {
					Body [][]string `json:"body"`
				} `json:"sets"`
			} `json:"groups"`
		}
		o.Call(t, map[string]any{"op": "edifact-parse", "document": doc}, &ics)
		var want [][]string
		for _, ic := range ics {
			for _, g := range ic.Groups {
				for _, s := range g.Sets {
					want = append(want, s.Body...)
				}
			}
		}
		var got [][]string
		in := false
		for _, s := range rawSegments(t, doc) {
			switch s[0] {
			case "UNH":
				in = true
			case "UNT":
				in = false
			default:
				if in {
					got = append(got, s)
				}
			}
		}
		if len(want) == 0 {
			t.Fatalf("edifact read no message segments from %q", doc)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("message segments of %q (-edifact +SegmentReader):\n%s", doc, diff)
		}
	}
}
