package edi

import (
	"bufio"
	"bytes"
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
