package as2

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"

	"github.com/edihub/edihub/internal/as2/cms"
)

// ErrBoundaryInContent means the content a streamed multipart/signed
// signs held its boundary, which was drawn before the content was seen.
// With 96 random bits it does not happen by chance; building again draws
// another boundary.
var ErrBoundaryInContent = errors.New("as2: multipart boundary found in the signed content")

// StreamCompressionLevel is the zlib level of a streamed build: the
// fastest, because a large file compressed at the default level takes
// several times longer while saving a few percent of its size.
const StreamCompressionLevel = 1

// WrapWriter is Wrap for a payload of any size: the payload is written
// to it in pieces and the message body goes to the destination as it is
// built, compressed, signed (the digest taken over the exact bytes as
// they stream by) and encrypted, never held whole. S/MIME layers are BER
// with indefinite lengths (openssl cms -stream's form); AES-GCM too, its
// tag computed as the content streams. Build it with NewWrapWriter, write the payload, then Close; it is not
// safe for concurrent use.
type WrapWriter struct {
	w *wrapping
	// in receives the payload (the innermost writer).
	in io.Writer
	// closers end the layers, innermost first; aborts end the
	// goroutines of those that have some, for a build given up.
	closers []func() error
	aborts  []func()
	header  Header // of the outermost entity
	// sizes and heads tell Size what each layer makes of its content,
	// innermost first: the size function of the layer (nil: unknown in
	// advance) and the size of the inner entity's header it starts with.
	sizes []func(n int64) (int64, bool)
	heads []int64
	// mic digests what the MIC covers, in every algorithm.
	mic    *micHashes
	closed bool
	err    error
}

// StreamInputs is everything random a streamed build draws (the time is
// WrapOptions.Time): the multipart/signed boundary, the signature (an
// ECDSA signature is randomized, and crypto/ecdsa draws that randomness
// itself) with the digest it signs, and the encryption's content key,
// IV and recipient infos. Built again from the same payload with the
// same options, Time and StreamInputs, a message has the same bytes and
// MICs as long as the compressor's output is unchanged. It holds a
// secret (the content key): it decrypts this message's body.
type StreamInputs struct {
	Boundary string `json:"boundary,omitempty"`
	// Signature is the signature entity's DER, valid for SignedDigest:
	// it is used again only for content with that digest, else the
	// content is signed again.
	Signature    []byte          `json:"signature,omitempty"`
	SignedDigest []byte          `json:"signed_digest,omitempty"`
	Key          *cms.ContentKey `json:"key,omitempty"`
}

// layer is one S/MIME layer of a streamed build: the header of the
// entity it makes and how it opens: given the writer of its own body,
// it returns the writer of its content (the inner entity, header
// included), the function that ends it and, for a layer with goroutines,
// the one that stops them without ending it (nil otherwise; a no-op
// once ended).
type layer struct {
	header Header
	open   func(body io.Writer) (opened, error)
	// micHere: the MIC covers this layer's content.
	micHere bool
}

// opened is a layer once open: the writer of its content, the function
// that ends it, the one that stops its goroutines (nil when it has
// none) and its size function (see WrapWriter.Size; nil when its size
// is not known in advance).
type opened struct {
	content io.Writer
	close   func() error
	abort   func()
	size    func(n int64) (int64, bool)
}

// NewWrapWriter returns a WrapWriter that writes the body of the message
// for a payload of type contentType (filename in Content-Disposition
// when not empty) built per opts to dst. Nothing is written to dst until
// the first layer's head; dst is not closed.
func NewWrapWriter(dst io.Writer, contentType, filename string, opts WrapOptions) (*WrapWriter, error) {
	if err := checkStreamOptions(contentType, opts); err != nil {
		return nil, err
	}
	ww := &WrapWriter{w: newWrapping(opts)}
	payloadHeader := ww.w.payloadEntity(nil, contentType, filename).header
	layers, compressedFirst, err := ww.layers()
	if err != nil {
		return nil, err
	}
	micAtPayload, micAtEntity := ww.placeMIC(layers, compressedFirst)
	body, closers, err := ww.openLayers(dst, layers, payloadHeader)
	if err != nil {
		ww.Abort()
		return nil, err
	}
	if micAtEntity {
		// The payload entity is the message: its header fields travel as
		// HTTP fields but the MIC covers them as the receiver rebuilds
		// them.
		ww.mic.Write(append(writeHeader(nil, payloadHeader), '\r', '\n'))
		body = io.MultiWriter(body, ww.mic)
	}
	if ww.w.te == "base64" {
		b64 := newBase64LineWriter(body)
		closers = append(closers, b64.Close)
		body = b64
	}
	if micAtPayload {
		body = io.MultiWriter(body, ww.mic)
	}
	ww.in = body
	// Close the innermost first.
	for i, j := 0, len(closers)-1; i < j; i, j = i+1, j-1 {
		closers[i], closers[j] = closers[j], closers[i]
	}
	ww.closers = closers
	return ww, nil
}

// checkStreamOptions rejects what a streamed build cannot make or lacks.
func checkStreamOptions(contentType string, opts WrapOptions) error {
	if contentType == "" {
		return errors.New("wrap: empty content type")
	}
	if opts.Sign != 0 && (opts.SignerKey == nil || opts.SignerCert == nil) {
		return errors.New("wrap: signing needs SignerKey and SignerCert")
	}
	keyGiven := opts.Inputs != nil && opts.Inputs.Key != nil && len(opts.Inputs.Key.CEK) > 0
	if opts.Encrypt != 0 && opts.RecipientCert == nil && !keyGiven {
		return errors.New("wrap: encryption needs RecipientCert")
	}
	return nil
}

// layers returns the S/MIME layers of ww's options, innermost first, in
// Wrap's order, and whether compression is the innermost. A sign layer
// draws its boundary now.
func (ww *WrapWriter) layers() ([]layer, bool, error) {
	w, opts := ww.w, ww.w.opts
	var layers []layer
	compressedFirst := false
	if opts.Compress == CompressBeforeSigning || (opts.Compress == CompressAfterSigning && opts.Sign == 0) {
		layers = append(layers, w.compressLayer())
		compressedFirst = true
	}
	if opts.Sign != 0 {
		l, err := ww.signLayer()
		if err != nil {
			return nil, false, err
		}
		layers = append(layers, l)
		if opts.Compress == CompressAfterSigning {
			layers = append(layers, w.compressLayer())
		}
	}
	if opts.Encrypt != 0 {
		layers = append(layers, w.encryptLayer())
	}
	return layers, compressedFirst, nil
}

// placeMIC decides where the MIC is taken, by Wrap's rules (see
// wrapping.mic): in a layer (marked micHere, or the sign layer itself),
// over the payload's content, or over the payload entity with its header.
// Unless signing, it also makes ww.mic.
func (ww *WrapWriter) placeMIC(layers []layer, compressedFirst bool) (atPayload, atEntity bool) {
	opts := ww.w.opts
	switch {
	case opts.Sign != 0:
		ww.w.micHash = opts.Sign
		// the sign layer digests its content itself
	case opts.Encrypt != 0:
		layers[len(layers)-1].micHere = true
	case opts.UnsignedMIC == MICContentOnly:
		atPayload = true
	case compressedFirst:
		layers[0].micHere = true
	default:
		atEntity = true
	}
	if opts.Sign == 0 {
		ww.mic = newMICHashes(ww.w.micHash, !opts.OneMIC)
	}
	return atPayload, atEntity
}

// openLayers opens the layers from the outermost in, each one's content
// being the next one's entity, header first, and sets ww.header to the
// outermost entity's. It returns the writer of the payload entity's body
// and the layers' closers, outermost first.
func (ww *WrapWriter) openLayers(dst io.Writer, layers []layer, payloadHeader Header) (io.Writer, []func() error, error) {
	body := dst
	ww.header = payloadHeader
	if len(layers) > 0 {
		ww.header = layers[len(layers)-1].header
	}
	closers := make([]func() error, 0, len(layers)+1)
	ww.sizes, ww.heads = make([]func(int64) (int64, bool), len(layers)), make([]int64, len(layers))
	for i := len(layers) - 1; i >= 0; i-- {
		o, err := layers[i].open(body)
		if err != nil {
			return nil, nil, err
		}
		closers = append(closers, o.close)
		if o.abort != nil {
			ww.aborts = append(ww.aborts, o.abort)
		}
		content := o.content
		if layers[i].micHere {
			content = io.MultiWriter(content, ww.mic)
		}
		inner := payloadHeader
		if i > 0 {
			inner = layers[i-1].header
		}
		head := append(writeHeader(nil, inner), '\r', '\n')
		ww.sizes[i], ww.heads[i] = o.size, int64(len(head))
		if _, err := content.Write(head); err != nil {
			return nil, nil, fmt.Errorf("wrap: %w", err)
		}
		body = content
	}
	return body, closers, nil
}

// Write adds p to the payload.
func (ww *WrapWriter) Write(p []byte) (int, error) {
	if ww.err != nil {
		return 0, ww.err
	}
	if ww.closed {
		return 0, errors.New("wrap: write after close")
	}
	n, err := ww.in.Write(p)
	if err != nil {
		ww.err = fmt.Errorf("wrap: %w", err)
		return n, ww.err
	}
	return n, nil
}

// Close ends every layer and returns the message: Header as Wrap's, Body
// nil (it went to the destination), the MIC and MICs. The writer's
// goroutines end with it, error or not.
func (ww *WrapWriter) Close() (*Wrapped, error) {
	defer ww.Abort()
	if ww.err != nil {
		return nil, ww.err
	}
	if ww.closed {
		return nil, errors.New("wrap: closed twice")
	}
	ww.closed = true
	for _, c := range ww.closers {
		if err := c(); err != nil {
			ww.err = err
			if !errors.Is(err, ErrBoundaryInContent) {
				ww.err = fmt.Errorf("wrap: %w", err)
			}
			return nil, ww.err
		}
	}
	mic, mics := ww.mic.sums()
	return &Wrapped{Header: ww.w.header(part{header: ww.header}), MIC: mic, MICs: mics}, nil
}

// Abort gives the build up: it stops the writer's goroutines and waits
// for them; nothing more is written. It is a no-op after Close, and safe
// to call more than once (defer it).
func (ww *WrapWriter) Abort() {
	for _, a := range ww.aborts {
		a()
	}
	if ww.mic != nil {
		ww.mic.stop()
	}
	if ww.err == nil && !ww.closed {
		ww.err = errors.New("wrap: aborted")
	}
}

// compressLayer is a compressed-data entity.
func (w *wrapping) compressLayer() layer {
	return layer{
		header: smimePart("compressed-data", "smime.p7z", nil, w.te).header,
		open: func(body io.Writer) (opened, error) {
			out, closeOut := w.transferEncoded(body)
			cw, err := cms.NewCompressWriter(out, StreamCompressionLevel)
			if err != nil {
				return opened{}, err
			}
			// Its size depends on the compressor's output: unknown.
			return opened{content: cw, close: closeInOrder(cw.Close, closeOut), abort: cw.Abort}, nil
		},
	}
}

// encryptLayer is an enveloped-data entity (CBC), or authEnveloped-data
// (GCM).
func (w *wrapping) encryptLayer() layer {
	smimeType := "enveloped-data"
	if w.opts.Encrypt == cms.AES128GCM || w.opts.Encrypt == cms.AES256GCM {
		smimeType = "authEnveloped-data"
	}
	return layer{
		header: smimePart(smimeType, "smime.p7m", nil, w.te).header,
		open: func(body io.Writer) (opened, error) {
			out, closeOut := w.transferEncoded(body)
			// With a recorded key, the certificate is not used (and may be
			// gone: the recorded recipient infos carry the key).
			ew, err := cms.NewEncryptWriter(out, []*x509.Certificate{w.opts.RecipientCert}, cms.EncryptOptions{
				Cipher: w.opts.Encrypt, OAEP: w.opts.OAEP, OAEPHash: w.opts.OAEPHash, Rand: w.rnd, Key: w.contentKey(),
			})
			if err != nil {
				return opened{}, err
			}
			size := func(n int64) (int64, bool) { return w.transferSize(ew.Size(n)), true }
			return opened{content: ew, close: closeInOrder(ew.Close, closeOut), size: size}, nil
		},
	}
}

// contentKey is where the encryption of a streamed build records or
// finds its key: nil when the build records nothing.
func (w *wrapping) contentKey() *cms.ContentKey {
	in := w.opts.Inputs
	if in == nil {
		return nil
	}
	if in.Key == nil {
		in.Key = &cms.ContentKey{}
	}
	return in.Key
}

// closeInOrder is a closer that calls first, then, when first succeeded,
// then: a layer's writer, then the transfer encoding under it.
func closeInOrder(first, then func() error) func() error {
	return func() error {
		if err := first(); err != nil {
			return err
		}
		return then()
	}
}

// transferEncoded is body in the S/MIME bodies' transfer encoding and
// the function that ends it.
func (w *wrapping) transferEncoded(body io.Writer) (io.Writer, func() error) {
	if w.te != "base64" {
		return body, func() error { return nil }
	}
	b := newBase64LineWriter(body)
	return b, b.Close
}

// signLayer is a multipart/signed entity whose boundary is drawn now (or
// taken from WrapOptions.Inputs); its content is digested (every MIC
// algorithm) as it streams to the body and scanned for the boundary.
func (ww *WrapWriter) signLayer() (layer, error) {
	w := ww.w
	boundary, err := w.signBoundary()
	if err != nil {
		return layer{}, err
	}
	micalg := MICAlgName(w.opts.Sign)
	if w.opts.RFC3851MICAlg {
		micalg = MICAlgNameRFC3851(w.opts.Sign)
	}
	ww.mic = newMICHashes(w.opts.Sign, !w.opts.OneMIC)
	return layer{
		header: Header{{"Content-Type", `multipart/signed; protocol="application/pkcs7-signature"; micalg=` +
			micalg + `; boundary="` + boundary + `"`}},
		open: func(body io.Writer) (opened, error) {
			if _, err := io.WriteString(body, "--"+boundary+"\r\n"); err != nil {
				return opened{}, err
			}
			scan := &boundaryScan{boundary: []byte(boundary)}
			content := io.MultiWriter(body, ww.mic, scan)
			closeLayer := func() error {
				if scan.found {
					return ErrBoundaryInContent
				}
				sig, err := w.signature(ww.mic.main.Sum(nil))
				if err != nil {
					return err
				}
				var b bytes.Buffer
				b.WriteString("\r\n--" + boundary + "\r\n")
				b.Write(signatureEntity(sig))
				b.WriteString("\r\n--" + boundary + "--\r\n")
				_, err = body.Write(b.Bytes())
				return err
			}
			size := func(n int64) (int64, bool) {
				sig, ok := w.signatureSize()
				// "--b\r\n", content, "\r\n--b\r\n", signature, "\r\n--b--\r\n".
				return int64(3*len(boundary)+18) + n + sig, ok
			}
			return opened{content: content, close: closeLayer, size: size}, nil
		},
	}, nil
}

// signBoundary is the boundary of a streamed multipart/signed: the
// recorded one of WrapOptions.Inputs, or 96 random bits (recorded there
// when it is set).
func (w *wrapping) signBoundary() (string, error) {
	in := w.opts.Inputs
	if in != nil && in.Boundary != "" {
		return in.Boundary, nil
	}
	var r [12]byte
	if _, err := io.ReadFull(w.rnd, r[:]); err != nil {
		return "", fmt.Errorf("wrap: boundary: %w", err)
	}
	boundary := "----=_Part_" + hex.EncodeToString(r[:])
	if in != nil {
		in.Boundary = boundary
	}
	return boundary, nil
}

// signature signs the digest md of a streamed multipart/signed's
// content: the recorded signature of WrapOptions.Inputs when it signs
// the same digest, else a new one (recorded there when it is set).
func (w *wrapping) signature(md []byte) ([]byte, error) {
	in := w.opts.Inputs
	if in != nil && in.Signature != nil && bytes.Equal(in.SignedDigest, md) {
		return in.Signature, nil
	}
	sig, err := cms.SignDigest(md, w.opts.SignerCert, w.opts.SignerKey, cms.SignOptions{
		Hash: w.opts.Sign, SigningTime: w.opts.Time, AlgorithmProtection: w.opts.AlgorithmProtection, Rand: w.rnd,
	})
	if err != nil {
		return nil, err
	}
	if in != nil && in.Signature == nil {
		in.Signature, in.SignedDigest = sig, md
	}
	return sig, nil
}

// micHashes digests one stream for the MIC: in the algorithm asked for
// (the signature's, or the MIC's) on the writer's goroutine and, when
// every algorithm is wanted, in the other algorithms of MICAlgorithms on
// a goroutine of its own, fed copies of the stream in blocks: four more
// digests of every byte (SHA-384 and SHA-512 alone cost three times
// SHA-256) then run beside the build instead of in it.
type micHashes struct {
	alg  crypto.Hash
	main hash.Hash
	// others are the other algorithms' digests, in MICAlgorithms' order
	// with a nil in alg's place; nil when only alg is wanted.
	others []hash.Hash
	buf    []byte        // the block being filled
	work   chan []byte   // blocks to the goroutine
	free   chan []byte   // blocks back from it (nil: not made yet)
	done   chan struct{} // closed when the goroutine ends
	ended  bool
}

// micBlock is a block of the stream the other digests take at a time;
// micBlocks of them exist at most.
const (
	micBlock  = 256 << 10
	micBlocks = 3
)

// newMICHashes digests in alg and, when all, in every algorithm of
// MICAlgorithms.
func newMICHashes(alg crypto.Hash, all bool) *micHashes {
	m := &micHashes{alg: alg, main: alg.New()}
	if !all {
		return m
	}
	m.others = make([]hash.Hash, len(MICAlgorithms))
	for i, a := range MICAlgorithms {
		if a != alg {
			m.others[i] = a.New()
		}
	}
	m.work, m.free, m.done = make(chan []byte, micBlocks), make(chan []byte, micBlocks), make(chan struct{})
	for range micBlocks {
		m.free <- nil
	}
	go func() {
		defer close(m.done)
		for b := range m.work {
			for _, h := range m.others {
				if h != nil {
					h.Write(b)
				}
			}
			m.free <- b[:0]
		}
	}()
	return m
}

func (m *micHashes) Write(p []byte) (int, error) {
	m.main.Write(p)
	if m.others == nil || m.ended {
		return len(p), nil
	}
	for q := p; len(q) > 0; {
		if m.buf == nil {
			if m.buf = <-m.free; m.buf == nil {
				m.buf = make([]byte, 0, micBlock)
			}
		}
		c := copy(m.buf[len(m.buf):micBlock], q)
		m.buf, q = m.buf[:len(m.buf)+c], q[c:]
		if len(m.buf) == micBlock {
			m.work <- m.buf
			m.buf = nil
		}
	}
	return len(p), nil
}

// stop hands the last block on and waits for the goroutine to digest
// what it was given and end. It is safe to call more than once.
func (m *micHashes) stop() {
	if m.others == nil || m.ended {
		return
	}
	m.ended = true
	if len(m.buf) > 0 {
		m.work <- m.buf
	}
	m.buf = nil
	close(m.work)
	<-m.done
}

// sums are the MIC in alg and the MICs: in every algorithm of
// MICAlgorithms, in that order, or only alg's.
func (m *micHashes) sums() (MIC, []MIC) {
	mic := MIC{Alg: m.alg, Digest: m.main.Sum(nil)}
	if m.others == nil {
		return mic, []MIC{mic}
	}
	m.stop()
	out := make([]MIC, len(m.others))
	for i, h := range m.others {
		if h == nil {
			out[i] = mic
		} else {
			out[i] = MIC{Alg: MICAlgorithms[i], Digest: h.Sum(nil)}
		}
	}
	return mic, out
}

// boundaryScan records whether the bytes written to it, across writes,
// contain boundary.
type boundaryScan struct {
	boundary []byte
	tail     []byte // the last len(boundary)-1 bytes seen
	found    bool
}

func (s *boundaryScan) Write(p []byte) (int, error) {
	if s.found {
		return len(p), nil
	}
	k := len(s.boundary) - 1
	if len(s.tail) > 0 {
		// A boundary across the previous write and this one.
		joined := append(s.tail, p[:min(len(p), k)]...)
		if bytes.Contains(joined, s.boundary) {
			s.found = true
			return len(p), nil
		}
	}
	if bytes.Contains(p, s.boundary) {
		s.found = true
		return len(p), nil
	}
	if len(p) >= k {
		s.tail = append(s.tail[:0], p[len(p)-k:]...)
	} else {
		s.tail = append(s.tail, p...)
		if len(s.tail) > k {
			s.tail = append(s.tail[:0], s.tail[len(s.tail)-k:]...)
		}
	}
	return len(p), nil
}

// base64LineWriter writes the base64 encoding of what it is given in
// lines of 76 characters ending in CRLF, as encodeBase64Lines does.
type base64LineWriter struct {
	w   io.Writer
	in  []byte // pending input, less than a line
	out []byte
}

// b64Line is the input of one 76-character line.
const b64Line = 57

func newBase64LineWriter(w io.Writer) *base64LineWriter {
	return &base64LineWriter{w: w, in: make([]byte, 0, b64Line)}
}

func (b *base64LineWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(b.in) > 0 {
		c := copy(b.in[len(b.in):b64Line], p)
		b.in, p = b.in[:len(b.in)+c], p[c:]
		if len(b.in) < b64Line {
			return n, nil
		}
		if err := b.emit(b.in); err != nil {
			return 0, err
		}
		b.in = b.in[:0]
	}
	const batch = 1024 * b64Line
	for len(p) >= b64Line {
		m := min(len(p)-len(p)%b64Line, batch)
		if err := b.emit(p[:m]); err != nil {
			return 0, err
		}
		p = p[m:]
	}
	b.in = append(b.in, p...)
	return n, nil
}

// emit encodes p (whole lines, or the last one) and writes it.
func (b *base64LineWriter) emit(p []byte) error {
	b.out = b.out[:0]
	for len(p) > 0 {
		n := min(b64Line, len(p))
		b.out = base64.StdEncoding.AppendEncode(b.out, p[:n])
		b.out = append(b.out, '\r', '\n')
		p = p[n:]
	}
	_, err := b.w.Write(b.out)
	return err
}

// Close writes the last, shorter line.
func (b *base64LineWriter) Close() error {
	if len(b.in) == 0 {
		return nil
	}
	err := b.emit(b.in)
	b.in = b.in[:0]
	return err
}

// Header is the HTTP header of the message being built, as Close
// returns it: known, boundary included, once the writer is made.
func (ww *WrapWriter) Header() http.Header { return ww.w.header(part{header: ww.header}) }

// Size is the length of the body ww writes to its destination for a
// payload of n bytes, computed before the payload is written, and
// whether it can be known in advance: not for a compressed message (its
// size is the compressor's output) nor one signed with a key whose
// signatures vary in length (ECDSA). A caller announcing the size (a
// Content-Length) must still check it against the bytes written.
func (ww *WrapWriter) Size(n int64) (int64, bool) {
	n = ww.w.transferSize(n)
	for i, size := range ww.sizes {
		if size == nil {
			return 0, false
		}
		var ok bool
		if n, ok = size(ww.heads[i] + n); !ok {
			return 0, false
		}
	}
	return n, true
}

// transferSize is the size of n bytes in the S/MIME bodies' transfer
// encoding: base64 in lines of 76 characters and CRLF (the last shorter),
// or binary.
func (w *wrapping) transferSize(n int64) int64 {
	if w.te != "base64" {
		return n
	}
	size := n / b64Line * (76 + 2)
	if r := n % b64Line; r > 0 {
		size += (r+2)/3*4 + 2
	}
	return size
}

// signatureSize is the size of the signature entity of a streamed
// multipart/signed, known in advance for an RSA key (a signature as
// long as its modulus; PKCS #1 v1.5 signing is deterministic): that of
// the recorded signature, or of one made over a digest of zeros with
// the same key and options.
func (w *wrapping) signatureSize() (int64, bool) {
	if _, ok := w.opts.SignerKey.Public().(*rsa.PublicKey); !ok {
		return 0, false
	}
	if in := w.opts.Inputs; in != nil && in.Signature != nil {
		return int64(len(signatureEntity(in.Signature))), true
	}
	sig, err := cms.SignDigest(make([]byte, w.opts.Sign.Size()), w.opts.SignerCert, w.opts.SignerKey, cms.SignOptions{
		Hash: w.opts.Sign, SigningTime: w.opts.Time, AlgorithmProtection: w.opts.AlgorithmProtection, Rand: rand.Reader,
	})
	if err != nil {
		return 0, false
	}
	return int64(len(signatureEntity(sig))), true
}
