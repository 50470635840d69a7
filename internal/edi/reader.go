package edi

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
)

// DefaultMaxSegment is the longest segment a SegmentReader reads unless
// told otherwise: 1 MiB.
const DefaultMaxSegment = 1 << 20

// maxSegmentLimit keeps positions inside a segment within int32.
const maxSegmentLimit = 1 << 30

// maxSelectTag is the longest tag SegmentReaderOptions.Select is asked
// about; real tags have two or three letters.
const maxSelectTag = 8

// maxInterned bounds the distinct tags a reader keeps as strings.
const maxInterned = 512

// ErrSegmentTooLong is wrapped by the *SyntaxError a SegmentReader returns
// for a segment longer than its MaxSegment.
var ErrSegmentTooLong = errors.New("segment longer than the limit")

// SegmentReaderOptions configure a SegmentReader. The zero value reads
// every segment up to DefaultMaxSegment bytes.
type SegmentReaderOptions struct {
	// MaxSegment is the longest segment read, in bytes without its
	// terminator (0: DefaultMaxSegment; at most 1 GiB). A longer one is a
	// *SyntaxError wrapping ErrSegmentTooLong that names the limit and the
	// segment's position. Segments Select skips are not bounded: they are
	// never held.
	MaxSegment int
	// Select, when set, is asked for the tag of each segment (tags of at
	// most 8 bytes; a longer tag is not selected and reads as ""). A
	// segment it rejects is skipped at any length, a buffer at a time:
	// Next returns it with Skipped set, its tag and positions, and no
	// elements. An X12 ISA and an EDIFACT UNA are always read: they set
	// the delimiters.
	Select func(tag string) bool
}

// SegmentReader reads the segments of an X12 or EDIFACT document from a
// stream, one at a time, holding at most one segment in memory.
//
// The standard is told from the first bytes (see Detect). X12 delimiters
// come from each ISA: the element separator is the byte after "ISA", the
// component separator the byte after the sixteenth element separator
// (ISA16) and the segment terminator the byte after it; from version 00402
// on ISA11 is the repetition separator. EDIFACT delimiters come from UNA
// or are the defaults ":+.? '"; the release character escapes any
// delimiter (and itself); a UNA's fifth character other than a space is
// the repetition separator, and without a UNA a UNB of syntax version 4
// or later makes "*" the repetition separator. Whitespace (CR, LF, tab,
// space) between segments and a UTF-8 byte-order mark before the first
// are skipped. A segment ended by the end of the input instead of its
// terminator is returned with Unterminated set.
//
// A tag is the bytes before the first element separator, taken as they
// are (tags are letters and digits; a release character in one is not
// interpreted). An ISA's elements and a UNA's six service characters are
// not split further: they hold delimiters by design.
//
// A SegmentReader is not safe for concurrent use.
type SegmentReader struct {
	br  *bufio.Reader
	max int
	sel func(string) bool

	started bool
	std     Standard
	d       Delimiters
	class   [256]byte
	// una is true between a UNA and the UNB it precedes.
	una bool
	// after are the delimiters from the next segment on when hasAfter (a
	// UNB changed them).
	after    Delimiters
	hasAfter bool

	off    int64 // bytes consumed
	index  int64 // the last segment's Index
	setPos int   // the next segment's SetPosition when it continues a set
	err    error

	seg  Segment
	buf  []byte
	tags map[string]string
}

// Byte classes of the split loop.
const (
	clData byte = iota
	clElement
	clComponent
	clRepetition
	clRelease
)

// NewSegmentReader returns a reader of the segments in r. It reads r
// through a 64 KiB buffer, or through r itself when r is a *bufio.Reader
// of at least 1030 bytes (what Detect peeks). Invalid options (a negative or too large MaxSegment)
// are an error.
func NewSegmentReader(r io.Reader, opts SegmentReaderOptions) (*SegmentReader, error) {
	sr := &SegmentReader{}
	if err := sr.reset(r, opts); err != nil {
		return nil, err
	}
	return sr, nil
}

// reset prepares sr for a new document, keeping its buffers.
func (sr *SegmentReader) reset(r io.Reader, opts SegmentReaderOptions) error {
	switch {
	case opts.MaxSegment < 0 || opts.MaxSegment > maxSegmentLimit:
		return fmt.Errorf("segment reader: MaxSegment %d: want 0 (default %d) to %d bytes", opts.MaxSegment, DefaultMaxSegment, maxSegmentLimit)
	case opts.MaxSegment == 0:
		opts.MaxSegment = DefaultMaxSegment
	}
	br, ok := r.(*bufio.Reader)
	if !ok || br.Size() < maxLeadingSpace+6 {
		br = bufio.NewReaderSize(r, 64<<10)
	}
	*sr = SegmentReader{br: br, max: opts.MaxSegment, sel: opts.Select, seg: sr.seg, buf: sr.buf[:0], tags: sr.tags}
	return nil
}

// Standard is the document's standard, "" before the first Next.
func (sr *SegmentReader) Standard() Standard { return sr.std }

// Delimiters are the delimiters the segment Next returned last was read
// with (an ISA's or UNA's own; a UNB's repetition separator applies from
// the next segment on): writing it back with them gives its bytes.
func (sr *SegmentReader) Delimiters() Delimiters { return sr.d }

// Offset is the number of bytes read from the document so far.
func (sr *SegmentReader) Offset() int64 { return sr.off }

// Next returns the next segment, or io.EOF after the last one. The
// Segment and the bytes it gives are valid until the next call of Next:
// a caller that keeps a value copies it. It returns ErrNotEDI when the
// document does not start like X12 or EDIFACT, a *SyntaxError when a
// segment cannot be read, and any error of the underlying reader; an
// error is returned again by every later call.
func (sr *SegmentReader) Next() (*Segment, error) {
	if sr.err != nil {
		return nil, sr.err
	}
	seg, err := sr.next()
	if err != nil {
		sr.err = err
		return nil, err
	}
	return seg, nil
}

func (sr *SegmentReader) next() (*Segment, error) {
	if !sr.started {
		if err := sr.start(); err != nil {
			return nil, err
		}
	}
	if sr.hasAfter {
		sr.setDelimiters(sr.after)
		sr.hasAfter = false
	}
	if err := sr.skipSpace(); err != nil {
		return nil, err
	}
	s := &sr.seg
	s.clear()
	s.Offset = sr.off
	var err error
	head, _ := sr.br.Peek(3)
	switch {
	case sr.std == X12 && string(head) == "ISA":
		err = sr.readISA(s)
	case sr.std == EDIFACT && string(head) == "UNA":
		err = sr.readUNA(s)
	default:
		err = sr.readSegment(s)
	}
	if err != nil {
		return nil, err
	}
	sr.place(s)
	return s, nil
}

// start detects the standard and skips a byte-order mark.
func (sr *SegmentReader) start() error {
	sr.started = true
	std, err := Detect(sr.br)
	if err != nil {
		return err
	}
	sr.std = std
	if std == X12 {
		sr.setDelimiters(X12Defaults)
	} else {
		sr.setDelimiters(EDIFACTDefaults)
	}
	if b, _ := sr.br.Peek(3); string(b) == "\xef\xbb\xbf" {
		n, _ := sr.br.Discard(3)
		sr.off += int64(n)
	}
	return nil
}

func (sr *SegmentReader) setDelimiters(d Delimiters) {
	sr.d = d
	sr.class = [256]byte{}
	sr.class[d.Element] = clElement
	sr.class[d.Component] = clComponent
	if d.Repetition != 0 {
		sr.class[d.Repetition] = clRepetition
	}
	if d.Release != 0 {
		sr.class[d.Release] = clRelease
	}
}

// skipSpace skips whitespace between segments; io.EOF at the end.
func (sr *SegmentReader) skipSpace() error {
	for {
		c, err := sr.br.ReadByte()
		if err != nil {
			return err
		}
		if !isSpace(c) || c == sr.d.Element {
			return sr.br.UnreadByte()
		}
		sr.off++
	}
}

// place sets the segment's Index and SetPosition.
func (sr *SegmentReader) place(s *Segment) {
	switch s.Tag {
	case "UNA":
		// Service string advice: before the interchange it describes.
		s.Index, s.SetPosition = 0, 0
		return
	case "ISA", "UNB":
		sr.index = 1
	default:
		sr.index++
	}
	s.Index = sr.index
	switch s.Tag {
	case "ST", "UNH":
		sr.setPos = 1
	case "ISA", "IEA", "GS", "GE", "UNB", "UNZ", "UNG", "UNE":
		sr.setPos = 0
	default:
		if sr.setPos > 0 {
			sr.setPos++
		}
	}
	s.SetPosition = sr.setPos
	if s.Tag == "SE" || s.Tag == "UNT" {
		sr.setPos = 0
	}
}

// fail is a SyntaxError at the current byte in the segment being read.
func (sr *SegmentReader) fail(reason string) error {
	return &SyntaxError{Offset: sr.off, Segment: sr.index + 1, Reason: reason}
}

// intern returns tag as a string, shared between segments with the same
// tag so that reading them allocates nothing.
func (sr *SegmentReader) intern(tag []byte) string {
	if t, ok := sr.tags[string(tag)]; ok {
		return t
	}
	t := string(tag)
	if len(tag) <= maxSelectTag && len(sr.tags) < maxInterned {
		if sr.tags == nil {
			sr.tags = make(map[string]string)
		}
		sr.tags[t] = t
	}
	return t
}

// readSegment reads a segment up to its unreleased terminator.
func (sr *SegmentReader) readSegment(s *Segment) error {
	raw, err := sr.readRaw(s)
	if err != nil || s.Skipped {
		return err
	}
	t := bytes.IndexByte(raw, sr.d.Element)
	if t < 0 {
		s.Tag = sr.intern(raw)
		s.data = raw
		return nil
	}
	s.Tag = sr.intern(raw[:t])
	if sr.std == EDIFACT && s.Tag == "UNB" && !sr.una {
		// No UNA: the repetition separator depends on the syntax version
		// this UNB gives; the UNB itself has none.
		d := sr.d
		d.Repetition = 0
		sr.setDelimiters(d)
	}
	if sr.d.Release != 0 && bytes.IndexByte(raw[t+1:], sr.d.Release) >= 0 {
		if len(sr.buf) == 0 {
			// raw is the bufio reader's: unescape a copy.
			sr.buf = append(sr.buf, raw...)
			raw = sr.buf
		}
		sr.splitReleased(s, raw, t)
	} else {
		sr.split(s, raw, t)
	}
	if s.Tag == "UNB" && sr.std == EDIFACT {
		sr.afterUNB(s)
	}
	return nil
}

// afterUNB sets the repetition separator of an interchange without UNA,
// from the segment after the UNB on: "*" from syntax version 4 on.
func (sr *SegmentReader) afterUNB(s *Segment) {
	if !sr.una {
		d := sr.d
		d.Repetition = 0
		if v := s.Element(1).Component(2); len(v) == 1 && v[0] >= '4' && v[0] <= '9' && d.Element != '*' && d.Component != '*' && d.Segment != '*' && d.Release != '*' {
			d.Repetition = '*'
		}
		sr.after, sr.hasAfter = d, true
	}
	sr.una = false
}

// readRaw reads a segment's bytes up to its unreleased terminator and
// returns them without it: a slice of the buffered reader when the
// segment fits in one buffer, of sr.buf otherwise. A segment Select
// rejects is skipped and nil is returned.
func (sr *SegmentReader) readRaw(s *Segment) ([]byte, error) {
	sr.buf = sr.buf[:0]
	pending, first, keep := false, true, true
	for {
		chunk, err := sr.br.ReadSlice(sr.d.Segment)
		sr.off += int64(len(chunk))
		done := false
		body := chunk
		switch {
		case err == nil:
			body = chunk[:len(chunk)-1]
			if sr.d.Release != 0 && releasedAfter(body, pending, sr.d.Release) {
				pending = false
				body = chunk
			} else {
				done = true
			}
		case errors.Is(err, bufio.ErrBufferFull):
			if sr.d.Release != 0 {
				pending = releasedAfter(chunk, pending, sr.d.Release)
			}
		case errors.Is(err, io.EOF):
			done, s.Unterminated = true, true
		default:
			return nil, err
		}
		if first && sr.sel != nil {
			keep = sr.selectTag(s, body)
		}
		if keep {
			if len(sr.buf)+len(body) > sr.max {
				return nil, &SyntaxError{Offset: s.Offset, Segment: sr.index + 1, Err: ErrSegmentTooLong,
					Reason: fmt.Sprintf("segment %q longer than the limit of %d bytes (MaxSegment)", tagOf(sr.buf, body, sr.d.Element), sr.max)}
			}
			if first && done {
				return body, nil
			}
			sr.buf = append(sr.buf, body...)
		}
		first = false
		if done {
			if !keep {
				return nil, nil
			}
			return sr.buf, nil
		}
	}
}

// selectTag asks Select about the tag at the start of b and marks the
// segment skipped when it is not wanted.
func (sr *SegmentReader) selectTag(s *Segment, b []byte) bool {
	n := bytes.IndexByte(b[:min(len(b), maxSelectTag+1)], sr.d.Element)
	if n < 0 {
		n = len(b)
	}
	if n > maxSelectTag {
		s.Skipped = true
		return false
	}
	tag := sr.intern(b[:n])
	if sr.sel(tag) {
		return true
	}
	s.Tag, s.Skipped = tag, true
	return false
}

// tagOf is a printable tag for an error about the segment that starts
// with a then b.
func tagOf(a, b []byte, sep byte) string {
	head := append(a[:len(a):len(a)], b[:min(len(b), 16)]...)
	if i := bytes.IndexByte(head, sep); i >= 0 {
		head = head[:i]
	}
	if len(head) > maxSelectTag {
		head = head[:maxSelectTag]
	}
	return strings.ToValidUTF8(string(head), "?")
}

// releasedAfter reports whether the byte after b is released: b ends in
// an odd run of release characters rel (pending: b's first byte is itself
// released by the byte before b).
func releasedAfter(b []byte, pending bool, rel byte) bool {
	if len(b) == 0 {
		return pending
	}
	k := 0
	for k < len(b) && b[len(b)-1-k] == rel {
		k++
	}
	if k == len(b) && pending {
		k--
	}
	return k%2 == 1
}
