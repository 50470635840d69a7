// Package inflate decompresses zlib streams (RFC 1950 around RFC 1951's
// DEFLATE), or raw DEFLATE streams, as a stream, in constant memory,
// faster than compress/flate and klauspost/compress: it reads its input
// 64 bits at a time, decodes Huffman codes through one table lookup (two
// for the rare long codes) whose entries carry the length or distance
// base and its extra bits, or two literals when both codes fit, and
// writes straight into its window, copying matches 8 or 16 bytes at a
// time. Inflating is the largest cost of receiving a large compressed
// AS2 message.
//
// A stream whose first two bytes are not a zlib header (RFC 1950 section
// 2.2: compression method 8, a window of at most 32 KiB, the FCHECK
// multiple of 31) is read as raw DEFLATE, without the Adler-32 trailer:
// some AS2 implementations put raw DEFLATE in a CMS CompressedData whose
// algorithm says zlib. Every inflate of edihub goes through this package,
// so the rule is the same wherever a stream is read (in memory, spooled,
// or stored compressed and read back).
//
// Otherwise it accepts and refuses exactly what compress/flate and
// compress/zlib do (complete Huffman codes, or zlib's degenerate single
// code; no distance past the output; the Adler-32 checksum; a zlib
// header asking for a preset dictionary is ErrDictionary, not raw
// DEFLATE), which the tests check against compress/zlib with the raw
// DEFLATE rule on top (compress/flate when compress/zlib reports
// zlib.ErrHeader).
package inflate

import (
	"encoding/binary"
	"errors"
	"io"
)

// Errors; a Reader's errors wrap one of them, or its source's, or
// io.ErrUnexpectedEOF for a stream cut short (a stream of fewer than two
// bytes included).
var (
	ErrChecksum = errors.New("inflate: invalid zlib checksum")
	ErrCorrupt  = errors.New("inflate: corrupt DEFLATE data")
	// ErrDictionary is a stream that needs a preset dictionary (FDICT).
	ErrDictionary = errors.New("inflate: zlib preset dictionary not supported")
)

const (
	windowSize = 1 << 15
	// outChunk is the output decoded between two slides of the window.
	outChunk = 256 << 10
	// slack lets a match (at most 258 bytes) start anywhere below limit
	// and be copied 8 bytes at a time past its end.
	slack  = 320
	inSize = 64 << 10
	// fullWindow is the window of a stream of unknown size (NewReader),
	// the most one grows to (NewReaderSize); minWindow the least one
	// starts with.
	fullWindow = windowSize + outChunk + slack
	minWindow  = 8 << 10
	// inKeep bytes before the input position survive a refill of the
	// input buffer: a stored block's header gives back the bytes the bit
	// buffer held.
	inKeep = 8

	litBits  = 11
	distBits = 8
)

// Reader reads the decompressed content of a zlib stream or of a raw
// DEFLATE stream (see the package comment).
type Reader struct {
	src    io.Reader
	srcErr error // the source's error once it returned one (io.EOF included)

	in       []byte
	ip, iend int
	// bits holds nbits bits of input, the next one in bit 0; overread
	// counts zero bytes added past the input's end (see refillSlow).
	bits     uint64
	nbits    uint
	overread uint

	win    []byte
	full   int // the size win grows to, and slides at
	op, rp int // write and read positions in win
	limit  int // no symbol starts at op > limit

	state      int
	checkSum   uint32 // the stream's Adler-32, once read
	final      bool
	raw        bool // no zlib header: raw DEFLATE, no checksum
	storedLeft int
	adler      uint32 // of the output so far
	err        error

	litMain  [1 << litBits]uint32
	litSub   []uint32
	distMain [1 << distBits]uint32
	distSub  []uint32
	lens     [maxLit + maxDist]uint8
}

// States between calls of decode.
const (
	stateHeader  = iota // zlib header
	stateBlock          // a block header
	stateHuffman        // inside a Huffman block
	stateStored         // inside a stored block
	stateTrailer        // the Adler-32
	stateDone
)

// NewReader returns a Reader of the zlib or raw DEFLATE stream in src.
// The header, which tells the two apart, is read on the first Read.
func NewReader(src io.Reader) *Reader {
	return NewReaderSize(src, 0)
}

// NewReaderSize is NewReader for a stream of about size bytes (0 or less:
// unknown), which sizes its buffers: a small message held in memory then
// costs a few KiB of them rather than the 350 KiB a stream of any size
// gets. The hint bounds nothing: the window starts at about four times
// size and grows as the output does, up to its full size (32 KiB of
// history and 32 to 256 KiB decoded between two slides, by the hint),
// whatever the stream holds.
func NewReaderSize(src io.Reader, size int64) *Reader {
	in, win, full := inSize, fullWindow, fullWindow
	if size > 0 {
		in = int(min(max(size, 512), inSize))
		full = windowSize + int(min(max(4*size, windowSize), outChunk)) + slack
		win = int(min(max(4*size, minWindow), int64(full)))
	}
	r := &Reader{src: src, in: make([]byte, in+inKeep), ip: inKeep, iend: inKeep,
		win: make([]byte, win), full: full, adler: 1}
	r.limit = len(r.win) - slack
	return r
}

// Read reads decompressed bytes. After the last one it returns io.EOF,
// once the checksum matched.
func (r *Reader) Read(p []byte) (int, error) {
	for r.rp == r.op {
		if r.err != nil {
			return 0, r.err
		}
		if r.op > r.limit {
			if len(r.win) < r.full {
				// Grow: until it is full size, the window holds all
				// the output from its start. Four times, not twice:
				// fewer copies for a stream that compressed well.
				win := make([]byte, min(4*len(r.win), r.full))
				copy(win, r.win[:r.op])
				r.win, r.limit = win, len(win)-slack
				continue
			}
			// Slide: the last 32 KiB stay as history.
			copy(r.win, r.win[r.op-windowSize:r.op])
			r.op, r.rp = windowSize, windowSize
		}
		start := r.op
		r.decode()
		if !r.raw {
			r.adler = adlerUpdate(r.adler, r.win[start:r.op])
		}
		if r.state == stateDone && r.err == nil {
			r.err = io.EOF
			if !r.raw && r.adler != r.checkSum {
				r.err = ErrChecksum
			}
		}
	}
	n := copy(p, r.win[r.rp:r.op])
	r.rp += n
	return n, nil
}

// decode decodes until the window is full (op > limit), the stream
// ended or failed (r.err set).
func (r *Reader) decode() {
	for r.op <= r.limit && r.err == nil {
		switch r.state {
		case stateHeader:
			r.header()
		case stateBlock:
			if r.final {
				r.state = stateTrailer
				if r.raw {
					r.state = stateDone
				}
				continue
			}
			r.blockHeader()
		case stateHuffman:
			r.huffman()
		case stateStored:
			r.stored()
		case stateTrailer:
			r.trailer()
		case stateDone:
			return
		}
	}
}

func (r *Reader) fail(err error) {
	if r.err == nil {
		r.err = err
	}
}

// fillInput moves the unread input (and inKeep bytes before it) to the
// buffer's start and reads more, at least once; it reports whether any
// byte came.
func (r *Reader) fillInput() bool {
	if r.srcErr != nil {
		return false
	}
	keep := min(r.ip, inKeep)
	n := copy(r.in, r.in[r.ip-keep:r.iend])
	r.ip, r.iend = keep, n
	got := false
	for tries := 0; r.iend < len(r.in); tries++ {
		m, err := r.src.Read(r.in[r.iend:])
		r.iend += m
		if m > 0 {
			got = true
		}
		if err != nil {
			r.srcErr = err
			break
		}
		if got && r.iend-r.ip >= 16 {
			break
		}
		if !got && tries >= 100 {
			r.srcErr = io.ErrNoProgress
			break
		}
	}
	return got
}

// srcFailure is the error for input needed past the source's end.
func (r *Reader) srcFailure() error {
	if r.srcErr == nil || r.srcErr == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return r.srcErr
}

// realBits is the bits of input in the bit buffer (padding excluded).
func (r *Reader) realBits() uint { return r.nbits - 8*r.overread }

// need makes sure n bits of real input are in the bit buffer (n <= 56),
// or fails.
func (r *Reader) need(n uint) bool {
	for r.realBits() < n {
		if r.overread > 0 {
			r.fail(r.srcFailure())
			return false
		}
		if r.ip == r.iend && !r.fillInput() {
			r.fail(r.srcFailure())
			return false
		}
		r.bits |= uint64(r.in[r.ip]) << r.nbits
		r.ip++
		r.nbits += 8
	}
	return true
}

// take consumes n bits (available: see need).
func (r *Reader) take(n uint) uint32 {
	v := uint32(r.bits & (1<<n - 1))
	r.bits >>= n
	r.nbits -= n
	return v
}

// refillSlow fills the bit buffer to at least 56 bits near the input's
// end: real bytes while there are, then zero bytes (counted in
// overread) so that a symbol can be decoded; using a padding bit is a
// truncated stream (see huffman).
func (r *Reader) refillSlow() {
	for r.nbits <= 56 {
		if r.ip == r.iend && r.overread == 0 {
			r.fillInput()
		}
		if r.ip < r.iend && r.overread == 0 {
			r.bits |= uint64(r.in[r.ip]) << r.nbits
			r.ip++
		} else {
			r.overread++
		}
		r.nbits += 8
	}
}

// header reads the zlib header, or leaves the first two bytes to the
// first block when they are not one (raw DEFLATE: the rule of the
// package comment, compress/zlib's header check).
func (r *Reader) header() {
	if !r.need(16) {
		return
	}
	cmf, flg := uint32(r.bits&0xff), uint32(r.bits>>8&0xff)
	if cmf&0x0f != 8 || cmf>>4 > 7 || (cmf<<8|flg)%31 != 0 {
		r.raw, r.state = true, stateBlock
		return
	}
	r.take(16)
	switch {
	case flg&0x20 != 0:
		r.fail(ErrDictionary)
	default:
		r.state = stateBlock
	}
}

func (r *Reader) trailer() {
	r.take(r.realBits() & 7) // to a byte boundary
	if !r.need(32) {
		return
	}
	var sum uint32
	for range 4 {
		sum = sum<<8 | r.take(8)
	}
	// Read compares it once it hashed what this decode call produced.
	r.state, r.checkSum = stateDone, sum
}

func (r *Reader) blockHeader() {
	if !r.need(3) {
		return
	}
	h := r.take(3)
	r.final = h&1 != 0
	switch h >> 1 {
	case 0:
		r.storedHeader()
	case 1:
		r.fixedTables()
		r.state = stateHuffman
	case 2:
		if r.dynamicTables() {
			r.state = stateHuffman
		}
	default:
		r.fail(ErrCorrupt)
	}
}

// storedHeader reads LEN and NLEN and gives the bytes left in the bit
// buffer back to the input.
func (r *Reader) storedHeader() {
	r.take(r.realBits() & 7)
	if !r.need(32) {
		return
	}
	n, nn := r.take(16), r.take(16)
	if n != ^nn&0xffff {
		r.fail(ErrCorrupt)
		return
	}
	back := int(r.realBits() / 8)
	r.ip -= back
	r.bits, r.nbits, r.overread = 0, 0, 0
	r.storedLeft = int(n)
	r.state = stateStored
}

func (r *Reader) stored() {
	for r.storedLeft > 0 && r.op <= r.limit {
		if r.ip == r.iend && !r.fillInput() {
			r.fail(r.srcFailure())
			return
		}
		n := min(r.storedLeft, r.iend-r.ip, len(r.win)-r.op)
		copy(r.win[r.op:], r.in[r.ip:r.ip+n])
		r.op += n
		r.ip += n
		r.storedLeft -= n
	}
	if r.storedLeft == 0 {
		r.state = stateBlock
	}
}

// needSome is need for a code of unknown length at the input's end: it
// clears the failure need(7) recorded when at least one bit is there
// (the code may be shorter; the caller checks).
func (r *Reader) needSome() bool {
	if r.realBits() > 0 && r.err != nil && r.overread == 0 {
		r.err = nil
		return true
	}
	return false
}

// huffman decodes a Huffman block until its end, a full window or a
// failure.
func (r *Reader) huffman() {
	for r.err == nil && r.state == stateHuffman && r.op <= r.limit {
		if r.iend-r.ip < 16 && r.srcErr == nil {
			r.fillInput()
		}
		if r.iend-r.ip >= 16 && r.overread == 0 {
			r.fast()
		} else {
			r.slow()
		}
	}
}

// fast decodes symbols while 16 bytes of input are there (two refills
// of the bit buffer), refilling it 64 bits at a time: after a refill it
// holds at least 56 bits, enough for a length code, its extra bits, a
// distance code and its extra bits (15+5+15+13), or for four literal
// entries of the main table (4*11 bits, up to 8 literals) and the lookup
// of the next. The next entry is looked up before the refill that
// precedes its decoding (a refill only adds bits above those held).
func (r *Reader) fast() {
	bits, nbits, ip, op := r.bits, r.nbits, r.ip, r.op
	in, win, lim := r.in[:r.iend], r.win, r.limit
	litMain := &r.litMain
	defer func() { r.bits, r.nbits, r.ip, r.op = bits, nbits, ip, op }()
	if ip+16 > len(in) {
		return
	}
	bits |= binary.LittleEndian.Uint64(in[ip:]) << nbits
	ip += int((63 - nbits) >> 3)
	nbits |= 56
	e := litMain[bits&(1<<litBits-1)]
	for op <= lim && ip+16 <= len(in) {
		bits |= binary.LittleEndian.Uint64(in[ip:]) << nbits
		ip += int((63 - nbits) >> 3)
		nbits |= 56
		if e&flagLiteral != 0 {
			// One or two literals an entry, written as two bytes (the
			// window has slack).
			for range 4 {
				n := uint(e & 0xff)
				bits >>= n
				nbits -= n
				binary.LittleEndian.PutUint16(win[op:], uint16(e>>16))
				op += int(e>>8) & 0xf
				e = litMain[bits&(1<<litBits-1)]
				if e&flagLiteral == 0 {
					break
				}
			}
			continue
		}
		if e&flagSub != 0 {
			e = r.litSub[(e>>16)+uint32(bits>>litBits)&(1<<((e>>8)&0xf)-1)]
			if e&flagLiteral != 0 {
				bits >>= e & 0xff
				nbits -= uint(e & 0xff)
				win[op] = byte(e >> 16)
				op++
				e = litMain[bits&(1<<litBits-1)]
				continue
			}
		}
		if e&(flagEOB|flagInvalid) != 0 {
			if e&flagInvalid != 0 {
				r.fail(ErrCorrupt)
			} else {
				bits >>= e & 0xff
				nbits -= uint(e & 0xff)
				r.state = stateBlock
			}
			return
		}
		// A match: at most 48 bits.
		n := uint(e & 0xff)
		eb := uint(e>>8) & 0xf
		length := int(e>>16) + int(bits>>n&(1<<eb-1))
		bits >>= n + eb
		nbits -= n + eb
		d := r.distMain[bits&(1<<distBits-1)]
		if d&flagSub != 0 {
			d = r.distSub[(d>>16)+uint32(bits>>distBits)&(1<<((d>>8)&0xf)-1)]
		}
		n, eb = uint(d&0xff), uint(d>>8)&0xf
		dist := int(d>>16) + int(bits>>n&(1<<eb-1))
		bits >>= n + eb
		nbits -= n + eb
		if d&flagInvalid != 0 || dist > op {
			r.fail(ErrCorrupt)
			return
		}
		bits |= binary.LittleEndian.Uint64(in[ip:]) << nbits
		ip += int((63 - nbits) >> 3)
		nbits |= 56
		e = litMain[bits&(1<<litBits-1)]
		if dist >= 16 && length <= 16 {
			// Most matches: one 16-byte copy.
			*(*[16]byte)(win[op:]) = *(*[16]byte)(win[op-dist:])
		} else {
			copyMatch(win, op, dist, length)
		}
		op += length
	}
}

// copyMatch copies length bytes from dist back to win[op:], 16 or 8
// bytes at a time, past the end too (the window has slack): whole words
// when they do not overlap, else a word per dist bytes (each word
// repeats the pattern read from dist back, of which dist bytes are
// written already), or a byte broadcast for dist 1.
func copyMatch(win []byte, op, dist, length int) {
	src := op - dist
	switch {
	case dist >= 16:
		for i := 0; i < length; i += 16 {
			*(*[16]byte)(win[op+i:]) = *(*[16]byte)(win[src+i:])
		}
	case dist >= 8:
		for i := 0; i < length; i += 8 {
			binary.LittleEndian.PutUint64(win[op+i:], binary.LittleEndian.Uint64(win[src+i:]))
		}
	case dist == 1:
		v := uint64(win[src]) * 0x0101010101010101
		for i := 0; i < length; i += 8 {
			binary.LittleEndian.PutUint64(win[op+i:], v)
		}
	default:
		for i := 0; i < length; i += dist {
			binary.LittleEndian.PutUint64(win[op+i:], binary.LittleEndian.Uint64(win[src+i:]))
		}
	}
}

// slow decodes one symbol near the input's end, where the bit buffer
// may hold padding (refillSlow): a symbol that used padding is a
// truncated stream.
func (r *Reader) slow() {
	r.refillSlow()
	consumed := func() bool {
		if r.nbits < 8*r.overread {
			r.fail(r.srcFailure())
			return true
		}
		return false
	}
	e := r.litMain[r.bits&(1<<litBits-1)]
	if e&flagSub != 0 {
		e = r.litSub[(e>>16)+uint32(r.bits>>litBits)&(1<<((e>>8)&0xf)-1)]
	}
	if e&flagInvalid != 0 {
		r.fail(ErrCorrupt)
		return
	}
	r.take(uint(e & 0xff))
	if consumed() {
		return
	}
	switch {
	case e&flagLiteral != 0:
		binary.LittleEndian.PutUint16(r.win[r.op:], uint16(e>>16))
		r.op += int(e>>8) & 0xf
		return
	case e&flagEOB != 0:
		r.state = stateBlock
		return
	}
	eb := uint(e>>8) & 0xf
	length := int(e>>16) + int(r.take(eb))
	d := r.distMain[r.bits&(1<<distBits-1)]
	if d&flagSub != 0 {
		d = r.distSub[(d>>16)+uint32(r.bits>>distBits)&(1<<((d>>8)&0xf)-1)]
	}
	if d&flagInvalid != 0 {
		r.fail(ErrCorrupt)
		return
	}
	r.take(uint(d & 0xff))
	eb = uint(d>>8) & 0xf
	dist := int(d>>16) + int(r.take(eb))
	if consumed() {
		return
	}
	if dist > r.op {
		r.fail(ErrCorrupt)
		return
	}
	copyMatch(r.win, r.op, dist, length)
	r.op += length
}
