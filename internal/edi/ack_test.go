package edi_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/testenv/edioracle"
)

var ackNow = time.Date(2026, 12, 2, 4, 5, 0, 0, time.UTC)

type oracleSegs struct {
	Groups []struct {
		FID     string `json:"fid"`
		Control string `json:"control"`
		Version string `json:"version"`
		Sets    []struct {
			Type     string     `json:"type"`
			Segments int        `json:"segments"`
			Declared int        `json:"declared"`
			Body     [][]string `json:"body"`
		} `json:"sets"`
		Declared int `json:"declared"`
	} `json:"groups"`
	Sender   edi.Party `json:"sender"`
	Receiver edi.Party `json:"receiver"`
	Declared int       `json:"declared"`
	Control  string    `json:"control"`
}

func readFixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestAcknowledgeX12 answers the published 850 (intact and with a broken
// trailer) with a 997 and a 999, has node-x12 parse each acknowledgement
// and checks its envelope and response segments, and reads the verdict
// back with edi.Parse as the hub does for inbound acknowledgements.
func TestAcknowledgeX12(t *testing.T) {
	good := readFixture(t, "x12-850-x12org-004010X357-ex1.edi")
	bad := bytes.Replace(good, []byte("SE*10*0001"), []byte("SE*11*0001"), 1)
	worse := bytes.Replace(good, []byte("SE*10*0001"), []byte("SE*11*0002"), 1)
	tests := []struct {
		name      string
		give      []byte
		kind      edi.AckKind
		wantBody  [][]string
		want      edi.AckStatus
		wantCodes []string
	}{
		{"997 accepted", good, edi.Ack997, [][]string{{"AK1", "PO", "101"}, {"AK2", "850", "0001"}, {"AK5", "A"}, {"AK9", "A", "1", "1", "1"}}, edi.AckAccepted, nil},
		{"999 accepted", good, edi.Ack999, [][]string{{"AK1", "PO", "101", "004010X357"}, {"AK2", "850", "0001"}, {"IK5", "A"}, {"AK9", "A", "1", "1", "1"}}, edi.AckAccepted, nil},
		{"997 segment count wrong", bad, edi.Ack997, [][]string{{"AK1", "PO", "101"}, {"AK2", "850", "0001"},
			{"AK3", "SE", "10", "", "8"}, {"AK4", "1", "96", "7", "11"}, {"AK5", "R", "4"}, {"AK9", "R", "1", "1", "0"}}, edi.AckRejected,
			[]string{"AK3/0001/SE@10:8", "AK4/0001/SE@10/1:7", "AK5/0001:4"}},
		{"999 segment count and control number wrong", worse, edi.Ack999, [][]string{{"AK1", "PO", "101", "004010X357"}, {"AK2", "850", "0001"},
			{"IK3", "SE", "10", "", "8"}, {"IK4", "1", "96", "7", "11"}, {"IK4", "2", "329", "7", "0002"}, {"IK5", "R", "4", "3"}, {"AK9", "R", "1", "1", "0"}}, edi.AckRejected,
			[]string{"IK3/0001/SE@10:8", "IK4/0001/SE@10/1:7", "IK4/0001/SE@10/2:7", "AK5/0001:4", "AK5/0001:3"}},
		{"997 trailer missing", bytes.Replace(good, []byte("SE*10*0001~"), nil, 1), edi.Ack997, [][]string{{"AK1", "PO", "101"}, {"AK2", "850", "0001"},
			{"AK3", "SE", "10", "", "3"}, {"AK5", "R", "2"}, {"AK9", "R", "1", "1", "0"}}, edi.AckRejected,
			[]string{"AK3/0001/SE@10:3", "AK5/0001:2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := mustParse(t, tt.give)
			ack, err := edi.Acknowledge(edi.AckRequest{Interchange: &doc.Interchanges[0], Standard: edi.X12, Kind: tt.kind, Control: 42, Now: ackNow})
			if err != nil {
				t.Fatalf("Acknowledge = %v", err)
			}
			if ack.Status != tt.want {
				t.Errorf("Acknowledge status = %s, want %s", ack.Status, tt.want)
			}
			var got []oracleSegs
			edioracle.New(t).Call(t, map[string]any{"op": "x12-parse", "document": string(ack.Document)}, &got)
			if len(got) != 1 || len(got[0].Groups) != 1 || len(got[0].Groups[0].Sets) != 1 {
				t.Fatalf("node-x12 read %s as %+v, want one group with one set", ack.Document, got)
			}
			ic, g, s := got[0], got[0].Groups[0], got[0].Groups[0].Sets[0]
			if ic.Sender.ID != "XYZAIRCRAFT" || ic.Receiver.ID != "ABCAEROSPACE" || ic.Control != "42" || ic.Declared != 1 {
				t.Errorf("node-x12: ISA %+v → %+v control %s IEA01 %d, want the partners swapped, 42, 1", ic.Sender, ic.Receiver, ic.Control, ic.Declared)
			}
			if g.FID != "FA" || g.Control != "42" || g.Declared != 1 || s.Type != string(tt.kind) || s.Segments != s.Declared {
				t.Errorf("node-x12: GS %s/%s GE01 %d, ST %s with %d segments (SE01 %d)", g.FID, g.Control, g.Declared, s.Type, s.Segments, s.Declared)
			}
			if diff := cmp.Diff(tt.wantBody, s.Body); diff != "" {
				t.Errorf("node-x12: %s body (-want +got):\n%s", tt.kind, diff)
			}
			back := mustParse(t, ack.Document)
			acks := back.Acknowledgements()
			if len(acks) != 1 || !back.Interchanges[0].OK() {
				t.Fatalf("Parse(ack) = %+v, want one acknowledgement without problems", back)
			}
			if v := acks[0].Verdicts(); len(v) != 1 || v[0].GroupControl != "101" || v[0].Status != tt.want || !cmp.Equal(v[0].Codes, tt.wantCodes) {
				t.Errorf("Verdicts() = %+v, want group 101 %s %q", v, tt.want, tt.wantCodes)
			}
		})
	}
}

// TestAcknowledgeTA1: an interchange whose IEA disagrees is answered with
// a TA1 that rejects it, and a requested TA1 accepts an intact one.
func TestAcknowledgeTA1(t *testing.T) {
	good := readFixture(t, "x12-850-x12org-004010X357-ex1.edi")
	tests := []struct {
		name        string
		give        []byte
		want        string
		wantVerdict edi.AckStatus
		wantCodes   []string
	}{
		{"control mismatch", bytes.Replace(good, []byte("IEA*1*000000101"), []byte("IEA*1*000000102"), 1), "TA1*000000101*000506*1200*R*001~", edi.AckRejected, []string{"TA1:001"}},
		{"requested", bytes.Replace(good, []byte("*00401*000000101*0*P*"), []byte("*00401*000000101*1*P*"), 1), "TA1*000000101*000506*1200*A*000~", edi.AckAccepted, nil},
	}
	for _, tt := range tests {
		doc := mustParse(t, tt.give)
		ack, err := edi.Acknowledge(edi.AckRequest{Interchange: &doc.Interchanges[0], Standard: edi.X12, Kind: edi.Ack997, Control: 7, Now: ackNow})
		if err != nil || !bytes.Contains(ack.Document, []byte(tt.want)) || ack.Kinds[0] != "TA1" {
			t.Errorf("%s: Acknowledge = %s, %v; want it to contain %s", tt.name, ack.Document, err, tt.want)
		}
		var segs [][]string
		edioracle.New(t).Call(t, map[string]any{"op": "x12-segments", "document": string(ack.Document)}, &segs)
		// node-x12 reads control numbers as numbers: 000000007 is 7.
		if len(segs) != 11 || segs[0][0] != "ISA" || segs[0][13] != "7" || strings.Join(segs[1], "*")+"~" != tt.want || segs[2][0] != "GS" || strings.Join(segs[10], "*") != "IEA*1*7" {
			t.Errorf("%s: node-x12 read %q, want ISA, %s, the 997 group, IEA*1*7", tt.name, segs, tt.want)
		}
		// Read back as the hub reads an inbound TA1: first of the
		// acknowledgements, from the partner (ISA06) to us.
		back := mustParse(t, ack.Document)
		acks := back.Acknowledgements()
		if len(acks) != 2 || acks[0].Kind != "TA1" || acks[1].Kind != "997" {
			t.Fatalf("%s: Acknowledgements() = %d, want the TA1 and the 997", tt.name, len(acks))
		}
		want := []edi.AckVerdict{{Kind: "TA1", InterchangeControl: "000000101", Status: tt.wantVerdict, Codes: tt.wantCodes,
			Sender: doc.Interchanges[0].Receiver, Receiver: doc.Interchanges[0].Sender}}
		if diff := cmp.Diff(want, acks[0].Verdicts()); diff != "" {
			t.Errorf("%s: TA1 Verdicts() (-want +got):\n%s", tt.name, diff)
		}
	}
	if _, err := edi.Acknowledge(edi.AckRequest{Interchange: &edi.Interchange{}, Standard: edi.X12, Kind: edi.Ack997, Control: 1e9}); !errors.Is(err, edi.ErrAckControl) {
		t.Errorf("Acknowledge(control 1e9) = %v, want ErrAckControl", err)
	}
}

// TestAcknowledgeCONTRL answers EDIFACT interchanges with a CONTRL that the
// edifact reader parses, with the release character escaping IDs.
func TestAcknowledgeCONTRL(t *testing.T) {
	groups := readFixture(t, "edifact-orders-release-groups.edi")
	tests := []struct {
		name      string
		give      []byte
		wantBody  [][]string
		want      edi.AckStatus
		wantCodes []string
	}{
		{"groups and release", groups, [][]string{
			{"UCI", "IC'1", "A+B:14", "C:ZZ", "7"},
			{"UCF", "G1", "A:14", "C:ZZ", "7"},
			{"UCM", "M1", "ORDERS:D:96A:UN", "7"},
			{"UCM", "M2", "ORDERS:D:96A:UN", "7"},
		}, edi.AckAccepted, nil},
		{"message count wrong", bytes.Replace(groups, []byte("UNT+4+M2"), []byte("UNT+5+M2"), 1), [][]string{
			{"UCI", "IC'1", "A+B:14", "C:ZZ", "7"},
			{"UCF", "G1", "A:14", "C:ZZ", "7"},
			{"UCM", "M1", "ORDERS:D:96A:UN", "7"},
			{"UCM", "M2", "ORDERS:D:96A:UN", "4", "29"},
			{"UCS", "4"},
			{"UCD", "29", "1"},
		}, edi.AckAcceptedWithErrors, []string{"UCM/M2:29", "UCD/M2@4/1:29"}},
		{"message count and reference wrong", bytes.Replace(groups, []byte("UNT+4+M2"), []byte("UNT+5+M9"), 1), [][]string{
			{"UCI", "IC'1", "A+B:14", "C:ZZ", "7"},
			{"UCF", "G1", "A:14", "C:ZZ", "7"},
			{"UCM", "M1", "ORDERS:D:96A:UN", "7"},
			{"UCM", "M2", "ORDERS:D:96A:UN", "4", "29"},
			{"UCS", "4"},
			{"UCD", "29", "1"},
			{"UCD", "28", "2"},
		}, edi.AckAcceptedWithErrors, []string{"UCM/M2:29", "UCD/M2@4/1:29", "UCD/M2@4/2:28"}},
		{"paores", readFixture(t, "edifact-paores-wikipedia.edi"), [][]string{
			{"UCI", "1", "6XPPC:ZZ", "LHPPC:ZZ", "7"},
			{"UCM", "1", "PAORES:93:1:IA", "7"},
		}, edi.AckAccepted, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := mustParse(t, tt.give)
			ack, err := edi.Acknowledge(edi.AckRequest{Interchange: &doc.Interchanges[0], Standard: edi.EDIFACT, Control: 9001, Now: ackNow})
			if err != nil || ack.Status != tt.want {
				t.Fatalf("Acknowledge = %s, %v; want %s", ack.Status, err, tt.want)
			}
			var got []oracleSegs
			edioracle.New(t).Call(t, map[string]any{"op": "edifact-parse", "document": string(ack.Document)}, &got)
			if len(got) != 1 || len(got[0].Groups) != 1 || len(got[0].Groups[0].Sets) != 1 {
				t.Fatalf("edifact read %s as %+v, want one CONTRL", ack.Document, got)
			}
			ic, s := got[0], got[0].Groups[0].Sets[0]
			if ic.Control != "9001" || ic.Declared != 1 || s.Type != "CONTRL" || s.Segments != s.Declared {
				t.Errorf("edifact: UNB %s UNZ01 %d, %s with %d segments (UNT01 %d)", ic.Control, ic.Declared, s.Type, s.Segments, s.Declared)
			}
			if diff := cmp.Diff(tt.wantBody, s.Body); diff != "" {
				t.Errorf("edifact: CONTRL body (-want +got):\n%s", diff)
			}
			back := mustParse(t, ack.Document)
			v := back.Acknowledgements()[0].Verdicts()
			if len(v) != 1 || v[0].InterchangeControl != doc.Interchanges[0].ControlNumber || v[0].Status != tt.want || !cmp.Equal(v[0].Codes, tt.wantCodes) {
				t.Errorf("Verdicts() = %+v, want interchange %s %s %q", v, doc.Interchanges[0].ControlNumber, tt.want, tt.wantCodes)
			}
		})
	}
}

func FuzzAcknowledge(f *testing.F) {
	for _, p := range []string{"x12-850-x12org-004010X357-ex1.edi", "edifact-orders-release-groups.edi"} {
		b, _ := os.ReadFile(filepath.Join("testdata", p))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := edi.Parse(bytes.NewReader(b), edi.Limits{MaxSegment: 128, MaxSets: 20})
		if err != nil || len(doc.Interchanges) == 0 {
			return
		}
		ack, err := edi.Acknowledge(edi.AckRequest{Interchange: &doc.Interchanges[0], Standard: doc.Standard, Kind: edi.Ack997, Control: 5, Now: ackNow})
		if err != nil {
			t.Fatalf("Acknowledge = %v", err)
		}
		back, err := edi.Parse(bytes.NewReader(ack.Document), edi.Limits{MaxSegment: 1 << 16})
		if err != nil || len(back.Interchanges) != 1 || !back.Interchanges[0].OK() {
			if strings.ContainsAny(string(ack.Document), "\x00") {
				return
			}
			t.Fatalf("Parse(Acknowledge(x)) = %v, %+v; want one intact interchange\n%q", err, back, ack.Document)
		}
	})
}
