package edi_test

import (
	"bytes"
	"testing"

	"github.com/edihub/edihub/internal/edi"
)

// TestParseAllocations bounds what reading the envelope of a payload
// that is not EDI, or whose envelope is unreadable, allocates (the
// receiver inspects every payload): the buffered reader is reused
// (a regression guard, not a timing; it was 4 and 12 objects, a 4 KiB
// buffer among them).
func TestParseAllocations(t *testing.T) {
	junk := bytes.Repeat([]byte("ISA*00*LOADGEN 000001~"), 200)
	for _, tt := range []struct {
		name    string
		payload []byte
		max     float64
	}{
		{"not EDI", []byte("hello, not EDI at all"), 2},
		{"unreadable ISA", junk, 10},
	} {
		if got := testing.AllocsPerRun(100, func() { _, _ = edi.Parse(bytes.NewReader(tt.payload), edi.Limits{}) }); got > tt.max+raceSlack {
			t.Errorf("%s: %.0f allocations, want at most %.0f", tt.name, got, tt.max+raceSlack)
		}
	}
}
