package edi

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
)

// Parse reads the envelopes of the EDI document in r with the given limits
// (zero fields take DefaultLimits). It returns ErrNotEDI, reading at most
// about 1 KiB, when r does not start like X12 or EDIFACT; a *SyntaxError,
// with what was read so far, when an envelope segment cannot be read; and
// any error of r. Disagreeing trailers are not errors: they are Problems
// of the level they belong to.
func Parse(r io.Reader, lim Limits) (*Document, error) {
	br, ok := r.(*bufio.Reader)
	if !ok || br.Size() < maxLeadingSpace+6 {
		// The reader copies what it keeps: the buffer is free again
		// when Parse returns.
		br = readers.Get().(*bufio.Reader)
		br.Reset(r)
		defer func() {
			br.Reset(nil)
			readers.Put(br)
		}()
	}
	std, err := Detect(br)
	if err != nil {
		return nil, err
	}
	lim = lim.orDefault()
	p := &parser{b: builder{lim: lim}}
	sr := segmentReaders.Get().(*SegmentReader)
	defer func() {
		sr.br = nil
		segmentReaders.Put(sr)
	}()
	if err := sr.reset(br, SegmentReaderOptions{MaxSegment: min(lim.MaxSegment, maxSegmentLimit), Select: p.keep}); err != nil {
		return nil, err
	}
	p.sr = sr
	p.b.doc.Standard = std
	if std == X12 {
		p.tags = x12Tags
		err = p.run(p.x12)
	} else {
		p.tags = edifactTags
		err = p.run(p.edifact)
	}
	p.b.finish()
	return &p.b.doc, err
}

// readers are Parse's buffered readers, and segmentReaders its segment
// readers, reused: a receiver parses the envelope of every payload it
// receives.
var (
	readers        = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4096) }}
	segmentReaders = sync.Pool{New: func() any { return new(SegmentReader) }}
)

type parser struct {
	b    builder
	sr   *SegmentReader
	tags map[string]bool
}

var (
	x12Tags     = map[string]bool{"ISA": true, "IEA": true, "GS": true, "GE": true, "ST": true, "SE": true}
	edifactTags = map[string]bool{"UNB": true, "UNZ": true, "UNG": true, "UNE": true, "UNH": true, "UNT": true}
	ackTags     = map[string]bool{
		"AK1": true, "AK2": true, "AK3": true, "AK4": true, "IK3": true, "IK4": true, "AK5": true, "IK5": true, "AK9": true,
		"UCI": true, "UCF": true, "UCM": true, "UCS": true, "UCD": true,
	}
)

// keep tells the scanner which segments to hold: envelopes always, an
// X12 TA1 outside a set, and the response segments inside an
// acknowledgement.
func (p *parser) keep(tag string) bool {
	if p.tags[tag] || tag == "TA1" && p.b.set == nil && p.b.ic != nil && p.b.doc.Standard == X12 {
		return true
	}
	return p.b.set != nil && p.b.set.Ack != nil && ackTags[tag]
}

func (p *parser) run(handle func(*Segment) error) error {
	for {
		seg, err := p.sr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := handle(seg); err != nil {
			return err
		}
	}
}

// count parses a trailer count; -1 when it is not a number.
func count(s string) int {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

func (p *parser) x12(seg *Segment) error {
	b := &p.b
	if seg.Tag == "ISA" {
		b.openInterchange(p.interchangeISA(seg))
		return nil
	}
	if b.ic == nil {
		return &SyntaxError{Offset: seg.Offset, Reason: "segment " + strconv.Quote(seg.Tag) + " outside an interchange"}
	}
	switch seg.Tag {
	case "IEA":
		b.closeInterchange(count(seg.el(1, 0)), seg.el(2, 0), true)
	case "GS":
		b.openGroup(Group{
			FunctionalID: seg.el(1, 0), Sender: Party{ID: seg.el(2, 0)}, Receiver: Party{ID: seg.el(3, 0)},
			Date: seg.el(4, 0), Time: seg.el(5, 0), ControlNumber: seg.el(6, 0), Version: seg.el(8, 0),
		})
	case "GE":
		if b.g == nil || b.g.Implicit {
			addProblem(&b.ic.Problems, ProblemStructure)
			return nil
		}
		b.closeGroup(count(seg.el(1, 0)), seg.el(2, 0), true)
	case "ST":
		if b.g == nil {
			addProblem(&b.ic.Problems, ProblemStructure)
		}
		b.openSet(Set{Type: seg.el(1, 0), ControlNumber: seg.el(2, 0), Version: seg.el(3, 0), Ack: newAck(seg.el(1, 0))})
	case "SE":
		if b.set == nil {
			addProblem(&b.ic.Problems, ProblemStructure)
			return nil
		}
		b.closeSet(count(seg.el(1, 0)), seg.el(2, 0), true)
	case "TA1":
		// An interchange acknowledgement stands between ISA and GS.
		if b.set != nil {
			b.body()
			return nil
		}
		if len(b.ic.TA1) < b.lim.MaxAckEntries && !seg.Skipped {
			b.ic.TA1 = append(b.ic.TA1, &AckReport{Kind: "TA1", Sender: b.ic.Sender, Receiver: b.ic.Receiver,
				Interchange: &InterchangeAck{ControlNumber: seg.el(1, 0), Action: seg.el(4, 0), Code: seg.el(5, 0)}})
		}
	default:
		b.body()
		p.ackSegment(seg)
	}
	return nil
}

// interchangeISA is the interchange an ISA opens.
func (p *parser) interchangeISA(seg *Segment) Interchange {
	field := func(i int) string { return strings.TrimSpace(string(seg.Element(i).Value())) }
	return Interchange{
		Sender:        Party{Qualifier: field(5), ID: field(6)},
		Receiver:      Party{Qualifier: field(7), ID: field(8)},
		Date:          field(9),
		Time:          field(10),
		Version:       field(12),
		ControlNumber: field(13),
		AckRequested:  field(14) == "1",
		Test:          field(15) == "T",
		Delimiters:    p.sr.Delimiters(),
	}
}

func delimitersOK(d Delimiters) bool {
	for _, c := range []byte{d.Element, d.Component} {
		if isAlnum(c) || isSpace(c) || c == d.Segment {
			return false
		}
	}
	return d.Element != d.Component && !isAlnum(d.Segment) && d.Segment != ' '
}
