package edi

import "strconv"

func (p *parser) edifact(seg segment) error {
	b := &p.b
	switch seg.tag {
	case "UNA":
		return p.readUNA()
	case "UNB":
		b.openInterchange(Interchange{
			Version:       join(seg, 1),
			Sender:        Party{ID: seg.el(2, 0), Qualifier: seg.el(2, 1)},
			Receiver:      Party{ID: seg.el(3, 0), Qualifier: seg.el(3, 1)},
			Date:          seg.el(4, 0),
			Time:          seg.el(4, 1),
			ControlNumber: seg.el(5, 0),
			AckRequested:  seg.el(9, 0) == "1",
			Test:          seg.el(11, 0) == "1",
			Delimiters:    p.sc.d,
		})
		return nil
	}
	if b.ic == nil {
		return &SyntaxError{Offset: seg.offset, Reason: "segment " + strconv.Quote(seg.tag) + " outside an interchange"}
	}
	switch seg.tag {
	case "UNZ":
		b.closeInterchange(count(seg.el(1, 0)), seg.el(2, 0), true)
	case "UNG":
		b.openGroup(Group{
			FunctionalID: seg.el(1, 0),
			Sender:       Party{ID: seg.el(2, 0), Qualifier: seg.el(2, 1)},
			Receiver:     Party{ID: seg.el(3, 0), Qualifier: seg.el(3, 1)},
			Date:         seg.el(4, 0), Time: seg.el(4, 1),
			ControlNumber: seg.el(5, 0),
			Version:       join(seg, 7),
		})
	case "UNE":
		if b.g == nil || b.g.Implicit {
			addProblem(&b.ic.Problems, ProblemStructure)
			return nil
		}
		b.closeGroup(count(seg.el(1, 0)), seg.el(2, 0), true)
	case "UNH":
		s := Set{ControlNumber: seg.el(1, 0), Type: seg.el(2, 0), Ack: newAck(seg.el(2, 0))}
		if len(seg.elems) >= 2 && len(seg.elems[1]) > 1 {
			s.Version = joinComps(seg.elems[1][1:])
		}
		b.openSet(s)
	case "UNT":
		if b.set == nil {
			addProblem(&b.ic.Problems, ProblemStructure)
			return nil
		}
		b.closeSet(count(seg.el(1, 0)), seg.el(2, 0), true)
	default:
		b.body()
		p.ackSegment(seg)
	}
	return nil
}

// readUNA reads the service string advice after its tag: component, element,
// decimal mark, release character (space: none), reserved, terminator.
func (p *parser) readUNA() error {
	var a [6]byte
	for i := range a {
		c, err := p.sc.readByte()
		if err != nil {
			return p.sc.fail("UNA truncated")
		}
		a[i] = c
	}
	d := Delimiters{Component: a[0], Element: a[1], Decimal: a[2], Release: a[3], Segment: a[5]}
	if d.Release == ' ' {
		d.Release = 0
	}
	if !delimitersOK(d) || d.Release != 0 && (d.Release == d.Element || d.Release == d.Component || d.Release == d.Segment || isAlnum(d.Release)) {
		return p.sc.fail("UNA delimiters are not distinct punctuation")
	}
	p.sc.d = d
	return nil
}

// join returns element i's components joined with ':' (e.g. "UNOC:3").
func join(seg segment, i int) string {
	if i < 1 || i > len(seg.elems) {
		return ""
	}
	return joinComps(seg.elems[i-1])
}

func joinComps(c []string) string {
	s := ""
	for i, v := range c {
		if i > 0 {
			s += ":"
		}
		s += v
	}
	// Trailing empty components carry nothing.
	for len(s) > 0 && s[len(s)-1] == ':' {
		s = s[:len(s)-1]
	}
	return s
}
