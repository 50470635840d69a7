package edi

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// Delimiters are the separators of an interchange. Release is 0 when the
// syntax has none (X12); Repetition is 0 when unused.
type Delimiters struct {
	Element    byte
	Component  byte
	Segment    byte
	Repetition byte
	Release    byte
	Decimal    byte
}

// EDIFACTDefaults are the UNOA/UNOB/UNOC delimiters used without a UNA.
var EDIFACTDefaults = Delimiters{Element: '+', Component: ':', Segment: '\'', Release: '?', Decimal: '.'}

// X12Defaults are the delimiters edihub writes X12 with.
var X12Defaults = Delimiters{Element: '*', Component: '>', Segment: '~', Repetition: '^'}

// maxLeadingSpace is how much whitespace may precede the first segment.
const maxLeadingSpace = 1024

// Detect reports the standard of the document in r from its first bytes
// (after up to 1 KiB of whitespace and a UTF-8 byte-order mark), peeking
// only: r is not advanced. It returns ErrNotEDI for anything else.
func Detect(r *bufio.Reader) (Standard, error) {
	b, _ := r.Peek(maxLeadingSpace + 6)
	b = bytes.TrimPrefix(b, []byte("\xef\xbb\xbf"))
	b = bytes.TrimLeft(b, " \t\r\n")
	switch {
	case len(b) < 4:
		return "", ErrNotEDI
	case bytes.HasPrefix(b, []byte("ISA")) && !isAlnum(b[3]):
		return X12, nil
	case (bytes.HasPrefix(b, []byte("UNA")) || bytes.HasPrefix(b, []byte("UNB"))) && !isAlnum(b[3]):
		return EDIFACT, nil
	}
	return "", ErrNotEDI
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z'
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// scanner reads segments one at a time. Only segments whose tag keep
// accepts are held (up to max bytes); the others are skipped.
type scanner struct {
	r    *bufio.Reader
	d    Delimiters
	max  int
	off  int64
	buf  []byte
	keep func(tag string) bool
	// header is the tag ("ISA", "UNA") that made next stop after three
	// bytes: the caller reads the header with its own delimiters.
	header map[string]bool
}

func (s *scanner) readByte() (byte, error) {
	c, err := s.r.ReadByte()
	if err == nil {
		s.off++
	}
	return c, err
}

func (s *scanner) fail(reason string) error { return &SyntaxError{Offset: s.off, Reason: reason} }

// skipSpace skips whitespace between segments; it returns io.EOF at the end.
func (s *scanner) skipSpace() error {
	for {
		c, err := s.r.ReadByte()
		if err != nil {
			return err
		}
		if !isSpace(c) || c == s.d.Element {
			return s.r.UnreadByte()
		}
		s.off++
	}
}

// segment is one segment: its tag, and its elements split into components
// (release characters removed) when the tag was kept.
type segment struct {
	tag    string
	elems  [][]string
	offset int64
}

// el returns component c (0-based) of element i (1-based, as in "ISA06"),
// or "" when absent.
func (g *segment) el(i, c int) string {
	if i < 1 || i > len(g.elems) || c >= len(g.elems[i-1]) {
		return ""
	}
	return g.elems[i-1][c]
}

// next reads the next segment; io.EOF after the last one. A header tag is
// returned as soon as its three letters are read.
func (s *scanner) next() (segment, error) {
	if err := s.skipSpace(); err != nil {
		return segment{}, err
	}
	seg := segment{offset: s.off}
	var tag [8]byte
	n := 0
	for {
		c, err := s.readByte()
		if errors.Is(err, io.EOF) {
			seg.tag = string(tag[:n])
			return seg, nil
		}
		if err != nil {
			return seg, err
		}
		if c == s.d.Segment {
			seg.tag = string(tag[:n])
			return seg, nil
		}
		if c == s.d.Element {
			break
		}
		if n == len(tag) {
			// Not a tag: the segment is counted and skipped.
			return seg, s.skip()
		}
		tag[n] = c
		n++
		if n == 3 && s.header[string(tag[:3])] {
			seg.tag = string(tag[:3])
			return seg, nil
		}
	}
	seg.tag = string(tag[:n])
	if s.keep == nil || !s.keep(seg.tag) {
		return seg, s.skip()
	}
	raw, err := s.read()
	if err != nil {
		return seg, err
	}
	seg.elems = split(raw, s.d)
	return seg, nil
}

// skip discards the rest of a segment.
func (s *scanner) skip() error {
	if s.d.Release == 0 {
		// No release character: the terminator ends the segment wherever
		// it is; bufio finds it a buffer at a time.
		for {
			line, err := s.r.ReadSlice(s.d.Segment)
			s.off += int64(len(line))
			switch {
			case err == nil, errors.Is(err, io.EOF):
				return nil
			case !errors.Is(err, bufio.ErrBufferFull):
				return err
			}
		}
	}
	released := false
	for {
		c, err := s.readByte()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch {
		case released:
			released = false
		case s.d.Release != 0 && c == s.d.Release:
			released = true
		case c == s.d.Segment:
			return nil
		}
	}
}

// read returns the rest of a segment, without its terminator, release
// characters kept for split.
func (s *scanner) read() ([]byte, error) {
	s.buf = s.buf[:0]
	released := false
	for {
		c, err := s.readByte()
		if errors.Is(err, io.EOF) {
			return s.buf, nil
		}
		if err != nil {
			return nil, err
		}
		switch {
		case released:
			released = false
		case s.d.Release != 0 && c == s.d.Release:
			released = true
		case c == s.d.Segment:
			return s.buf, nil
		}
		if len(s.buf) >= s.max {
			return nil, s.fail("envelope segment longer than the limit")
		}
		s.buf = append(s.buf, c)
	}
}

// split cuts a segment's data into elements and components, removing
// release characters.
func split(raw []byte, d Delimiters) [][]string {
	var elems [][]string
	var comps []string
	var cur []byte
	released := false
	for _, c := range raw {
		switch {
		case released:
			cur = append(cur, c)
			released = false
		case d.Release != 0 && c == d.Release:
			released = true
		case c == d.Element:
			elems = append(elems, append(comps, string(cur)))
			comps, cur = nil, cur[:0]
		case c == d.Component:
			comps = append(comps, string(cur))
			cur = cur[:0]
		default:
			cur = append(cur, c)
		}
	}
	return append(elems, append(comps, string(cur)))
}
