package edi

// AckReport is what an inbound functional acknowledgement says: for X12
// 997/999 one GroupAck per AK1…AK9; for EDIFACT CONTRL the interchange
// response (UCI) with its group (UCF) and message (UCM) responses.
type AckReport struct {
	// Kind is "997", "999" or "CONTRL".
	Kind string
	// Sender and Receiver are those of the interchange that carries the
	// acknowledgement: the partner that acknowledges, and us. The
	// interchange acknowledged went from Receiver to Sender.
	Sender, Receiver Party
	Groups           []GroupAck
	Interchange      *InterchangeAck
	// Truncated is true when more responses came than Limits.MaxAckEntries.
	Truncated bool
}

// InterchangeAck is a CONTRL's UCI segment and what follows it, or an
// X12 TA1 (ControlNumber TA101, Action TA104, Code TA105).
type InterchangeAck struct {
	ControlNumber string
	Sender        Party
	Receiver      Party
	// Action is UCI04: "4" rejected, "7" accepted, "8" received; or
	// TA104: "A" accepted, "E" accepted with errors, "R" rejected.
	Action string
	// Code is UCI05, the syntax error, "" when none; or TA105, the
	// interchange note ("000": no error).
	Code   string
	Groups []GroupAck
	Sets   []SetAck
}

// GroupAck acknowledges one functional group (AK1…AK9, or a UCF).
type GroupAck struct {
	FunctionalID  string
	ControlNumber string
	// Status is AK901 (A, E, P, R) or the UCF action code.
	Status string
	// Codes are AK905… or UCF's error code.
	Codes                        []string
	Declared, Received, Accepted int
	Sets                         []SetAck
}

// SetAck acknowledges one transaction set or message (AK2/AK5, AK2/IK5, UCM).
type SetAck struct {
	Type          string
	ControlNumber string
	Status        string
	Codes         []string
	// Notes are the segment errors reported in the set (AK3 or IK3 with
	// their AK4 or IK4), at most maxNotes.
	Notes []SegmentNote
}

// SegmentNote is an X12 data segment note (AK3, IK3) and its data element
// notes (AK4, IK4).
type SegmentNote struct {
	Tag string // AK3 or IK3
	// Segment is its ID (AK301), Position its position in the set (AK302).
	Segment, Position string
	Code              string // AK304
	Elements          []ElementNote
}

// ElementNote is an X12 data element note (AK4, IK4).
type ElementNote struct {
	Tag string // AK4 or IK4
	// Position is the element's position in the segment (AK401), Ref its
	// data element reference number (AK402).
	Position, Ref string
	Code          string // AK403
	// Value is the copy of the bad element (AK404).
	Value string
}

// maxNotes bounds the segment notes kept per set, and the element notes
// per segment note.
const maxNotes = 10

func newAck(setType string) *AckReport {
	switch setType {
	case "997", "999", "CONTRL":
		return &AckReport{Kind: setType}
	}
	return nil
}

// ackSegment records a response segment of an acknowledgement set.
func (p *parser) ackSegment(seg *Segment) {
	s := p.b.set
	if s == nil || s.Ack == nil || seg.Skipped {
		return
	}
	a, max := s.Ack, p.b.lim.MaxAckEntries
	lastGroup := func(gs []GroupAck) *GroupAck {
		if len(gs) == 0 {
			return nil
		}
		return &gs[len(gs)-1]
	}
	switch seg.Tag {
	case "AK1":
		if len(a.Groups) >= max {
			a.Truncated = true
			return
		}
		a.Groups = append(a.Groups, GroupAck{FunctionalID: seg.el(1, 0), ControlNumber: seg.el(2, 0)})
	case "AK2":
		if g := lastGroup(a.Groups); g != nil && len(g.Sets) < max {
			g.Sets = append(g.Sets, SetAck{Type: seg.el(1, 0), ControlNumber: seg.el(2, 0)})
		}
	case "AK3", "IK3":
		if g := lastGroup(a.Groups); g != nil && len(g.Sets) > 0 {
			st := &g.Sets[len(g.Sets)-1]
			if len(st.Notes) < maxNotes {
				st.Notes = append(st.Notes, SegmentNote{Tag: seg.Tag, Segment: seg.el(1, 0), Position: seg.el(2, 0), Code: seg.el(4, 0)})
			}
		}
	case "AK4", "IK4":
		if g := lastGroup(a.Groups); g != nil && len(g.Sets) > 0 {
			st := &g.Sets[len(g.Sets)-1]
			if n := len(st.Notes); n > 0 && len(st.Notes[n-1].Elements) < maxNotes {
				st.Notes[n-1].Elements = append(st.Notes[n-1].Elements, ElementNote{Tag: seg.Tag, Position: seg.el(1, 0), Ref: seg.el(2, 0), Code: seg.el(3, 0), Value: seg.el(4, 0)})
			}
		}
	case "AK5", "IK5":
		if g := lastGroup(a.Groups); g != nil && len(g.Sets) > 0 {
			st := &g.Sets[len(g.Sets)-1]
			st.Status, st.Codes = seg.el(1, 0), codes(seg, 2, 6)
		}
	case "AK9":
		if g := lastGroup(a.Groups); g != nil {
			g.Status = seg.el(1, 0)
			g.Declared, g.Received, g.Accepted = count(seg.el(2, 0)), count(seg.el(3, 0)), count(seg.el(4, 0))
			g.Codes = codes(seg, 5, 9)
		}
	default:
		p.contrlSegment(a, seg, max)
	}
}

func (p *parser) contrlSegment(a *AckReport, seg *Segment, max int) {
	switch seg.Tag {
	case "UCI":
		a.Interchange = &InterchangeAck{
			ControlNumber: seg.el(1, 0),
			Sender:        Party{ID: seg.el(2, 0), Qualifier: seg.el(2, 1)},
			Receiver:      Party{ID: seg.el(3, 0), Qualifier: seg.el(3, 1)},
			Action:        seg.el(4, 0), Code: seg.el(5, 0),
		}
	case "UCF":
		if a.Interchange == nil || len(a.Interchange.Groups) >= max {
			a.Truncated = a.Interchange != nil
			return
		}
		a.Interchange.Groups = append(a.Interchange.Groups, GroupAck{
			ControlNumber: seg.el(1, 0), Status: seg.el(4, 0), Codes: codes(seg, 5, 5),
		})
	case "UCM":
		if a.Interchange == nil {
			return
		}
		ack := SetAck{ControlNumber: seg.el(1, 0), Type: seg.el(2, 0), Status: seg.el(3, 0), Codes: codes(seg, 4, 4)}
		sets := &a.Interchange.Sets
		if n := len(a.Interchange.Groups); n > 0 {
			sets = &a.Interchange.Groups[n-1].Sets
		}
		if len(*sets) >= max {
			a.Truncated = true
			return
		}
		*sets = append(*sets, ack)
	case "UCS", "UCD":
		st := a.Interchange.lastSet()
		if st == nil {
			return
		}
		if seg.Tag == "UCS" {
			if len(st.Notes) < maxNotes {
				st.Notes = append(st.Notes, SegmentNote{Tag: "UCS", Position: seg.el(1, 0), Code: seg.el(2, 0)})
			}
			return
		}
		if n := len(st.Notes); n > 0 && len(st.Notes[n-1].Elements) < maxNotes {
			pos := seg.el(2, 0)
			if c := seg.el(2, 1); c != "" {
				pos += "." + c
			}
			st.Notes[n-1].Elements = append(st.Notes[n-1].Elements, ElementNote{Tag: "UCD", Code: seg.el(1, 0), Position: pos})
		}
	}
}

// lastSet is the message response (UCM) read last, nil when none.
func (ia *InterchangeAck) lastSet() *SetAck {
	if ia == nil {
		return nil
	}
	sets := ia.Sets
	if n := len(ia.Groups); n > 0 {
		sets = ia.Groups[n-1].Sets
	}
	if len(sets) == 0 {
		return nil
	}
	return &sets[len(sets)-1]
}

// codes returns the non-empty elements from..to (1-based).
func codes(seg *Segment, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		if v := seg.el(i, 0); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// AckVerdict is one verdict of an inbound acknowledgement: on a functional
// group (X12 AK1…AK9, CONTRL UCF) or on an interchange (CONTRL UCI).
type AckVerdict struct {
	// InterchangeControl is the acknowledged interchange's control number
	// (CONTRL UCI01); "" for X12, whose 997/999 names groups only.
	InterchangeControl string
	// GroupControl is the acknowledged group's control number (AK102,
	// UCF01); "" for a verdict on a whole interchange.
	GroupControl string
	FunctionalID string
	// Kind is the acknowledgement's (AckReport.Kind): a "TA1" verdict is
	// on the interchange's envelope only.
	Kind   string
	Status AckStatus
	// Codes are the error codes given, each with the segment that gave it
	// ("AK9:5", "AK5/0001:4", "UCI:28", "UCM/M1:29"); a segment note
	// names the set, the segment and its position ("AK3/0001/SE@4:8"), an
	// element note also the element's position ("AK4/0001/SE@4/2:7").
	Codes []string
	// Sender and Receiver are the acknowledging interchange's (see
	// AckReport): the acknowledged one went from Receiver to Sender.
	Sender, Receiver Party
}

// x12Status maps AK901/AK501/IK501.
func x12Status(s string) AckStatus {
	switch s {
	case "A":
		return AckAccepted
	case "E", "P":
		return AckAcceptedWithErrors
	}
	return AckRejected
}

// Verdicts lists what the acknowledgement says, one verdict per group for
// X12 and one for the interchange of a CONTRL (worse when a UCF or UCM
// rejects a part of it).
func (a *AckReport) Verdicts() []AckVerdict {
	var out []AckVerdict
	if a.Kind == "TA1" && a.Interchange != nil {
		v := AckVerdict{Kind: a.Kind, InterchangeControl: a.Interchange.ControlNumber, Status: x12Status(a.Interchange.Action), Sender: a.Sender, Receiver: a.Receiver}
		if c := a.Interchange.Code; c != "" && c != "000" {
			v.Codes = []string{"TA1:" + c}
		}
		return append(out, v)
	}
	for _, g := range a.Groups {
		v := AckVerdict{Kind: a.Kind, GroupControl: g.ControlNumber, FunctionalID: g.FunctionalID, Status: x12Status(g.Status), Sender: a.Sender, Receiver: a.Receiver}
		for _, c := range g.Codes {
			v.Codes = append(v.Codes, "AK9:"+c)
		}
		for _, s := range g.Sets {
			for _, n := range s.Notes {
				at := n.Segment + "@" + n.Position
				v.Codes = append(v.Codes, n.Tag+"/"+s.ControlNumber+"/"+at+":"+n.Code)
				for _, e := range n.Elements {
					v.Codes = append(v.Codes, e.Tag+"/"+s.ControlNumber+"/"+at+"/"+e.Position+":"+e.Code)
				}
			}
			for _, c := range s.Codes {
				v.Codes = append(v.Codes, "AK5/"+s.ControlNumber+":"+c)
			}
		}
		out = append(out, v)
	}
	if ia := a.Interchange; ia != nil {
		v := AckVerdict{Kind: a.Kind, InterchangeControl: ia.ControlNumber, Status: AckAccepted, Sender: a.Sender, Receiver: a.Receiver}
		if ia.Action == "4" {
			v.Status = AckRejected
		}
		if ia.Code != "" {
			v.Codes = append(v.Codes, "UCI:"+ia.Code)
		}
		part := func(tag string, ref, action string, codes []string) {
			for _, c := range codes {
				v.Codes = append(v.Codes, tag+"/"+ref+":"+c)
			}
			if action == "4" {
				v.Status = worse(v.Status, AckAcceptedWithErrors)
			}
		}
		notes := func(ref string, ns []SegmentNote) {
			for _, n := range ns {
				at := ref + "@" + n.Position
				if n.Code != "" {
					v.Codes = append(v.Codes, n.Tag+"/"+at+":"+n.Code)
				}
				for _, e := range n.Elements {
					v.Codes = append(v.Codes, e.Tag+"/"+at+"/"+e.Position+":"+e.Code)
				}
			}
		}
		for _, g := range ia.Groups {
			part("UCF", g.ControlNumber, g.Status, g.Codes)
			for _, s := range g.Sets {
				part("UCM", s.ControlNumber, s.Status, s.Codes)
				notes(s.ControlNumber, s.Notes)
			}
		}
		for _, s := range ia.Sets {
			part("UCM", s.ControlNumber, s.Status, s.Codes)
			notes(s.ControlNumber, s.Notes)
		}
		out = append(out, v)
	}
	return out
}

// Acknowledgements returns the acknowledgements of a document, in order:
// of each interchange its TA1s, then its acknowledgement sets.
func (d *Document) Acknowledgements() []*AckReport {
	var out []*AckReport
	for _, ic := range d.Interchanges {
		out = append(out, ic.TA1...)
		for _, g := range ic.Groups {
			for _, s := range g.Sets {
				if s.Ack != nil {
					out = append(out, s.Ack)
				}
			}
		}
	}
	return out
}
