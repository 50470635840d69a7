package edi

// HeldBytes is what sr holds for the segment it read last: its buffer and
// the positions of the segment's components, repetitions and elements.
func HeldBytes(sr *SegmentReader) int {
	return cap(sr.buf) + 4*(cap(sr.seg.comps)+cap(sr.seg.reps)+cap(sr.seg.elems))
}
