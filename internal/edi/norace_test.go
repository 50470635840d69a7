//go:build !race

package edi_test

// raceSlack is 0 without the race detector (race_test.go).
const raceSlack = 0

// bigInterchange is the size of the interchange
// TestSegmentReaderConstantMemory reads: 1 GiB.
const bigInterchange = 1 << 30
