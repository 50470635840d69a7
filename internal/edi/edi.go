// Package edi reads X12 and EDIFACT interchanges and writes functional
// acknowledgements for them (X12 TA1, 997, 999; EDIFACT CONTRL).
//
// SegmentReader is the parser: it reads a document from an io.Reader one
// segment at a time, with every element, repetition and component, in
// constant memory (one segment of at most MaxSegment bytes is held), and
// Segment.AppendTo writes a segment back. Parse is built on it and reads
// the envelopes: sender and receiver, control numbers, functional groups
// and transaction sets (messages), their counts and whether the trailers
// agree with the headers; it keeps only envelope segments (and the
// segments of acknowledgements), each at most Limits.MaxSegment bytes, and
// has every other segment skipped and counted. A document that is not EDI
// is recognised from its first bytes and reported as ErrNotEDI.
package edi

import (
	"errors"
	"fmt"
)

// Standard names an EDI syntax.
type Standard string

// The standards Parse recognises.
const (
	X12     Standard = "X12"
	EDIFACT Standard = "EDIFACT"
)

// ErrNotEDI is returned by Parse and Detect for a document that does not
// start with an X12 ISA or an EDIFACT UNA/UNB segment (after optional
// whitespace and a byte-order mark). Such a document is carried as-is.
var ErrNotEDI = errors.New("not an EDI interchange")

// SyntaxError is a document that starts like EDI but whose segments
// cannot be read. Offset counts bytes from the start of the document;
// Segment is the position in its interchange (Segment.Index) of the
// segment that could not be read, 0 when unknown. Err, when set, is the
// sentinel that classifies it (ErrSegmentTooLong).
type SyntaxError struct {
	Offset  int64
	Segment int64
	Reason  string
	Err     error
}

func (e *SyntaxError) Error() string {
	if e.Segment > 0 {
		return fmt.Sprintf("edi: segment %d at byte %d: %s", e.Segment, e.Offset, e.Reason)
	}
	return fmt.Sprintf("edi: byte %d: %s", e.Offset, e.Reason)
}

// Unwrap returns Err.
func (e *SyntaxError) Unwrap() error { return e.Err }

// Problem is a disagreement between an envelope's header and its trailer.
type Problem string

// The problems Parse reports at each level.
const (
	// ProblemTrailerMissing: the document (or the next header) came before
	// the level's trailer (IEA, GE, SE, UNZ, UNE, UNT).
	ProblemTrailerMissing Problem = "trailer-missing"
	// ProblemControlMismatch: the trailer's control number is not the header's.
	ProblemControlMismatch Problem = "control-number-mismatch"
	// ProblemCountMismatch: the trailer's count of groups, sets or segments
	// is not the number received.
	ProblemCountMismatch Problem = "count-mismatch"
	// ProblemStructure: a segment out of place (a set outside a group, a
	// group header inside a set, content outside any set).
	ProblemStructure Problem = "structure"
)

// Document is every interchange of one payload, in order.
type Document struct {
	Standard     Standard
	Interchanges []Interchange
	// Truncated is true when more interchanges, groups or sets were
	// received than Limits allows to record; the counts stay exact.
	Truncated bool
}

// Party is a sender or receiver: an ID and its qualifier (X12 ISA05/06,
// ISA07/08; EDIFACT UNB02/03 components 1 and 2).
type Party struct {
	Qualifier string `json:"qualifier,omitempty"`
	ID        string `json:"id"`
}

// Interchange is one ISA…IEA or UNB…UNZ envelope.
type Interchange struct {
	Sender   Party
	Receiver Party
	// ControlNumber is ISA13 or UNB05, as received (X12 keeps leading zeros).
	ControlNumber string
	Date, Time    string
	// Version is ISA12 (e.g. "00401") or UNB01's syntax (e.g. "UNOC:3").
	Version string
	// Test is ISA15 "T" or UNB11 "1".
	Test bool
	// AckRequested is ISA14 "1" or UNB09 "1".
	AckRequested bool
	// Delimiters are the ones the interchange was written with.
	Delimiters Delimiters
	Groups     []Group
	// GroupCount is the number of groups (EDIFACT without UNG: messages)
	// received, also past the recorded ones.
	GroupCount int
	// DeclaredCount is IEA01 or UNZ01; -1 when the trailer is missing or
	// not a number.
	DeclaredCount int
	Problems      []Problem
	// TA1 are the X12 interchange acknowledgements (TA1 segments between
	// ISA and the first GS) the interchange carries, at most
	// Limits.MaxAckEntries.
	TA1 []*AckReport
}

// Group is a functional group (GS…GE, UNG…UNE). EDIFACT messages sent
// without UNG are gathered in one Implicit group.
type Group struct {
	Implicit bool
	// FunctionalID is GS01 (e.g. "PO", "FA") or UNG01.
	FunctionalID  string
	Sender        Party
	Receiver      Party
	ControlNumber string
	Date, Time    string
	// Version is GS08 (e.g. "004010", "005010X231A1") or UNG07's version.
	Version string
	Sets    []Set
	// SetCount is the number of sets received, also past the recorded ones.
	SetCount      int
	DeclaredCount int
	Problems      []Problem
}

// Set is a transaction set (ST…SE) or message (UNH…UNT).
type Set struct {
	// Type is ST01 (e.g. "850") or UNH02's message type (e.g. "ORDERS").
	Type string
	// Version is ST03 or UNH02's version:release:agency (e.g. "D:96A:UN").
	Version       string
	ControlNumber string
	// Segments counts the set's segments, header and trailer included.
	Segments      int
	DeclaredCount int
	// TrailerControl is SE02 or UNT02 as received, "" without a trailer.
	TrailerControl string
	Problems       []Problem
	// Ack is the content of a 997, 999 or CONTRL, nil for other sets.
	Ack *AckReport
}

// OK reports whether the interchange and everything in it agree with their
// trailers and nothing is out of place.
func (ic *Interchange) OK() bool {
	if len(ic.Problems) > 0 {
		return false
	}
	for _, g := range ic.Groups {
		if len(g.Problems) > 0 {
			return false
		}
		for _, s := range g.Sets {
			if len(s.Problems) > 0 {
				return false
			}
		}
	}
	return true
}

// Limits bound what Parse keeps in memory.
type Limits struct {
	// MaxSegment is the longest envelope segment read, in bytes; a longer
	// one is a SyntaxError. Other segments are skipped at any length.
	MaxSegment int
	// MaxInterchanges, MaxGroups (per interchange) and MaxSets (per
	// document) are how many are recorded; more are counted only.
	MaxInterchanges int
	MaxGroups       int
	MaxSets         int
	// MaxAckEntries is how many set or group responses of one
	// acknowledgement are recorded.
	MaxAckEntries int
}

// DefaultLimits are generous for real interchanges and small in memory.
var DefaultLimits = Limits{
	MaxSegment:      4096,
	MaxInterchanges: 64,
	MaxGroups:       256,
	MaxSets:         10000,
	MaxAckEntries:   10000,
}

func (l Limits) orDefault() Limits {
	d := DefaultLimits
	if l.MaxSegment > 0 {
		d.MaxSegment = l.MaxSegment
	}
	if l.MaxInterchanges > 0 {
		d.MaxInterchanges = l.MaxInterchanges
	}
	if l.MaxGroups > 0 {
		d.MaxGroups = l.MaxGroups
	}
	if l.MaxSets > 0 {
		d.MaxSets = l.MaxSets
	}
	if l.MaxAckEntries > 0 {
		d.MaxAckEntries = l.MaxAckEntries
	}
	return d
}
