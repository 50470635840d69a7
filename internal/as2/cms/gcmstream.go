package cms

import (
	"crypto/cipher"
	"crypto/subtle"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"fmt"
	"io"
)

// AES-GCM as a stream. Go's cipher.AEAD seals and opens in one call, so
// a large AuthEnvelopedData is taken apart here: the keystream is CTR
// from inc32(J0) (NIST SP 800-38D §7), and the tag's GHASH is computed
// piece by piece. Each piece of ciphertext is authenticated by the
// standard library's own GCM (hardware GHASH where there is one) as the
// additional data of a sealing with no plaintext, under the same key and
// nonce; that tag, less E(K, J0) and the piece's length block, is the
// piece's GHASH, which is chained to the ones before by multiplying by a
// power of H in GF(2^128) (once per 64 KiB piece, in constant time).
// Nothing is ever encrypted with the borrowed sealing: it only digests.
//
// The plaintext a gcmReader releases is unauthenticated until its Read
// returns io.EOF, which it does only once the tag verified.

// gfElem is an element of GCM's GF(2^128), in GCM's bit order: the
// first byte's most significant bit is the coefficient of x^0; hi holds
// the first 8 bytes big-endian.
type gfElem struct{ hi, lo uint64 }

func gfLoad(b []byte) gfElem {
	return gfElem{binary.BigEndian.Uint64(b), binary.BigEndian.Uint64(b[8:])}
}

func (x gfElem) store(b []byte) {
	binary.BigEndian.PutUint64(b, x.hi)
	binary.BigEndian.PutUint64(b[8:], x.lo)
}

func (x gfElem) xor(y gfElem) gfElem { return gfElem{x.hi ^ y.hi, x.lo ^ y.lo} }

// gfMul is x·y (SP 800-38D Algorithm 1), bit by bit without
// data-dependent branches or table lookups.
func gfMul(x, y gfElem) gfElem {
	var z gfElem
	v := y
	for i := 0; i < 128; i++ {
		var bit uint64
		if i < 64 {
			bit = x.hi >> (63 - i) & 1
		} else {
			bit = x.lo >> (127 - i) & 1
		}
		mask := -bit
		z.hi ^= v.hi & mask
		z.lo ^= v.lo & mask
		lsb := v.lo & 1
		v.lo = v.lo>>1 | v.hi<<63
		v.hi = v.hi>>1 ^ 0xe100000000000000&-lsb
	}
	return z
}

// gfPow is h^n, n ≥ 0.
func gfPow(h gfElem, n uint64) gfElem {
	r := gfElem{hi: 1 << 63} // 1
	for ; n > 0; n >>= 1 {
		if n&1 == 1 {
			r = gfMul(r, h)
		}
		h = gfMul(h, h)
	}
	return r
}

// gcmMaxText is the most plaintext one GCM invocation may protect:
// 2^39 - 256 bits.
const gcmMaxText = 1<<36 - 32

// gcmAuth computes a GCM tag over additional data given at the end and
// ciphertext given in pieces: every piece but the last a whole number of
// blocks.
type gcmAuth struct {
	digest cipher.AEAD // same key and nonce, 16-byte tags: digests only
	nonce  []byte
	ej0    gfElem // E(K, J0)
	h      gfElem
	j0     [16]byte
	w      gfElem // GHASH of the ciphertext so far, times H
	n      int64  // ciphertext bytes so far
	final  bool   // a piece not a whole number of blocks was absorbed
	sealed []byte // scratch for the digesting seal

	// H^blocks and (length block)·H for pieces of pieceLen bytes.
	pieceLen     int
	pieceH, lenH gfElem
}

func newGCMAuth(block cipher.Block, nonce []byte) (*gcmAuth, error) {
	if block.BlockSize() != 16 || len(nonce) == 0 {
		return nil, fmt.Errorf("%w: GCM nonce length %d", ErrUnsupportedAlgorithm, len(nonce))
	}
	aead, err := cipher.NewGCMWithNonceSize(block, len(nonce))
	if err != nil {
		return nil, fmt.Errorf("%w: GCM: %w", ErrUnsupportedAlgorithm, err)
	}
	g := &gcmAuth{digest: aead, nonce: nonce, sealed: make([]byte, 0, 16), pieceLen: -1}
	var b [16]byte
	block.Encrypt(b[:], b[:])
	g.h = gfLoad(b[:])
	// With no additional data nor text, the tag is E(K, J0) itself: the
	// GHASH of one all-zero length block is 0.
	g.ej0 = gfLoad(aead.Seal(g.sealed[:0], nonce, nil, nil))
	if len(nonce) == 12 {
		copy(g.j0[:], nonce)
		g.j0[15] = 1
	} else {
		// J0 = GHASH(nonce, zero-padded, then 0^64 || [bits of nonce]64).
		var y gfElem
		for i := 0; i < len(nonce); i += 16 {
			var blk [16]byte
			copy(blk[:], nonce[i:])
			y = gfMul(y.xor(gfLoad(blk[:])), g.h)
		}
		y = gfMul(y.xor(gfElem{lo: uint64(len(nonce)) * 8}), g.h)
		y.store(g.j0[:])
	}
	return g, nil
}

// pieceW is W(p) = GHASH(p)·H, from the digesting seal of p.
func (g *gcmAuth) pieceW(p []byte, lenH gfElem) gfElem {
	t := gfLoad(g.digest.Seal(g.sealed[:0], g.nonce, nil, p))
	return t.xor(g.ej0).xor(lenH)
}

// absorb adds the ciphertext piece c. Only the last piece may be other
// than a whole number of blocks.
func (g *gcmAuth) absorb(c []byte) {
	if len(c) == 0 {
		return
	}
	if g.final {
		panic("cms: GCM piece after a partial block")
	}
	g.final = len(c)%16 != 0
	if len(c) != g.pieceLen {
		g.pieceLen = len(c)
		g.pieceH = gfPow(g.h, uint64(len(c)+15)/16)
		g.lenH = gfMul(gfElem{hi: uint64(len(c)) * 8}, g.h)
	}
	g.w = gfMul(g.w, g.pieceH).xor(g.pieceW(c, g.lenH))
	g.n += int64(len(c))
}

// sum returns the full 16-byte tag over the additional data aad and the
// ciphertext absorbed.
func (g *gcmAuth) sum(aad []byte) [16]byte {
	w := g.w
	if len(aad) > 0 {
		wa := g.pieceW(aad, gfMul(gfElem{hi: uint64(len(aad)) * 8}, g.h))
		w = w.xor(gfMul(wa, gfPow(g.h, uint64(g.n+15)/16)))
	}
	s := w.xor(gfMul(gfElem{hi: uint64(len(aad)) * 8, lo: uint64(g.n) * 8}, g.h))
	var tag [16]byte
	s.xor(g.ej0).store(tag[:])
	return tag
}

// gcmCTR is GCM's keystream: CTR from inc32(J0), whose counter wraps in
// its low 32 bits (cipher.NewCTR carries into the whole block; it is
// restarted at the wrap, which only a nonce of other than 12 bytes can
// reach).
type gcmCTR struct {
	block cipher.Block
	ctr   [16]byte
	s     cipher.Stream
	left  uint64 // keystream bytes before the low 32 bits wrap
}

func newGCMCTR(block cipher.Block, j0 [16]byte) *gcmCTR {
	c := &gcmCTR{block: block, ctr: j0}
	low := binary.BigEndian.Uint32(c.ctr[12:]) + 1
	binary.BigEndian.PutUint32(c.ctr[12:], low)
	c.s = cipher.NewCTR(block, c.ctr[:])
	c.left = (1<<32 - uint64(low)) * 16
	return c
}

func (c *gcmCTR) XORKeyStream(dst, src []byte) {
	for len(src) > 0 {
		if c.left == 0 {
			binary.BigEndian.PutUint32(c.ctr[12:], 0)
			c.s = cipher.NewCTR(c.block, c.ctr[:])
			c.left = 1 << 36
		}
		n := int(min(uint64(len(src)), c.left))
		c.s.XORKeyStream(dst[:n], src[:n])
		dst, src, c.left = dst[n:], src[n:], c.left-uint64(n)
	}
}

// gcmReader decrypts a GCM ciphertext as it streams. It holds back the
// last 16 bytes (which may turn out to be the tag, appended by partners
// that leave mac empty) and, at the end, reads the fields after the
// content (tail), checks the tag, and only then releases the last
// plaintext and io.EOF.
type gcmReader struct {
	src    io.Reader
	tail   func() (mac, aad []byte, err error)
	auth   *gcmAuth
	ctr    *gcmCTR
	icvLen int // declared tag length, for a tag appended to the ciphertext
	work   []byte
	carry  []byte // ciphertext held back, a slice of work
	out    []byte
	total  int64
	err    error
}

// gcmParameters parses GCMParameters (RFC 5084).
func gcmParameters(alg pkix.AlgorithmIdentifier) (gcmParams, error) {
	var p gcmParams
	if _, err := asn1.Unmarshal(alg.Parameters.FullBytes, &p); err != nil {
		return p, fmt.Errorf("%w: GCM parameters: %w", ErrMalformed, err)
	}
	if len(p.Nonce) == 0 {
		return p, fmt.Errorf("%w: GCM nonce length 0", ErrUnsupportedAlgorithm)
	}
	return p, nil
}

// newGCMReader decrypts the ciphertext src with block under the GCM
// parameters of alg; tail reads what follows the content (the mac and
// the authenticated attributes of AuthEnvelopedData).
func newGCMReader(src io.Reader, block cipher.Block, alg pkix.AlgorithmIdentifier, tail func() (mac, aad []byte, err error)) (*gcmReader, error) {
	p, err := gcmParameters(alg)
	if err != nil {
		return nil, err
	}
	auth, err := newGCMAuth(block, p.Nonce)
	if err != nil {
		return nil, err
	}
	return &gcmReader{src: src, tail: tail, auth: auth, ctr: newGCMCTR(block, auth.j0), icvLen: p.ICVLen,
		work: make([]byte, 32+streamChunk)}, nil
}

func (g *gcmReader) Read(p []byte) (int, error) {
	for len(g.out) == 0 {
		if g.err != nil {
			return 0, g.err
		}
		g.fill()
	}
	n := copy(p, g.out)
	g.out = g.out[n:]
	return n, nil
}

// fill decrypts the next piece into g.out, or ends the stream.
func (g *gcmReader) fill() {
	held := copy(g.work, g.carry)
	n, err := io.ReadFull(g.src, g.work[held:held+streamChunk])
	g.total += int64(n)
	end := err == io.EOF || err == io.ErrUnexpectedEOF
	if err != nil && !end {
		g.err = err
		return
	}
	if g.total > gcmMaxText+16 {
		g.err = fmt.Errorf("%w: GCM ciphertext over %d bytes", ErrDecryption, int64(gcmMaxText))
		return
	}
	avail := g.work[:held+n]
	if !end {
		// Whole blocks, at least 16 bytes held back.
		k := (len(avail) - 16) &^ 15
		g.carry = avail[k:]
		g.out = g.open(avail[:k])
		return
	}
	g.carry = nil
	g.out, g.err = g.finish(avail)
}

// open authenticates and decrypts c in place.
func (g *gcmReader) open(c []byte) []byte {
	g.auth.absorb(c)
	g.ctr.XORKeyStream(c, c)
	return c
}

// finish takes the last ciphertext, reads the tag and checks it; the
// last plaintext is released only with a tag that verified.
func (g *gcmReader) finish(last []byte) ([]byte, error) {
	mac, aad, err := g.tail()
	if err != nil {
		return nil, err
	}
	tag := mac
	if len(mac) == 0 && g.icvLen >= 12 && g.icvLen <= 16 && len(last) >= g.icvLen {
		tag, last = last[len(last)-g.icvLen:], last[:len(last)-g.icvLen]
	}
	switch {
	case len(tag) < 12 || len(tag) > 16:
		return nil, fmt.Errorf("%w: GCM tag length %d", ErrUnsupportedAlgorithm, len(tag))
	case len(g.auth.nonce) != 12 && len(tag) != 16:
		return nil, fmt.Errorf("%w: GCM nonce length %d with tag length %d", ErrUnsupportedAlgorithm, len(g.auth.nonce), len(tag))
	case g.auth.n+int64(len(last)) > gcmMaxText:
		return nil, fmt.Errorf("%w: GCM ciphertext over %d bytes", ErrDecryption, int64(gcmMaxText))
	}
	g.auth.absorb(last)
	want := g.auth.sum(aad)
	if subtle.ConstantTimeCompare(want[:len(tag)], tag) != 1 {
		return nil, fmt.Errorf("%w: GCM: message authentication failed", ErrDecryption)
	}
	g.ctr.XORKeyStream(last, last)
	return last, io.EOF
}

// authTail reads the fields of an AuthEnvelopedData that follow its
// encrypted content: the end of the EncryptedContentInfo when its length
// is indefinite, authAttrs (returned as the DER the tag covers) and the
// mac. What follows (unauthAttrs, the ends of the structure) is left
// unread.
func (s *berStream) authTail(eciIndefinite bool) (mac, aad []byte, err error) {
	if eciIndefinite {
		h, err := s.header()
		if err != nil {
			return nil, nil, err
		}
		if !h.isEOC() {
			return nil, nil, malformed("encrypted content info: trailing field", nil)
		}
	}
	h, err := s.header()
	if err != nil {
		return nil, nil, err
	}
	if h.tag == tagContext1 {
		raw, err := s.rest(h, maxStreamField)
		if err != nil {
			return nil, nil, err
		}
		der, err := normalize(raw)
		if err != nil {
			return nil, nil, malformed("authenticated attributes", err)
		}
		aad = append([]byte{tagSet}, der[1:]...)
		if h, err = s.header(); err != nil {
			return nil, nil, err
		}
	}
	if h.tag != tagOctetString && h.tag != tagOctetString|0x20 {
		return nil, nil, malformed("auth enveloped data: mac", nil)
	}
	raw, err := s.rest(h, 1024)
	if err != nil {
		return nil, nil, err
	}
	der, err := normalize(raw)
	if err != nil {
		return nil, nil, malformed("mac", err)
	}
	if _, err := asn1.Unmarshal(der, &mac); err != nil {
		return nil, nil, malformed("mac", err)
	}
	return mac, aad, nil
}

// gcmContent returns the reader of a GCM encrypted content whose header
// h was read: AuthEnvelopedData (auth: the tag is in mac after it), or
// EnvelopedData as some partners make it, the tag appended to the
// ciphertext.
func (s *berStream) gcmContent(h streamHeader, block cipher.Block, alg pkix.AlgorithmIdentifier, auth, eciIndefinite bool) (io.Reader, error) {
	tail := func() ([]byte, []byte, error) { return nil, nil, nil }
	if auth {
		tail = func() ([]byte, []byte, error) { return s.authTail(eciIndefinite) }
	}
	return newGCMReader(s.octetStream(h), block, alg, tail)
}

// gcmSealer is the AES-GCM half of an EncryptWriter: the content is
// sealed in pieces of segmentSize bytes (CTR keystream, GHASH chained as
// gcmAuth does it) into the segments of an AuthEnvelopedData's encrypted
// content, and the tag written after it, in mac, on close.
type gcmSealer struct {
	dst  io.Writer
	seg  *segmentWriter
	auth *gcmAuth
	ctr  *gcmCTR
	buf  []byte // plaintext not sealed yet, < segmentSize bytes
	n    int64
}

// newGCMSealer writes the head of an AuthEnvelopedData ContentInfo for
// the recipient infos ris and the 12-byte nonce to dst and returns the
// sealer of its content.
func newGCMSealer(dst io.Writer, c cipherInfo, block cipher.Block, ris [][]byte, nonce []byte) (*gcmSealer, error) {
	if len(nonce) != 12 {
		return nil, fmt.Errorf("encrypt: the GCM nonce has %d bytes, want 12", len(nonce))
	}
	auth, err := newGCMAuth(block, nonce)
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	params := tlv(tagSequence, tlv(tagOctetString, nonce), tlv(tagInteger, []byte{16}))
	err = writeAll(dst,
		indefinite(tagSequence), mustOID(oidAuthEnvelopedData), indefinite(tagContext0),
		indefinite(tagSequence), tlv(tagInteger, []byte{0}), tlv(tagSet, sortedSet(ris)...),
		indefinite(tagSequence), mustOID(oidData), algorithmID(c.oid, params),
		indefinite(tagContext0)) // [0] IMPLICIT OCTET STRING, constructed
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	return &gcmSealer{dst: dst, seg: newSegmentWriter(dst), auth: auth, ctr: newGCMCTR(block, auth.j0),
		buf: make([]byte, 0, segmentSize)}, nil
}

func (g *gcmSealer) Write(p []byte) (int, error) {
	n := len(p)
	if g.n += int64(n); g.n > gcmMaxText {
		return 0, fmt.Errorf("%w: encrypt AES-GCM content over %d bytes", ErrUnsupportedAlgorithm, int64(gcmMaxText))
	}
	for len(p) > 0 {
		c := copy(g.buf[len(g.buf):cap(g.buf)], p)
		g.buf, p = g.buf[:len(g.buf)+c], p[c:]
		if len(g.buf) == cap(g.buf) {
			if err := g.seal(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// seal encrypts the buffered plaintext and writes it.
func (g *gcmSealer) seal() error {
	g.ctr.XORKeyStream(g.buf, g.buf)
	g.auth.absorb(g.buf)
	_, err := g.seg.Write(g.buf)
	g.buf = g.buf[:0]
	if err != nil {
		return fmt.Errorf("encrypt: %w", err)
	}
	return nil
}

// Close seals the rest and ends the ContentInfo, the tag in mac.
func (g *gcmSealer) Close() error {
	if err := g.seal(); err != nil {
		return err
	}
	if g.seg.flush(); g.seg.err != nil {
		return fmt.Errorf("encrypt: %w", g.seg.err)
	}
	tag := g.auth.sum(nil)
	// [0] encryptedContent and EncryptedContentInfo; the mac;
	// AuthEnvelopedData, [0], ContentInfo.
	if err := writeAll(g.dst, eoc, eoc, tlv(tagOctetString, tag[:]), eoc, eoc, eoc); err != nil {
		return fmt.Errorf("encrypt: %w", err)
	}
	return nil
}
