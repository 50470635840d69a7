package edi

import (
	"slices"
	"strconv"
	"strings"
)

// edifactWriter writes segments with an interchange's delimiters, putting
// the release character before delimiters inside values.
type edifactWriter struct {
	d    Delimiters
	b    strings.Builder
	segs int
}

func (w *edifactWriter) escape(v string) string {
	if w.d.Release == 0 {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case w.d.Element, w.d.Component, w.d.Segment, w.d.Release:
			b.WriteByte(w.d.Release)
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// seg writes a segment; each element is a list of components.
func (w *edifactWriter) seg(tag string, elems ...[]string) {
	w.b.WriteString(tag)
	for len(elems) > 0 && strings.Join(elems[len(elems)-1], "") == "" {
		elems = elems[:len(elems)-1]
	}
	for _, e := range elems {
		w.b.WriteByte(w.d.Element)
		for len(e) > 1 && e[len(e)-1] == "" {
			e = e[:len(e)-1]
		}
		for i, c := range e {
			if i > 0 {
				w.b.WriteByte(w.d.Component)
			}
			w.b.WriteString(w.escape(c))
		}
	}
	w.b.WriteByte(w.d.Segment)
	w.segs++
}

func el(c ...string) []string { return c }

// contrlCodes are EDIFACT syntax error codes (data element 0085).
var contrlCodes = map[Problem]string{
	ProblemTrailerMissing:  "13", // missing
	ProblemControlMismatch: "28", // references do not match
	ProblemCountMismatch:   "29", // control count does not match number of instances received
	ProblemStructure:       "18", // unspecified error
}

func contrlAction(ps []Problem) (action, code string) {
	if len(ps) == 0 {
		return "7", ""
	}
	return "4", contrlCodes[ps[0]]
}

// contrl writes a CONTRL for an EDIFACT interchange: UCI for the
// interchange, UCF for each group, UCM for each recorded message.
func contrl(req AckRequest) Ack {
	ic := req.Interchange
	d := ic.Delimiters
	if d.Element == 0 {
		d = EDIFACTDefaults
	}
	w := &edifactWriter{d: d}
	rel := byte(' ')
	if d.Release != 0 {
		rel = d.Release
	}
	dec := d.Decimal
	if dec == 0 {
		dec = '.'
	}
	w.b.WriteString("UNA" + string([]byte{d.Component, d.Element, dec, rel, ' ', d.Segment}))
	syntax := strings.Split(ic.Version, ":")
	if len(syntax) < 2 || !strings.HasPrefix(syntax[0], "UNO") {
		syntax = []string{"UNOC", "3"}
	}
	now := req.Now.UTC()
	date := now.Format("060102")
	msgVersion := el("CONTRL", "D", "3", "UN")
	if syntax[1] >= "4" {
		date = now.Format("20060102")
		msgVersion = el("CONTRL", "4", "1", "UN")
	}
	ctl := strconv.FormatInt(req.Control, 10)
	test := ""
	if ic.Test {
		test = "1"
	}
	w.seg("UNB", syntax[:2], el(ic.Receiver.ID, ic.Receiver.Qualifier), el(ic.Sender.ID, ic.Sender.Qualifier),
		el(date, now.Format("1504")), el(ctl), nil, nil, nil, nil, nil, el(test))
	w.segs = 0
	w.seg("UNH", el("1"), msgVersion)
	status := contrlBody(w, ic)
	w.seg("UNT", el(strconv.Itoa(w.segs+1)), el("1"))
	w.seg("UNZ", el("1"), el(ctl))
	return Ack{Document: []byte(w.b.String()), Kinds: []string{"CONTRL"}, Status: status}
}

func contrlBody(w *edifactWriter, ic *Interchange) AckStatus {
	action, code := contrlAction(ic.Problems)
	w.seg("UCI", el(ic.ControlNumber), el(ic.Sender.ID, ic.Sender.Qualifier), el(ic.Receiver.ID, ic.Receiver.Qualifier), el(action), el(code))
	status := AckAccepted
	if action == "4" {
		status = AckRejected
	}
	for _, g := range ic.Groups {
		if !g.Implicit {
			ga, gc := contrlAction(g.Problems)
			w.seg("UCF", el(g.ControlNumber), el(g.Sender.ID, g.Sender.Qualifier), el(g.Receiver.ID, g.Receiver.Qualifier), el(ga), el(gc))
			if ga == "4" {
				status = worse(status, AckAcceptedWithErrors)
			}
		}
		for _, s := range g.Sets {
			sa, sc := contrlAction(s.Problems)
			typ := append(el(s.Type), strings.Split(s.Version, ":")...)
			w.seg("UCM", el(s.ControlNumber), typ, el(sa), el(sc))
			contrlSegmentErrors(w, s)
			if sa == "4" {
				status = worse(status, AckAcceptedWithErrors)
			}
		}
	}
	return status
}

// contrlSegmentErrors writes the segment and data element errors (UCS,
// UCD) of message s's problems that name a segment: its UNT missing where
// it was expected (UCS with code 13, missing), or a UNT whose count
// (UNT01) or reference (UNT02) disagrees (UCS, then UCD with code 29 or
// 28 and the element's position). A segment out of place is not located.
func contrlSegmentErrors(w *edifactWriter, s Set) {
	has := func(p Problem) bool { return slices.Contains(s.Problems, p) }
	if has(ProblemTrailerMissing) {
		w.seg("UCS", el(strconv.Itoa(s.Segments+1)), el(contrlCodes[ProblemTrailerMissing]))
		return
	}
	count, ref := has(ProblemCountMismatch), has(ProblemControlMismatch)
	if !count && !ref {
		return
	}
	w.seg("UCS", el(strconv.Itoa(s.Segments)))
	if count {
		w.seg("UCD", el(contrlCodes[ProblemCountMismatch]), el("1"))
	}
	if ref {
		w.seg("UCD", el(contrlCodes[ProblemControlMismatch]), el("2"))
	}
}
