package cms

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/des"
	"crypto/x509"
	"fmt"
	"io"
)

// The writers below are the streaming counterparts of Compress and
// Encrypt: the content is written to them in pieces and the ContentInfo
// goes to the destination as it is produced, in BER with indefinite
// lengths and the content in OCTET STRING segments (the form openssl cms
// -stream writes and every CMS reader accepts), so that neither the
// content nor its encoding is ever held whole. Close writes the end of
// the structure; it does not close the destination.

// segmentSize is the content of one OCTET STRING segment a writer emits.
const segmentSize = 64 << 10

// eoc is the end-of-contents octets of an indefinite-length element.
var eoc = []byte{0, 0}

// indefinite is the identifier and indefinite-length octets of tag.
func indefinite(tag byte) []byte { return []byte{tag, 0x80} }

// segmentWriter writes what it is given as primitive OCTET STRING
// segments of at most segmentSize bytes to w.
type segmentWriter struct {
	w   io.Writer
	buf []byte
	err error
}

func newSegmentWriter(w io.Writer) *segmentWriter {
	return &segmentWriter{w: w, buf: make([]byte, 0, segmentSize)}
}

func (s *segmentWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && s.err == nil {
		c := copy(s.buf[len(s.buf):cap(s.buf)], p)
		s.buf, p = s.buf[:len(s.buf)+c], p[c:]
		if len(s.buf) == cap(s.buf) {
			s.flush()
		}
	}
	if s.err != nil {
		return 0, s.err
	}
	return n, nil
}

// flush writes the buffered bytes as one segment.
func (s *segmentWriter) flush() {
	if len(s.buf) == 0 || s.err != nil {
		return
	}
	hdr := appendLength([]byte{tagOctetString}, len(s.buf))
	if _, s.err = s.w.Write(hdr); s.err == nil {
		_, s.err = s.w.Write(s.buf)
	}
	s.buf = s.buf[:0]
}

// writeAll writes each part to w in order.
func writeAll(w io.Writer, parts ...[]byte) error {
	for _, p := range parts {
		if _, err := w.Write(p); err != nil {
			return err
		}
	}
	return nil
}

// CompressWriter deflates what is written to it (zlib, RFC 3274) into a
// CompressedData ContentInfo on its destination. Build it with
// NewCompressWriter; it is not safe for concurrent use.
type CompressWriter struct {
	dst io.Writer
	seg *segmentWriter
	z   *parallelZlib
}

// NewCompressWriter writes the head of a CompressedData ContentInfo to
// dst and returns the writer of its content, deflated at level (a
// compress/flate level; 1 is fastest) in blocks on up to GOMAXPROCS
// cores (see parallelZlib): one zlib stream any inflater reads. Close or
// Abort it on every path: it ends its goroutines.
func NewCompressWriter(dst io.Writer, level int) (*CompressWriter, error) {
	z, err := newParallelZlib(nil, level)
	if err != nil {
		return nil, fmt.Errorf("compress: %w", err)
	}
	err = writeAll(dst,
		indefinite(tagSequence), mustOID(oidCompressedData), indefinite(tagContext0),
		indefinite(tagSequence), tlv(tagInteger, []byte{0}), algorithmID(oidZlibCompress, nil),
		indefinite(tagSequence), mustOID(oidData), indefinite(tagContext0), indefinite(tagOctetString|0x20))
	if err != nil {
		z.Abort()
		return nil, fmt.Errorf("compress: %w", err)
	}
	seg := newSegmentWriter(dst)
	z.dst = seg
	return &CompressWriter{dst: dst, seg: seg, z: z}, nil
}

// Write deflates p.
func (c *CompressWriter) Write(p []byte) (int, error) {
	n, err := c.z.Write(p)
	if err != nil {
		return n, fmt.Errorf("compress: %w", err)
	}
	return n, nil
}

// Abort ends the writer's goroutines without ending the stream (a build
// given up); nothing more is written. It is a no-op after Close.
func (c *CompressWriter) Abort() { c.z.Abort() }

// Close ends the zlib stream and the ContentInfo; the writer's goroutines
// end with it, error or not.
func (c *CompressWriter) Close() error {
	if err := c.z.Close(); err != nil {
		return fmt.Errorf("compress: %w", err)
	}
	if c.seg.flush(); c.seg.err != nil {
		return fmt.Errorf("compress: %w", c.seg.err)
	}
	// OCTET STRING, [0], encapContentInfo, CompressedData, [0], ContentInfo.
	if err := writeAll(c.dst, eoc, eoc, eoc, eoc, eoc, eoc); err != nil {
		return fmt.Errorf("compress: %w", err)
	}
	return nil
}

// EncryptWriter encrypts what is written to it into an EnvelopedData
// ContentInfo on its destination (the CBC ciphers), or an
// AuthEnvelopedData one (AES-GCM: its tag, in mac after the content, is
// computed as the content streams; see gcmstream.go). Build it with
// NewEncryptWriter; it is not safe for concurrent use.
type EncryptWriter struct {
	gcm  *gcmSealer // AES-GCM; the fields below are CBC's
	head int64      // bytes of the head written to the destination
	dst  io.Writer
	seg  *segmentWriter
	cbc  cipher.BlockMode
	bs   int
	part []byte // a partial block, < bs bytes
	buf  []byte // encryption buffer
}

// NewEncryptWriter draws a content key and IV (a GCM nonce) from
// opts.Rand, or takes them from opts.Key (see EncryptOptions.Key),
// writes the head of an EnvelopedData (AuthEnvelopedData for a GCM
// cipher) ContentInfo for recipients (key transport as Encrypt does it)
// to dst and returns the writer of its content.
func NewEncryptWriter(dst io.Writer, recipients []*x509.Certificate, opts EncryptOptions) (*EncryptWriter, error) {
	c, rnd, opts, err := encryptSetup(recipients, opts)
	if err != nil {
		return nil, err
	}
	key, err := streamKey(c, recipients, opts, rnd)
	if err != nil {
		return nil, err
	}
	block, err := newBlock(c, key.CEK)
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	if c.gcm {
		cw := &countWriter{w: dst}
		g, err := newGCMSealer(cw, c, block, key.RecipientInfos, key.IV)
		if err != nil {
			return nil, err
		}
		g.dst, g.seg.w = dst, dst
		return &EncryptWriter{gcm: g, head: cw.n}, nil
	}
	bs := block.BlockSize()
	if len(key.IV) != bs {
		return nil, fmt.Errorf("encrypt: the IV has %d bytes, the cipher's block %d", len(key.IV), bs)
	}
	cw := &countWriter{w: dst}
	err = writeAll(cw,
		indefinite(tagSequence), mustOID(oidEnvelopedData), indefinite(tagContext0),
		indefinite(tagSequence), tlv(tagInteger, []byte{0}), tlv(tagSet, sortedSet(key.RecipientInfos)...),
		indefinite(tagSequence), mustOID(oidData), algorithmID(c.oid, tlv(tagOctetString, key.IV)),
		indefinite(tagContext0)) // [0] IMPLICIT OCTET STRING, constructed
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	mode, err := newCBC(c, block, key.CEK, key.IV, true)
	if err != nil {
		return nil, fmt.Errorf("encrypt: %w", err)
	}
	return &EncryptWriter{dst: dst, head: cw.n, seg: newSegmentWriter(dst), cbc: mode, bs: bs,
		part: make([]byte, 0, bs), buf: make([]byte, segmentSize)}, nil
}

// ivSize is the size of c's IV: its block (AES 16 bytes, 3DES 8), or
// GCM's 12-byte nonce.
func ivSize(c cipherInfo) int {
	switch {
	case c.gcm:
		return 12
	case c.oid.Equal(oidDESEDE3CBC):
		return des.BlockSize
	}
	return aes.BlockSize
}

// streamKey is opts.Key when it holds a key for c; otherwise a content
// key, recipient infos and IV (GCM: a 12-byte nonce) drawn from rnd,
// also recorded in opts.Key when it is set.
func streamKey(c cipherInfo, recipients []*x509.Certificate, opts EncryptOptions, rnd io.Reader) (*ContentKey, error) {
	if opts.Key != nil && !opts.Key.empty() {
		if len(opts.Key.CEK) != c.keyLen || len(opts.Key.RecipientInfos) == 0 {
			return nil, fmt.Errorf("encrypt: the given content key is not one for this cipher (%d key bytes, %d recipients)",
				len(opts.Key.CEK), len(opts.Key.RecipientInfos))
		}
		return opts.Key, nil
	}
	cek, ris, err := newContentKey(c, recipients, opts, rnd)
	if err != nil {
		return nil, err
	}
	iv := make([]byte, ivSize(c))
	if _, err := io.ReadFull(rnd, iv); err != nil {
		return nil, fmt.Errorf("encrypt: iv: %w", err)
	}
	k := &ContentKey{CEK: cek, IV: iv, RecipientInfos: ris}
	if opts.Key != nil {
		*opts.Key = *k
	}
	return k, nil
}

// Write encrypts p; the last partial block waits for more or for Close.
func (e *EncryptWriter) Write(p []byte) (int, error) {
	if e.gcm != nil {
		return e.gcm.Write(p)
	}
	n := len(p)
	if len(e.part) > 0 {
		c := copy(e.part[len(e.part):e.bs], p)
		e.part, p = e.part[:len(e.part)+c], p[c:]
		if len(e.part) < e.bs {
			return n, nil
		}
		if err := e.seal(e.part); err != nil {
			return 0, err
		}
		e.part = e.part[:0]
	}
	for len(p) >= e.bs {
		m := min(len(p)-len(p)%e.bs, len(e.buf))
		if err := e.seal(p[:m]); err != nil {
			return 0, err
		}
		p = p[m:]
	}
	e.part = append(e.part, p...)
	return n, nil
}

// seal encrypts whole blocks of p (at most len(e.buf)) and writes them.
func (e *EncryptWriter) seal(p []byte) error {
	out := e.buf[:len(p)]
	e.cbc.CryptBlocks(out, p)
	if _, err := e.seg.Write(out); err != nil {
		return fmt.Errorf("encrypt: %w", err)
	}
	return nil
}

// Close pads and encrypts the last block (PKCS #7; GCM: seals the rest
// and writes the tag) and ends the ContentInfo.
func (e *EncryptWriter) Close() error {
	if e.gcm != nil {
		return e.gcm.Close()
	}
	pad := e.bs - len(e.part)
	last := e.part
	for range pad {
		last = append(last, byte(pad))
	}
	if err := e.seal(last); err != nil {
		return err
	}
	e.part = e.part[:0]
	if e.seg.flush(); e.seg.err != nil {
		return fmt.Errorf("encrypt: %w", e.seg.err)
	}
	// [0] encryptedContent, EncryptedContentInfo, EnvelopedData, [0], ContentInfo.
	if err := writeAll(e.dst, eoc, eoc, eoc, eoc, eoc); err != nil {
		return fmt.Errorf("encrypt: %w", err)
	}
	return nil
}

// Size is the number of bytes the writer writes to its destination in
// all, head and end included, for content of n bytes: the head it wrote,
// the ciphertext (CBC: n padded to the next whole block, PKCS #7 always
// adding one; GCM: n) in segments of segmentSize, and the end (GCM: with
// the 16-byte tag). It lets a caller announce the length of a body
// before it is built; it does not depend on how the content is split
// into writes.
func (e *EncryptWriter) Size(n int64) int64 {
	if e.gcm != nil {
		// [0], EncryptedContentInfo, mac (18 bytes), AuthEnvelopedData, [0], ContentInfo.
		return e.head + segmentedSize(n) + 2*len64(eoc) + 18 + 3*len64(eoc)
	}
	bs := int64(e.bs)
	return e.head + segmentedSize((n/bs+1)*bs) + 5*len64(eoc)
}

// segmentedSize is the size of n content bytes as segmentWriter writes
// them: full segments, then the rest in one, each with its OCTET STRING
// header.
func segmentedSize(n int64) int64 {
	full, rest := n/segmentSize, n%segmentSize
	size := full * (segmentSize + int64(len(appendLength([]byte{tagOctetString}, segmentSize))))
	if rest > 0 {
		size += rest + int64(len(appendLength([]byte{tagOctetString}, int(rest))))
	}
	return size
}

func len64(b []byte) int64 { return int64(len(b)) }

// countWriter counts the bytes written to w.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
