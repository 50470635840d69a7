package edi

import (
	"errors"
	"fmt"
	"strings"
)

// Segment is one segment as a SegmentReader read it: its tag, its
// elements, each element's repetitions and each repetition's components,
// with release characters removed. A Segment returned by Next, and every
// byte slice it gives, is valid until the next call of Next.
type Segment struct {
	// Tag is the segment ID ("ISA", "BEG", "UNH").
	Tag string
	// Offset is the byte offset of the tag's first byte in the document.
	Offset int64
	// Index is the segment's position in its interchange, the ISA or UNB
	// being 1 (a UNA, which precedes its UNB, is 0). Segments before the
	// first interchange header count from the start of the document.
	Index int64
	// SetPosition is the segment's position in its transaction set or
	// message, the ST or UNH being 1 and the SE or UNT the last, as X12
	// AK3/IK3 and EDIFACT UCS count; 0 outside a set.
	SetPosition int
	// Skipped is true when SegmentReaderOptions.Select rejected the tag:
	// the segment has no elements.
	Skipped bool
	// Unterminated is true when the document ended before the segment's
	// terminator.
	Unterminated bool

	data []byte
	// comps holds the start and end in data of each component; reps[r]
	// is the first component of repetition r and elems[e] the first
	// repetition of element e+1, each with a final sentinel.
	comps []int32
	reps  []int32
	elems []int32
}

func (s *Segment) clear() {
	*s = Segment{comps: s.comps[:0], reps: s.reps[:0], elems: s.elems[:0]}
}

// Len is the number of elements after the tag ("BEG*00*SA" has 2).
func (s *Segment) Len() int {
	if len(s.elems) == 0 {
		return 0
	}
	return len(s.elems) - 1
}

// Element returns element i, counted from 1 as the standards do ("BEG03"
// is Element(3)); an element past the last one is empty (no repetitions).
func (s *Segment) Element(i int) Element {
	if i < 1 || i > s.Len() {
		return Element{}
	}
	return Element{s: s, first: s.elems[i-1], end: s.elems[i]}
}

// Element is a view of one data element of a Segment, or of one of its
// repetitions; it is valid as long as its Segment.
type Element struct {
	s          *Segment
	first, end int32 // repetitions
}

// Repetitions is the number of repetitions: 1 for a present element
// without a repetition separator, 0 for an absent one.
func (e Element) Repetitions() int { return int(e.end - e.first) }

// Repetition returns repetition r (counted from 0) as an Element of one
// repetition; past the last one it is empty.
func (e Element) Repetition(r int) Element {
	if r < 0 || r >= e.Repetitions() {
		return Element{}
	}
	return Element{s: e.s, first: e.first + int32(r), end: e.first + int32(r) + 1}
}

// Components is the number of components of the first repetition: 1 for
// a simple element, 0 for an absent one.
func (e Element) Components() int {
	if e.Repetitions() == 0 {
		return 0
	}
	return int(e.s.reps[e.first+1] - e.s.reps[e.first])
}

// Component returns component c (counted from 1, as "C04002" is the second
// component of composite C040) of the first repetition; nil when absent.
func (e Element) Component(c int) []byte {
	if c < 1 || c > e.Components() {
		return nil
	}
	k := e.s.reps[e.first] + int32(c) - 1
	return e.s.data[e.s.comps[2*k]:e.s.comps[2*k+1]]
}

// Value is the first component of the first repetition: the value of a
// simple element.
func (e Element) Value() []byte { return e.Component(1) }

// el returns component c (from 0) of element i (from 1) of the first
// repetition as a string, "" when absent: the envelope reader's accessor.
func (s *Segment) el(i, c int) string { return string(s.Element(i).Component(c + 1)) }

// joinFrom returns element i's components from c (from 0) joined with ':',
// trailing empty ones left out ("UNOC:3", "D:96A:UN").
func (s *Segment) joinFrom(i, c int) string {
	e := s.Element(i)
	var b strings.Builder
	for k := c + 1; k <= e.Components(); k++ {
		if k > c+1 {
			b.WriteByte(':')
		}
		b.Write(e.Component(k))
	}
	return strings.TrimRight(b.String(), ":")
}

// split cuts raw (the tag ends at t) into elements, repetitions and
// components; without release characters every value is a slice of raw.
func (sr *SegmentReader) split(s *Segment, raw []byte, t int) {
	s.data = raw
	s.elems = append(s.elems[:0], 0)
	s.reps = append(s.reps[:0], 0)
	s.comps = s.comps[:0]
	start := t + 1
	for i := t + 1; i < len(raw); i++ {
		cl := sr.class[raw[i]]
		if cl == clData {
			continue
		}
		s.comps = append(s.comps, int32(start), int32(i))
		start = i + 1
		switch cl {
		case clElement:
			s.reps = append(s.reps, int32(len(s.comps)/2))
			s.elems = append(s.elems, int32(len(s.reps)-1))
		case clRepetition:
			s.reps = append(s.reps, int32(len(s.comps)/2))
		}
	}
	s.finish(start, len(raw))
}

// splitReleased is split for a segment with release characters: raw
// (which the reader owns) is unescaped in place.
func (sr *SegmentReader) splitReleased(s *Segment, raw []byte, t int) {
	s.elems = append(s.elems[:0], 0)
	s.reps = append(s.reps[:0], 0)
	s.comps = s.comps[:0]
	w := t + 1
	start := w
	for i := t + 1; i < len(raw); i++ {
		c := raw[i]
		cl := sr.class[c]
		switch cl {
		case clData:
			raw[w] = c
			w++
			continue
		case clRelease:
			// A release character as the last byte (an unterminated
			// segment) releases nothing and is dropped.
			if i+1 < len(raw) {
				i++
				raw[w] = raw[i]
				w++
			}
			continue
		}
		s.comps = append(s.comps, int32(start), int32(w))
		start = w
		switch cl {
		case clElement:
			s.reps = append(s.reps, int32(len(s.comps)/2))
			s.elems = append(s.elems, int32(len(s.reps)-1))
		case clRepetition:
			s.reps = append(s.reps, int32(len(s.comps)/2))
		}
	}
	s.data = raw[:w]
	s.finish(start, w)
}

// finish closes the last component and sets the sentinels.
func (s *Segment) finish(start, end int) {
	s.comps = append(s.comps, int32(start), int32(end))
	s.reps = append(s.reps, int32(len(s.comps)/2))
	s.elems = append(s.elems, int32(len(s.reps)-1))
}

// splitPlain cuts raw at each sep after the tag (the ISA): one repetition
// of one component per element.
func (s *Segment) splitPlain(raw []byte, t int, sep byte) {
	s.data = raw
	s.elems = append(s.elems[:0], 0)
	s.reps = append(s.reps[:0], 0)
	s.comps = s.comps[:0]
	start := t + 1
	for i := t + 1; i < len(raw); i++ {
		if raw[i] == sep {
			s.comps = append(s.comps, int32(start), int32(i))
			start = i + 1
			s.reps = append(s.reps, int32(len(s.comps)/2))
			s.elems = append(s.elems, int32(len(s.reps)-1))
		}
	}
	s.finish(start, len(raw))
}

// readISA reads an ISA: the byte after "ISA" is the element separator, the
// byte after the sixteenth separator the component separator (ISA16) and
// the next one the segment terminator (the ISA's length is fixed by the
// standard but not always by senders). ISA11 is the repetition separator
// from version 00402 on.
func (sr *SegmentReader) readISA(s *Segment) error {
	buf := append(sr.buf[:0], "ISA"...)
	sr.index = 0
	if _, err := sr.br.Discard(3); err != nil {
		return err
	}
	sr.off += 3
	elem, err := sr.br.ReadByte()
	if err != nil {
		return sr.fail("ISA truncated")
	}
	sr.off++
	buf = append(buf, elem)
	for seps := 1; seps < 16; {
		c, err := sr.br.ReadByte()
		if err != nil {
			return sr.fail("ISA truncated")
		}
		sr.off++
		if len(buf) > 256 {
			return sr.fail("ISA longer than 256 bytes")
		}
		if c == elem {
			seps++
		}
		buf = append(buf, c)
	}
	comp, err1 := sr.br.ReadByte()
	term, err2 := sr.br.ReadByte()
	if err1 != nil || err2 != nil {
		return sr.fail("ISA truncated")
	}
	sr.off += 2
	buf = append(buf, comp)
	sr.buf = buf
	d := Delimiters{Element: elem, Component: comp, Segment: term}
	if !delimitersOK(d) {
		return sr.fail("ISA delimiters are not distinct punctuation")
	}
	s.Tag = "ISA"
	s.splitPlain(buf, 3, elem)
	if s.Len() < 16 {
		return sr.fail("ISA has fewer than 16 elements")
	}
	version := strings.TrimSpace(string(s.Element(12).Value()))
	if v := s.Element(11).Value(); version >= "00402" && len(v) == 1 && !isAlnum(v[0]) && !isSpace(v[0]) &&
		v[0] != elem && v[0] != comp && v[0] != term {
		d.Repetition = v[0]
	}
	sr.setDelimiters(d)
	return nil
}

// readUNA reads the service string advice: component, element, decimal
// mark, release character (space: none), repetition separator (space:
// none), terminator. The segment has one element, the six characters.
func (sr *SegmentReader) readUNA(s *Segment) error {
	b, _ := sr.br.Peek(9)
	if len(b) < 9 {
		n, _ := sr.br.Discard(len(b))
		sr.off += int64(n)
		return sr.fail("UNA truncated")
	}
	sr.buf = append(sr.buf[:0], b...)
	n, _ := sr.br.Discard(9)
	sr.off += int64(n)
	a := sr.buf[3:9]
	d := Delimiters{Component: a[0], Element: a[1], Decimal: a[2], Release: a[3], Segment: a[5]}
	if d.Release == ' ' {
		d.Release = 0
	}
	if !delimitersOK(d) || d.Release != 0 && (d.Release == d.Element || d.Release == d.Component || d.Release == d.Segment || isAlnum(d.Release)) {
		return sr.fail("UNA delimiters are not distinct punctuation")
	}
	if r := a[4]; !isAlnum(r) && !isSpace(r) && r != d.Element && r != d.Component && r != d.Segment && r != d.Release {
		d.Repetition = r
	}
	sr.setDelimiters(d)
	sr.una = true
	s.Tag = "UNA"
	s.data = sr.buf
	s.elems = append(s.elems[:0], 0)
	s.reps = append(s.reps[:0], 0)
	s.comps = s.comps[:0]
	s.finish(3, 9)
	return nil
}

// ErrDelimiterInValue is wrapped by AppendTo's error for a value that
// holds a delimiter the syntax cannot escape (X12 has no release
// character).
var ErrDelimiterInValue = errors.New("value holds a delimiter")

// AppendTo appends s written with d to dst: the tag, each element after
// d.Element, its repetitions separated by d.Repetition and its components
// by d.Component, then d.Segment. With a release character (EDIFACT) every
// delimiter inside a value is released; without one a value holding a
// delimiter, or an element with repetitions but no repetition separator,
// is an error wrapping ErrDelimiterInValue naming the element, and dst is
// returned unchanged. An X12 ISA's elements are written as they are (ISA11
// and ISA16 are delimiters), and so are a UNA's six characters.
func (s *Segment) AppendTo(dst []byte, d Delimiters) ([]byte, error) {
	orig := len(dst)
	if bad(s.Tag, d.Element, d.Segment) {
		return dst[:orig], fmt.Errorf("%w: tag %q", ErrDelimiterInValue, s.Tag)
	}
	dst = append(dst, s.Tag...)
	if s.Tag == "UNA" {
		dst = append(dst, s.Element(1).Value()...)
		return dst, nil
	}
	plain := s.Tag == "ISA" && d.Release == 0
	for i := 1; i <= s.Len(); i++ {
		dst = append(dst, d.Element)
		e := s.Element(i)
		if e.Repetitions() > 1 && d.Repetition == 0 {
			return dst[:orig], fmt.Errorf("%w: %s%02d repeats and there is no repetition separator", ErrDelimiterInValue, s.Tag, i)
		}
		for r := 0; r < e.Repetitions(); r++ {
			if r > 0 {
				dst = append(dst, d.Repetition)
			}
			rep := e.Repetition(r)
			for c := 1; c <= rep.Components(); c++ {
				if c > 1 {
					dst = append(dst, d.Component)
				}
				v := rep.Component(c)
				if plain {
					dst = append(dst, v...)
					continue
				}
				var ok bool
				if dst, ok = appendValue(dst, v, d); !ok {
					return dst[:orig], fmt.Errorf("%w: %s%02d", ErrDelimiterInValue, s.Tag, i)
				}
			}
		}
	}
	return append(dst, d.Segment), nil
}

// appendValue appends v, releasing delimiters; false when v holds one and
// d has no release character.
func appendValue(dst, v []byte, d Delimiters) ([]byte, bool) {
	for _, c := range v {
		if c == d.Element || c == d.Component || c == d.Segment || d.Repetition != 0 && c == d.Repetition || d.Release != 0 && c == d.Release {
			if d.Release == 0 {
				return dst, false
			}
			dst = append(dst, d.Release)
		}
		dst = append(dst, c)
	}
	return dst, true
}

func bad(tag string, seps ...byte) bool {
	for _, c := range seps {
		if strings.IndexByte(tag, c) >= 0 {
			return true
		}
	}
	return false
}
