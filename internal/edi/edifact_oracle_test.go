package edi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/edi"
)

// una are the service characters of an EDIFACT interchange written by
// edifactWriter; release 0 writes a space (no release character).
type una struct {
	component, element, decimal, release, reserved, terminator byte
	// eol follows each terminator ("" for none).
	eol string
	// noUNA leaves the UNA segment out (the defaults apply).
	noUNA bool
}

// edifactWriter writes segments with u's delimiters, releasing every
// delimiter (and the release character) inside a value. It is the test's
// own writer, sharing nothing with the package's CONTRL writer.
type edifactWriter struct {
	u   una
	buf strings.Builder
}

func (w *edifactWriter) esc(v string) string {
	if w.u.release == 0 {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch v[i] {
		case w.u.component, w.u.element, w.u.release, w.u.terminator:
			b.WriteByte(w.u.release)
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// seg writes tag and its elements, each a list of components.
func (w *edifactWriter) seg(tag string, elems ...[]string) {
	w.buf.WriteString(tag)
	for _, e := range elems {
		w.buf.WriteByte(w.u.element)
		for i, c := range e {
			if i > 0 {
				w.buf.WriteByte(w.u.component)
			}
			w.buf.WriteString(w.esc(c))
		}
	}
	w.buf.WriteByte(w.u.terminator)
	w.buf.WriteString(w.u.eol)
}

func c(comps ...string) []string { return comps }

// edifactSpec is an interchange: groups of messages (no UNG when a
// group's id is "").
type edifactSpec struct {
	syntax           string // UNB01, e.g. UNOC:3
	sender, receiver edi.Party
	control          string
	test             bool
	groups           []groupSpec
}

type groupSpec struct {
	id, fid  string
	sender   edi.Party
	receiver edi.Party
	messages []string // message types; each gets two body segments
}

// write returns the interchanges of specs in one payload.
func (u una) write(specs ...edifactSpec) string {
	w := &edifactWriter{u: u}
	if !u.noUNA {
		r := u.release
		if r == 0 {
			r = ' '
		}
		w.buf.Write([]byte{'U', 'N', 'A', u.component, u.element, u.decimal, r, u.reserved, u.terminator})
		w.buf.WriteString(u.eol)
	}
	// Data carries every delimiter, released, when there is a release
	// character.
	special := ""
	if u.release != 0 {
		special = string([]byte{u.element, u.component, u.release, u.terminator})
	}
	for _, s := range specs {
		test := ""
		if s.test {
			test = "1"
		}
		syntax := strings.Split(s.syntax, ":")
		w.seg("UNB", syntax, c(s.sender.ID, s.sender.Qualifier), c(s.receiver.ID, s.receiver.Qualifier), c("260102", "0930"), c(s.control),
			c(""), c("APP+REF"), c(""), c("1"), c(""), c(test))
		n := 0
		for gi, g := range s.groups {
			if g.id != "" {
				w.seg("UNG", c(g.fid), c(g.sender.ID, g.sender.Qualifier), c(g.receiver.ID, g.receiver.Qualifier), c("260102", "0930"), c(g.id), c("UN"), c("D", "96A"))
				n++
			}
			for mi, typ := range g.messages {
				ref := fmt.Sprintf("M%d-%d", gi+1, mi+1)
				w.seg("UNH", c(ref), c(typ, "D", "96A", "UN"))
				w.seg("BGM", c("220"), c(fmt.Sprintf("PO%s%d-%d", special, gi, mi)), c("9"))
				w.seg("FTX", c("AAI"), c(""), c(""), c(fmt.Sprintf("PRICE 12%c50%s", u.decimal, special)))
				w.seg("UNT", c("4"), c(ref))
				if g.id == "" {
					n++
				}
			}
			if g.id != "" {
				w.seg("UNE", c(fmt.Sprint(len(g.messages))), c(g.id))
			}
		}
		w.seg("UNZ", c(fmt.Sprint(n)), c(s.control))
	}
	return w.buf.String()
}

// TestParseEDIFACTDelimiters parses EDIFACT interchanges with other
// service characters (UNA), released delimiters in IDs, references and
// data, several groups and messages and several interchanges in one
// payload, and compares every envelope value with what the independent
// reader (the npm package edifact) reads from the same bytes, and the
// key values with the ones written.
func TestParseEDIFACTDelimiters(t *testing.T) {
	acme, hub := edi.Party{ID: "ACME|EU", Qualifier: "ZZ"}, edi.Party{ID: "HUB^1", Qualifier: "14"}
	twoGroups := []groupSpec{
		{id: "G1", fid: "ORDERS", sender: edi.Party{ID: "BUY!ER", Qualifier: "ZZ"}, receiver: hub, messages: []string{"ORDERS", "ORDERS"}},
		{id: "G2", fid: "INVOIC", sender: acme, receiver: hub, messages: []string{"INVOIC", "INVOIC", "INVOIC"}},
	}
	tests := []struct {
		name  string
		u     una
		specs []edifactSpec
	}{
		{"pipe, caret, bang, tilde with line breaks",
			una{component: '^', element: '|', decimal: ',', release: '!', reserved: ' ', terminator: '~', eol: "\r\n"},
			[]edifactSpec{{syntax: "UNOC:3", sender: acme, receiver: hub, control: "IC|1!", test: true, groups: twoGroups}}},
		{"syntax 4 with a repetition separator, no line breaks",
			una{component: ':', element: '+', decimal: '.', release: '?', reserved: '*', terminator: '\''},
			[]edifactSpec{{syntax: "UNOC:4", sender: edi.Party{ID: "A+B", Qualifier: "14"}, receiver: edi.Party{ID: "C:D", Qualifier: "ZZ"}, control: "REF'7",
				groups: []groupSpec{{messages: []string{"ORDERS", "DESADV", "INVOIC"}}}}}},
		{"no release character",
			una{component: '>', element: '*', decimal: '.', reserved: ' ', terminator: '!', eol: "\n"},
			[]edifactSpec{{syntax: "UNOB:2", sender: edi.Party{ID: "SENDER"}, receiver: edi.Party{ID: "RECEIVER", Qualifier: "1"}, control: "42",
				groups: []groupSpec{{id: "77", fid: "PAORES", sender: edi.Party{ID: "S"}, receiver: edi.Party{ID: "R"}, messages: []string{"PAORES"}}}}}},
		{"two interchanges without UNA",
			una{component: ':', element: '+', decimal: '.', release: '?', reserved: ' ', terminator: '\'', eol: "\n", noUNA: true},
			[]edifactSpec{
				{syntax: "UNOC:3", sender: edi.Party{ID: "X'Y", Qualifier: "ZZ"}, receiver: hub, control: "1", groups: twoGroups},
				{syntax: "UNOC:3", sender: hub, receiver: edi.Party{ID: "X'Y", Qualifier: "ZZ"}, control: "2", test: true, groups: []groupSpec{{messages: []string{"APERAK"}}}},
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			payload := tt.u.write(tt.specs...)
			doc := mustParse(t, []byte(payload))
			if doc.Standard != edi.EDIFACT || len(doc.Interchanges) != len(tt.specs) {
				t.Fatalf("Parse(%q) = %s with %d interchanges, want EDIFACT with %d", payload, doc.Standard, len(doc.Interchanges), len(tt.specs))
			}
			for i, s := range tt.specs {
				ic := doc.Interchanges[i]
				if !ic.OK() {
					t.Errorf("interchange %d: problems %+v, want none", i, ic)
				}
				var wantSets, gotSets []string
				for _, g := range s.groups {
					wantSets = append(wantSets, g.messages...)
				}
				for _, g := range ic.Groups {
					for _, set := range g.Sets {
						gotSets = append(gotSets, set.Type)
					}
				}
				if ic.Sender != s.sender || ic.Receiver != s.receiver || ic.ControlNumber != s.control || ic.Test != s.test || ic.Version != s.syntax || !cmp.Equal(gotSets, wantSets) {
					t.Errorf("interchange %d = sender %+v receiver %+v control %q test %v syntax %q sets %v;\nwant %+v %+v %q %v %q %v",
						i, ic.Sender, ic.Receiver, ic.ControlNumber, ic.Test, ic.Version, gotSets, s.sender, s.receiver, s.control, s.test, s.syntax, wantSets)
				}
			}
			if diff := cmp.Diff(oracleParse(t, edi.EDIFACT, []byte(payload)), summarize(doc)); diff != "" {
				t.Errorf("Parse(%q) differs from the independent reader (-oracle +edi):\n%s", payload, diff)
			}
			// Our CONTRL for each, in the interchange's delimiters, is read
			// by the independent reader as one CONTRL addressed back.
			for i := range doc.Interchanges {
				ic := &doc.Interchanges[i]
				ack, err := edi.Acknowledge(edi.AckRequest{Interchange: ic, Standard: edi.EDIFACT, Control: 9001, Now: ackNow})
				if err != nil || ack.Status != edi.AckAccepted {
					t.Fatalf("Acknowledge(interchange %d) = %s, %v; want accepted", i, ack.Status, err)
				}
				got := oracleParse(t, edi.EDIFACT, ack.Document)
				if len(got) != 1 || len(got[0].Groups) != 1 || len(got[0].Groups[0].Sets) != 1 || got[0].Groups[0].Sets[0].Type != "CONTRL" ||
					got[0].Receiver != ic.Sender || got[0].Sender != ic.Receiver || got[0].Control != "9001" {
					t.Errorf("the independent reader reads our CONTRL %q as %+v, want one CONTRL 9001 from %+v to %+v", ack.Document, got, ic.Receiver, ic.Sender)
				}
			}
		})
	}
}
