package edi

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// AckKind is the functional acknowledgement a partner wants for X12.
type AckKind string

// The X12 acknowledgements Acknowledge writes; EDIFACT is always answered
// with a CONTRL.
const (
	Ack997 AckKind = "997"
	Ack999 AckKind = "999"
)

// AckRequest is what Acknowledge needs: the interchange received, the
// kind wanted, and the control number to give the acknowledgement's
// interchange (and its group), taken from the partner's counter.
type AckRequest struct {
	Interchange *Interchange
	Standard    Standard
	Kind        AckKind
	// Control is the acknowledgement's interchange (ISA13, UNB05) and group
	// (GS06) control number: 1 to 999999999.
	Control int64
	Now     time.Time
}

// Ack is a generated acknowledgement interchange.
type Ack struct {
	// Document is the interchange's bytes.
	Document []byte
	// Kinds lists what it holds: "TA1", "997", "999", "CONTRL".
	Kinds []string
	// Status is the overall verdict it gives: accepted, accepted-with-errors
	// or rejected.
	Status AckStatus
}

// AckStatus is the verdict of a functional acknowledgement.
type AckStatus string

// The verdicts, from the partner's acknowledgement or the one we send.
const (
	AckAccepted           AckStatus = "accepted"
	AckAcceptedWithErrors AckStatus = "accepted-with-errors"
	AckRejected           AckStatus = "rejected"
)

// ErrAckControl is returned for a control number outside 1…999999999.
var ErrAckControl = errors.New("acknowledgement control number out of range 1-999999999")

// Acknowledge writes the acknowledgement of a received interchange: for
// X12 a TA1 when the interchange envelope has problems or the sender asked
// for one (ISA14 = 1), and a 997 or 999 set for each functional group; for
// EDIFACT a CONTRL. Sender and receiver are swapped, the delimiters are
// the received interchange's, test usage is kept.
func Acknowledge(req AckRequest) (Ack, error) {
	if req.Control < 1 || req.Control > 999999999 {
		return Ack{}, ErrAckControl
	}
	if req.Interchange == nil {
		return Ack{}, errors.New("acknowledge: no interchange")
	}
	if req.Standard == EDIFACT {
		return contrl(req), nil
	}
	if req.Kind != Ack997 && req.Kind != Ack999 {
		return Ack{}, fmt.Errorf("acknowledge: kind %q: want 997 or 999", req.Kind)
	}
	return x12Ack(req), nil
}

// x12Writer writes segments with an interchange's delimiters.
type x12Writer struct {
	d    Delimiters
	b    strings.Builder
	segs int // segments since the last ST
}

func (w *x12Writer) seg(tag string, elems ...string) {
	w.b.WriteString(tag)
	// Trailing empty elements are left out, as X12 asks.
	for len(elems) > 0 && elems[len(elems)-1] == "" {
		elems = elems[:len(elems)-1]
	}
	for _, e := range elems {
		w.b.WriteByte(w.d.Element)
		// X12 has no release character: a delimiter inside a received
		// value (possible only in a malformed interchange) becomes a space.
		for i := 0; i < len(e); i++ {
			if c := e[i]; c == w.d.Element || c == w.d.Segment {
				w.b.WriteByte(' ')
			} else {
				w.b.WriteByte(c)
			}
		}
	}
	w.b.WriteByte(w.d.Segment)
	w.segs++
}

func pad(s string, n int) string {
	if len(s) >= n {
		return s[:n]
	}
	return s + strings.Repeat(" ", n-len(s))
}

// ta1Note is TA105 for the first interchange problem.
func ta1Note(ps []Problem) (status, note string) {
	if len(ps) == 0 {
		return "A", "000"
	}
	switch ps[0] {
	case ProblemControlMismatch:
		return "R", "001"
	case ProblemCountMismatch:
		return "R", "021"
	case ProblemTrailerMissing:
		return "R", "023"
	}
	return "R", "024"
}

func x12Ack(req AckRequest) Ack {
	ic := req.Interchange
	d := ic.Delimiters
	if !delimitersOK(d) {
		d = X12Defaults
	}
	w := &x12Writer{d: d}
	ctl := fmt.Sprintf("%09d", req.Control)
	rep := "U"
	if d.Repetition != 0 {
		rep = string([]byte{d.Repetition})
	}
	usage := "P"
	if ic.Test {
		usage = "T"
	}
	now := req.Now.UTC()
	w.seg("ISA", "00", pad("", 10), "00", pad("", 10),
		pad(ic.Receiver.Qualifier, 2), pad(ic.Receiver.ID, 15), pad(ic.Sender.Qualifier, 2), pad(ic.Sender.ID, 15),
		now.Format("060102"), now.Format("1504"), rep, pad(ic.Version, 5), ctl, "0", usage, string([]byte{d.Component}))
	var ack Ack
	status := AckAccepted
	if len(ic.Problems) > 0 || ic.AckRequested {
		st, note := ta1Note(ic.Problems)
		w.seg("TA1", pad(ic.ControlNumber, 9), ic.Date, ic.Time, st, note)
		ack.Kinds = append(ack.Kinds, "TA1")
		if st == "R" {
			status = AckRejected
		}
	}
	groups := 0
	for _, g := range ic.Groups {
		if !g.Implicit {
			groups++
		}
	}
	if groups > 0 {
		status = worse(status, x12FunctionalGroup(w, req, ctl, now))
		ack.Kinds = append(ack.Kinds, string(req.Kind))
	}
	n := 0
	if groups > 0 {
		n = 1
	}
	w.seg("IEA", strconv.Itoa(n), ctl)
	ack.Document = []byte(w.b.String())
	ack.Status = status
	return ack
}

// x12FunctionalGroup writes one FA group with a 997/999 per received group.
func x12FunctionalGroup(w *x12Writer, req AckRequest, ctl string, now time.Time) AckStatus {
	ic := req.Interchange
	version := "005010X231A1"
	first := firstExplicit(ic)
	if req.Kind == Ack997 {
		version = first.Version
	}
	gctl := strconv.FormatInt(req.Control, 10)
	w.seg("GS", "FA", first.Receiver.ID, first.Sender.ID, now.Format("20060102"), now.Format("1504"), gctl, "X", version)
	status, sets := AckAccepted, 0
	for _, g := range ic.Groups {
		if g.Implicit {
			continue
		}
		sets++
		stctl := fmt.Sprintf("%04d", sets)
		if req.Kind == Ack999 {
			w.seg("ST", "999", stctl, version)
		} else {
			w.seg("ST", "997", stctl)
		}
		w.segs = 1
		status = worse(status, x12GroupResponse(w, req.Kind, g))
		w.seg("SE", strconv.Itoa(w.segs+1), stctl)
	}
	w.seg("GE", strconv.Itoa(sets), gctl)
	return status
}

func firstExplicit(ic *Interchange) *Group {
	for i := range ic.Groups {
		if !ic.Groups[i].Implicit {
			return &ic.Groups[i]
		}
	}
	return nil
}

var ak5Codes = map[Problem]string{
	ProblemTrailerMissing:  "2",
	ProblemControlMismatch: "3",
	ProblemCountMismatch:   "4",
	ProblemStructure:       "5",
}

var ak9Codes = map[Problem]string{
	ProblemTrailerMissing:  "3",
	ProblemControlMismatch: "4",
	ProblemCountMismatch:   "5",
	ProblemStructure:       "6",
}

// x12GroupResponse writes AK1, an AK2/AK5 (IK5) pair per recorded set and
// AK9, and returns the group's verdict.
func x12GroupResponse(w *x12Writer, kind AckKind, g Group) AckStatus {
	ver := ""
	if kind == Ack999 {
		ver = g.Version
	}
	w.seg("AK1", g.FunctionalID, g.ControlNumber, ver)
	accepted := 0
	setTag := map[AckKind]string{Ack997: "AK5", Ack999: "IK5"}[kind]
	for _, s := range g.Sets {
		sver := ""
		if kind == Ack999 {
			sver = s.Version
		}
		w.seg("AK2", s.Type, s.ControlNumber, sver)
		if len(s.Problems) == 0 {
			accepted++
			w.seg(setTag, "A")
			continue
		}
		x12SegmentNotes(w, kind, s)
		w.seg(setTag, append([]string{"R"}, problemCodes(s.Problems, ak5Codes, 5)...)...)
	}
	// Sets past the recording limit were only counted: accepted unless
	// the group's trailer disagrees.
	accepted += g.SetCount - len(g.Sets)
	status, verdict := "A", AckAccepted
	switch {
	case len(g.Problems) > 0 || accepted == 0 && g.SetCount > 0:
		status, verdict, accepted = "R", AckRejected, 0
	case accepted < g.SetCount:
		status, verdict = "P", AckAcceptedWithErrors
	}
	declared := g.DeclaredCount
	if declared < 0 {
		declared = g.SetCount
	}
	elems := []string{status, strconv.Itoa(declared), strconv.Itoa(g.SetCount), strconv.Itoa(accepted)}
	w.seg("AK9", append(elems, problemCodes(g.Problems, ak9Codes, 5)...)...)
	return verdict
}

// x12SegmentNotes writes the segment and element notes (AK3/AK4, IK3/IK4
// for a 999) of set s's problems that name a segment: its SE missing
// where it was expected (AK304 3, mandatory segment missing), or an SE
// whose count (SE01, data element 96) or control number (SE02, 329)
// disagrees (AK304 8, segment has data element errors; AK403 7, invalid
// value, with the value received). A segment out of place is not located:
// its AK5 code (5) says it.
func x12SegmentNotes(w *x12Writer, kind AckKind, s Set) {
	segTag, elemTag := "AK3", "AK4"
	if kind == Ack999 {
		segTag, elemTag = "IK3", "IK4"
	}
	has := func(p Problem) bool { return slices.Contains(s.Problems, p) }
	if has(ProblemTrailerMissing) {
		w.seg(segTag, "SE", strconv.Itoa(s.Segments+1), "", "3")
		return
	}
	count, control := has(ProblemCountMismatch), has(ProblemControlMismatch)
	if !count && !control {
		return
	}
	w.seg(segTag, "SE", strconv.Itoa(s.Segments), "", "8")
	if count {
		got := ""
		if s.DeclaredCount >= 0 {
			got = strconv.Itoa(s.DeclaredCount)
		}
		w.seg(elemTag, "1", "96", "7", got)
	}
	if control {
		w.seg(elemTag, "2", "329", "7", s.TrailerControl)
	}
}

func problemCodes(ps []Problem, codes map[Problem]string, max int) []string {
	var out []string
	for _, p := range ps {
		if c, ok := codes[p]; ok && len(out) < max {
			out = append(out, c)
		}
	}
	return out
}

func worse(a, b AckStatus) AckStatus {
	rank := map[AckStatus]int{AckAccepted: 0, AckAcceptedWithErrors: 1, AckRejected: 2}
	if rank[b] > rank[a] {
		return b
	}
	return a
}
