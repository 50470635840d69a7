package edi

import "strconv"

func (p *parser) edifact(seg *Segment) error {
	b := &p.b
	switch seg.Tag {
	case "UNA":
		// The reader took the delimiters from it.
		return nil
	case "UNB":
		b.openInterchange(Interchange{
			Version:       seg.joinFrom(1, 0),
			Sender:        Party{ID: seg.el(2, 0), Qualifier: seg.el(2, 1)},
			Receiver:      Party{ID: seg.el(3, 0), Qualifier: seg.el(3, 1)},
			Date:          seg.el(4, 0),
			Time:          seg.el(4, 1),
			ControlNumber: seg.el(5, 0),
			AckRequested:  seg.el(9, 0) == "1",
			Test:          seg.el(11, 0) == "1",
			Delimiters:    p.sr.Delimiters(),
		})
		return nil
	}
	if b.ic == nil {
		return &SyntaxError{Offset: seg.Offset, Reason: "segment " + strconv.Quote(seg.Tag) + " outside an interchange"}
	}
	switch seg.Tag {
	case "UNZ":
		b.closeInterchange(count(seg.el(1, 0)), seg.el(2, 0), true)
	case "UNG":
		b.openGroup(Group{
			FunctionalID: seg.el(1, 0),
			Sender:       Party{ID: seg.el(2, 0), Qualifier: seg.el(2, 1)},
			Receiver:     Party{ID: seg.el(3, 0), Qualifier: seg.el(3, 1)},
			Date:         seg.el(4, 0), Time: seg.el(4, 1),
			ControlNumber: seg.el(5, 0),
			Version:       seg.joinFrom(7, 0),
		})
	case "UNE":
		if b.g == nil || b.g.Implicit {
			addProblem(&b.ic.Problems, ProblemStructure)
			return nil
		}
		b.closeGroup(count(seg.el(1, 0)), seg.el(2, 0), true)
	case "UNH":
		s := Set{ControlNumber: seg.el(1, 0), Type: seg.el(2, 0), Ack: newAck(seg.el(2, 0))}
		s.Version = seg.joinFrom(2, 1)
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
