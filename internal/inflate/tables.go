package inflate

// Table entries: bits 0-7 the bits the code takes, 8-11 the extra bits
// that follow it (a subtable's index bits; a literal entry's count of
// literals, 1 or 2), 12-15 flags, 16-31 the literal (two in the main
// literal table when both codes fit in its index: the first in bits
// 16-23, the second in 24-31, bits 0-7 the bits of both), the length or
// distance base, or the subtable's offset.
const (
	flagLiteral = 1 << 12
	flagEOB     = 1 << 13
	flagSub     = 1 << 14
	flagInvalid = 1 << 15
)

const (
	maxLit  = 288
	maxDist = 32
)

var (
	lengthBase  = [29]uint32{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
	lengthExtra = [29]uint32{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
	distBase    = [30]uint32{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
	distExtra   = [30]uint32{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}
	// codeOrder is the order of the code length code's lengths.
	codeOrder = [19]int{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}
)

func litEntry(sym int) uint32 {
	switch {
	case sym < 256:
		return flagLiteral | 1<<8 | uint32(sym)<<16
	case sym == 256:
		return flagEOB
	case sym < 286:
		return lengthExtra[sym-257]<<8 | lengthBase[sym-257]<<16
	}
	return flagInvalid
}

func distEntry(sym int) uint32 {
	if sym < 30 {
		return distExtra[sym]<<8 | distBase[sym]<<16
	}
	return flagInvalid
}

func plainEntry(sym int) uint32 { return uint32(sym) << 16 }

// build makes the decoding table of the code whose lengths are lens:
// main indexed by the next tb bits, sub the subtables of codes longer
// than tb. It reports false for a code compress/flate refuses: one that
// is over-subscribed, or incomplete but for a single code of length 1.
// A code with no lengths at all builds a table of invalid entries.
func build(main []uint32, sub *[]uint32, tb uint, lens []uint8, entry func(int) uint32) bool {
	var count, next [16]int
	maxLen := 0
	for _, l := range lens {
		if l > 0 {
			count[l]++
			maxLen = max(maxLen, int(l))
		}
	}
	for i := range main {
		main[i] = flagInvalid
	}
	*sub = (*sub)[:0]
	if maxLen == 0 {
		return true
	}
	code := 0
	for i := 1; i <= maxLen; i++ {
		code <<= 1
		next[i] = code
		code += count[i]
	}
	if code != 1<<maxLen && !(code == 1 && maxLen == 1) {
		return false
	}
	// Short codes go in main; long ones are gathered by their first tb
	// bits, each group in a subtable as wide as its longest code.
	type long struct {
		sym int
		rev uint32
		l   uint
	}
	var longs [maxLit]long
	nl := 0
	var subBits [1 << litBits]uint8
	for sym, l := range lens {
		if l == 0 {
			continue
		}
		c := next[l]
		next[l]++
		rev := reverse(uint32(c), uint(l))
		if uint(l) <= tb {
			e := entry(sym) | uint32(l)
			for i := rev; i < 1<<tb; i += 1 << l {
				main[i] = e
			}
			continue
		}
		longs[nl] = long{sym, rev, uint(l)}
		nl++
		p := rev & (1<<tb - 1)
		subBits[p] = max(subBits[p], l-uint8(tb))
	}
	for _, lc := range longs[:nl] {
		p := lc.rev & (1<<tb - 1)
		if main[p]&flagSub == 0 {
			main[p] = flagSub | uint32(subBits[p])<<8 | uint32(len(*sub))<<16
			for range 1 << subBits[p] {
				*sub = append(*sub, flagInvalid)
			}
		}
		off, sb := main[p]>>16, uint(subBits[p])
		e := entry(lc.sym) | uint32(lc.l)
		for i := lc.rev >> tb; i < 1<<sb; i += 1 << (lc.l - tb) {
			(*sub)[off+i] = e
		}
	}
	return true
}

// reverse reverses the n low bits of c (DEFLATE sends codes from their
// last bit on).
func reverse(c uint32, n uint) uint32 {
	var r uint32
	for range n {
		r = r<<1 | c&1
		c >>= 1
	}
	return r
}

func (r *Reader) fixedTables() {
	for i := range 144 {
		r.lens[i] = 8
	}
	for i := 144; i < 256; i++ {
		r.lens[i] = 9
	}
	for i := 256; i < 280; i++ {
		r.lens[i] = 7
	}
	for i := 280; i < 288; i++ {
		r.lens[i] = 8
	}
	build(r.litMain[:], &r.litSub, litBits, r.lens[:maxLit], litEntry)
	pairLiterals(&r.litMain)
	for i := range maxDist {
		r.lens[i] = 5
	}
	build(r.distMain[:], &r.distSub, distBits, r.lens[:maxDist], distEntry)
}

// dynamicTables reads a dynamic block's code lengths and builds its
// tables.
func (r *Reader) dynamicTables() bool {
	if !r.need(14) {
		return false
	}
	nlit := int(r.take(5)) + 257
	ndist := int(r.take(5)) + 1
	nclen := int(r.take(4)) + 4
	if nlit > 286 || ndist > 30 {
		r.fail(ErrCorrupt)
		return false
	}
	var clens [19]uint8
	for i := range nclen {
		if !r.need(3) {
			return false
		}
		clens[codeOrder[i]] = uint8(r.take(3))
	}
	lens := r.lens[:nlit+ndist]
	if !r.codeLengths(clens[:], lens) {
		return false
	}
	if !build(r.litMain[:], &r.litSub, litBits, lens[:nlit], litEntry) ||
		!build(r.distMain[:], &r.distSub, distBits, lens[nlit:], distEntry) {
		r.fail(ErrCorrupt)
		return false
	}
	pairLiterals(&r.litMain)
	return true
}

// pairLiterals makes each literal entry of the main literal table whose
// code leaves room in the index for a second literal's whole code an
// entry of both: one lookup then decodes two literals (a payload of text
// is mostly literals of 5 or 6 bits).
func pairLiterals(main *[1 << litBits]uint32) {
	single := *main
	for i, e := range single {
		if e&flagLiteral == 0 {
			continue
		}
		n := e & 0xff
		e2 := single[uint32(i)>>n]
		if e2&flagLiteral == 0 || n+e2&0xff > litBits {
			continue
		}
		main[i] = e&^0xfff | 2<<8 | (n + e2&0xff) | e2>>16<<24
	}
}

// codeLengths reads lens, coded with the code length code whose lengths
// are clens.
func (r *Reader) codeLengths(clens, lens []uint8) bool {
	var ctab [1 << 7]uint32
	var csub []uint32
	if !build(ctab[:], &csub, 7, clens, plainEntry) {
		r.fail(ErrCorrupt)
		return false
	}
	for i := 0; i < len(lens); {
		if !r.need(7) && !r.needSome() {
			return false
		}
		e := ctab[r.bits&(1<<7-1)]
		if e&flagInvalid != 0 || uint(e&0xff) > r.realBits() {
			if e&flagInvalid != 0 {
				r.fail(ErrCorrupt)
			} else {
				r.fail(r.srcFailure())
			}
			return false
		}
		r.take(uint(e & 0xff))
		sym := int(e >> 16)
		if sym < 16 {
			lens[i] = uint8(sym)
			i++
			continue
		}
		var rep int
		var v uint8
		switch sym {
		case 16:
			if i == 0 {
				r.fail(ErrCorrupt)
				return false
			}
			if !r.need(2) {
				return false
			}
			rep, v = 3+int(r.take(2)), lens[i-1]
		case 17:
			if !r.need(3) {
				return false
			}
			rep = 3 + int(r.take(3))
		default:
			if !r.need(7) {
				return false
			}
			rep = 11 + int(r.take(7))
		}
		if i+rep > len(lens) {
			r.fail(ErrCorrupt)
			return false
		}
		for range rep {
			lens[i] = v
			i++
		}
	}
	return true
}
