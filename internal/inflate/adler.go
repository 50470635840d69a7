package inflate

import "encoding/binary"

// adlerMod is Adler-32's modulus.
const adlerMod = 65521

// adlerChunk bytes at most are summed between two reductions: s2 stays
// below 2^64 (it grows by at most 255*n*(n+1)/2 over n bytes).
const adlerChunk = 1 << 20

// adlerUpdate updates the Adler-32 sum adler with p (hash/adler32's update,
// eight bytes at a time: the byte sum and the bytes weighted by their
// distance to the end of the eight are each had from one multiply of
// the bytes in 16-bit lanes, even and odd bytes apart).
func adlerUpdate(adler uint32, p []byte) uint32 {
	s1, s2 := uint64(adler&0xffff), uint64(adler>>16)
	for len(p) > 0 {
		q := p[:min(len(p), adlerChunk)]
		p = p[len(q):]
		for len(q) >= 8 {
			v := binary.LittleEndian.Uint64(q)
			even, odd := v&0x00ff00ff00ff00ff, v>>8&0x00ff00ff00ff00ff
			// The top lane of a product is the sum of the lanes weighted
			// by the multiplier's lanes in reverse; no lane carries.
			s2 += 8*s1 + (even*0x0008000600040002)>>48 + (odd*0x0007000500030001)>>48
			s1 += ((even + odd) * 0x0001000100010001) >> 48
			q = q[8:]
		}
		for _, c := range q {
			s1 += uint64(c)
			s2 += s1
		}
		s1 %= adlerMod
		s2 %= adlerMod
	}
	return uint32(s2<<16 | s1)
}
