package as2

import (
	"bufio"
	"bytes"
	"crypto"
	"encoding/asn1"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime/quotedprintable"
	"net/http"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/as2/cms"
)

// MaxSignatureBytes bounds the signature part of a streamed
// multipart/signed, which is read whole.
const MaxSignatureBytes = 1 << 20

// UnwrapStream is Unwrap for a body of any size, read once from body and
// held nowhere whole: layers are decrypted (EnvelopedData with a CBC
// cipher, or AuthEnvelopedData with AES-GCM), decompressed (zlib) and
// their signatures (multipart/signed, or an opaque signed-data)
// digested as the bytes stream by, and the payload, transfer encoding
// removed, is written to payload. Its size is Message.PayloadSize;
// Message.Payload and SignedContent stay nil, SignedDigests holds the
// signed content's digests. The MIC rules and errors are Unwrap's; a
// signature verifies only once its content has streamed past, and a GCM
// tag once its ciphertext has, so payload holds unverified bytes until
// UnwrapStream returns nil: the caller discards them on any error.
func UnwrapStream(h http.Header, body io.Reader, opts UnwrapOptions, payload io.Writer) (_ *Message, err error) {
	top, err := requestEntity(h, nil)
	if err != nil {
		return nil, err
	}
	u := &streamUnwrapping{unwrapping: newUnwrapping(top, opts), payload: payload}
	start := time.Now()
	defer func() {
		u.pipe.stop() // before anything the stages touch is read
		if opts.Stats != nil {
			u.pipe.stats(opts.Stats, time.Since(start))
		}
		u.pipe.release()
		if err != nil && u.blind {
			err = &Error{Disposition: DispositionDecryptionFailed, Err: err}
		}
	}()
	if err := u.entity(top.Header, u.pipe.add(body, stageRead), 0); err != nil {
		return nil, err
	}
	m := u.m
	switch {
	case !u.signedMIC.IsZero():
		m.MIC = u.signedMIC
	case u.encHash != nil:
		m.MIC = MIC{Alg: u.micAlg, Digest: u.encHash.Sum(nil)}
	case u.payHash != nil:
		m.MIC = MIC{Alg: u.micAlg, Digest: u.payHash.Sum(nil)}
	case u.compHash != nil:
		m.MIC = MIC{Alg: u.micAlg, Digest: u.compHash.Sum(nil)}
	}
	return m, nil
}

// streamUnwrapping is the state of one UnwrapStream call.
type streamUnwrapping struct {
	*unwrapping
	payload io.Writer
	// pending counts the multipart/signed layers whose content is
	// streaming and whose signature is not checked yet.
	pending int
	// The MIC digests of the outermost decrypted and decompressed
	// entities and of the payload, started only when the MIC may be
	// theirs.
	encHash, compHash, payHash hash.Hash
	// pipe runs the layers' readers in goroutines of their own
	// (readahead.go).
	pipe pipeline
	// zlib takes the first compressed layer's stream when
	// UnwrapOptions.Compressed asks for it; zlibSkip is its payload
	// entity's header length once it was kept.
	zlib     *zlibTee
	zlibSkip int64
}

// entity peels the entity whose header is hdr and whose body is the rest
// of body.
func (u *streamUnwrapping) entity(hdr Header, body io.Reader, depth int) error {
	if depth > u.lim.MaxDepth {
		return classify(stageMIME, fmt.Errorf("%w: more than %d S/MIME layers", ErrLimit, u.lim.MaxDepth))
	}
	mt, params := ParseMediaType(hdr.Get("Content-Type"))
	switch mt {
	case "multipart/signed":
		return u.signed(params, body, depth)
	case "application/pkcs7-mime", "application/x-pkcs7-mime":
		return u.pkcs7(hdr, params["smime-type"], body, depth)
	}
	return u.writePayload(hdr, body, depth)
}

// pkcs7 peels an application/pkcs7-mime layer.
func (u *streamUnwrapping) pkcs7(hdr Header, smimeType string, body io.Reader, depth int) error {
	br := bufio.NewReaderSize(cmsStream(hdr, body), 64<<10)
	typ, err := peekType(br)
	if err != nil {
		return classify(stageFor(smimeType), err)
	}
	var inner io.Reader
	var s stage
	switch typ {
	case cms.TypeEnvelopedData, cms.TypeAuthEnvelopedData:
		s = stageDecrypt
		u.blind = u.blind || (!u.m.Signed && u.pending == 0)
		if inner, err = cms.DecryptStream(br, u.opts.Keys); err != nil {
			return classify(s, fmt.Errorf("decrypt: %w", err))
		}
		inner = u.pipe.add(inner, stageDecryptRun)
		u.m.Encrypted = true
		u.m.Layers = append(u.m.Layers, LayerEncrypted)
		if !u.encryptedSeen {
			u.encryptedSeen = true
			return u.inner(s, inner, depth, true)
		}
	case cms.TypeCompressedData:
		s = stageDecompress
		var tee io.Writer
		if !u.compressedSeen && u.opts.Compressed != nil {
			u.zlib = &zlibTee{w: u.opts.Compressed.Stream}
			tee = u.zlib
		}
		if inner, err = cms.DecompressStreamTee(br, u.decompressBudget, tee); err != nil {
			return classify(s, fmt.Errorf("decompress: %w", err))
		}
		inner = u.pipe.add(inner, stageInflateRun)
		u.m.Compressed = true
		u.m.Layers = append(u.m.Layers, LayerCompressed)
		if !u.compressedSeen {
			u.compressedSeen = true
			if u.opts.UnsignedMIC == MICWithHeaders && !u.encryptedSeen && u.pending == 0 && !u.m.Signed {
				u.compHash = u.micAlg.New()
				inner = io.TeeReader(inner, u.compHash)
			}
		}
	case cms.TypeSignedData:
		return u.opaque(br, depth)
	default:
		return classify(stageFor(smimeType), fmt.Errorf("%w: CMS content type %v", cms.ErrContentType, typ))
	}
	return u.inner(s, inner, depth, false)
}

// opaque streams an opaque signed-data layer: its encapsulated content
// is digested as it is peeled (in the SignedData's digest algorithms, the
// MIC's and SHA-256, for the replay check), and the signature that
// follows it is checked at its end.
func (u *streamUnwrapping) opaque(br *bufio.Reader, depth int) error {
	extra := []crypto.Hash{crypto.SHA256}
	if len(u.opts.MICAlgs) > 0 {
		extra = append(extra, u.opts.MICAlgs[0])
	}
	vr, err := cms.VerifyStream(br, u.opts.PartnerCerts, extra...)
	if err != nil {
		return classify(stageVerify, fmt.Errorf("verify: %w", err))
	}
	u.pending++
	u.m.Layers = append(u.m.Layers, LayerSigned) // outside what it covers
	err = u.inner(stageVerify, vr, depth, false)
	u.pending--
	if err != nil {
		return err
	}
	u.streamVerified(vr.Verified(), vr.Digests())
	return nil
}

// inner peels the MIME entity a CMS layer decrypted, decompressed or
// encapsulated, and reads that layer to its end (where a CBC padding, a
// GCM tag, a zlib checksum or a signature is checked) before it counts
// as peeled. mic asks for the entity's digest, the MIC of an encrypted
// message unless a signature inside gives it.
func (u *streamUnwrapping) inner(s stage, inner io.Reader, depth int, mic bool) error {
	ib := bufio.NewReaderSize(inner, 64<<10)
	hdr, raw, err := readHeader(ib, u.lim)
	if err != nil {
		return classify(s, fmt.Errorf("inner entity: %w", err))
	}
	if s == stageDecompress {
		if err := u.keepZlib(hdr, len(raw)); err != nil {
			return err
		}
	}
	var body io.Reader = ib
	if mt, _ := ParseMediaType(hdr.Get("Content-Type")); mic && mt != "multipart/signed" {
		u.encHash = u.micAlg.New()
		u.encHash.Write(raw)
		body = io.TeeReader(ib, u.encHash)
	}
	err = u.entity(hdr, body, depth+1)
	if _, derr := io.Copy(io.Discard, ib); derr != nil {
		var we *writeError
		if errors.As(derr, &we) {
			return we.err
		}
		// The layer's own failure wins: what was peeled came out of it.
		return classify(s, derr)
	}
	return err
}

// keepZlib decides, for the entity whose header (of n bytes) a
// compressed layer starts with, whether the layer's zlib stream is the
// payload's stored form (CompressedOutput): when it is that entity's
// whole content, without transfer encoding, in the first compressed
// layer. The first call decides (an inner compressed layer's finds the
// stream dropped).
func (u *streamUnwrapping) keepZlib(hdr Header, n int) error {
	if u.zlib == nil {
		return nil
	}
	mt, _ := ParseMediaType(hdr.Get("Content-Type"))
	cte := (&Entity{Header: hdr}).TransferEncoding()
	want := mt != "multipart/signed" && mt != "application/pkcs7-mime" && mt != "application/x-pkcs7-mime" &&
		(cte == "binary" || cte == "7bit" || cte == "8bit")
	kept, err := u.zlib.keep(want)
	if kept {
		u.zlibSkip = int64(n)
	}
	return err // the writer's: returned as it is
}

// signed streams a multipart/signed layer: its first part is digested as
// it is peeled, then its signature part is read and verified.
func (u *streamUnwrapping) signed(params map[string]string, body io.Reader, depth int) error {
	boundary := params["boundary"]
	if boundary == "" {
		return classify(stageVerify, fmt.Errorf("%w: multipart/signed without boundary", ErrMalformedMIME))
	}
	br := bufio.NewReaderSize(body, 64<<10)
	delim := []byte("--" + boundary)
	if err := skipPreamble(br, delim, u.lim.MaxHeaderBytes); err != nil {
		return classify(stageVerify, err)
	}
	digests := u.signedHashes(params["micalg"])
	w := make([]io.Writer, 0, len(digests))
	for _, h := range digests {
		w = append(w, h)
	}
	first := &partReader{br: br, delim: append([]byte{'\n'}, delim...)}
	// The part is scanned and digested in a stage of its own; br and
	// first are its goroutine's until it stopped.
	ra := u.pipe.add(io.TeeReader(first, io.MultiWriter(w...)), stageVerifyRun)
	content := bufio.NewReaderSize(ra, 64<<10)
	u.pending++
	u.m.Layers = append(u.m.Layers, LayerSigned) // outside what it covers
	innerErr := u.signedContent(content, depth)
	u.pending--
	_, err := io.Copy(io.Discard, content)
	ra.stop()
	if err != nil {
		return classify(stageVerify, err)
	}
	if !first.found {
		return classify(stageVerify, fmt.Errorf("%w: multipart/signed with 1 part", ErrMalformedMIME))
	}
	sig, err := signaturePart(br, first.delim, u.lim)
	if err != nil {
		return classify(stageVerify, fmt.Errorf("signature part: %w", err))
	}
	sums := map[crypto.Hash][]byte{}
	for alg, h := range digests {
		sums[alg] = h.Sum(nil)
	}
	v, err := cms.VerifyDigests(sig, sums, u.opts.PartnerCerts)
	if err != nil {
		return classify(stageVerify, fmt.Errorf("verify: %w", err))
	}
	u.streamVerified(v, sums)
	_, _ = io.Copy(io.Discard, br) // the epilogue
	return innerErr
}

// signedContent peels the first part of a multipart/signed.
func (u *streamUnwrapping) signedContent(content *bufio.Reader, depth int) error {
	hdr, _, err := readHeader(content, u.lim)
	if err != nil {
		return classify(stageMIME, fmt.Errorf("signed part: %w", err))
	}
	return u.entity(hdr, content, depth+1)
}

// signedHashes are the digests computed over a signed part: the one the
// micalg parameter announces (the signature's, normally), the MIC's, and
// SHA-256 (for the replay check).
func (u *streamUnwrapping) signedHashes(micalg string) map[crypto.Hash]hash.Hash {
	out := map[crypto.Hash]hash.Hash{crypto.SHA256: crypto.SHA256.New()}
	for _, name := range strings.Split(micalg, ",") {
		if alg, err := ParseMICAlg(strings.TrimSpace(name)); err == nil && out[alg] == nil {
			out[alg] = alg.New()
		}
	}
	if len(u.opts.MICAlgs) > 0 && out[u.opts.MICAlgs[0]] == nil {
		out[u.opts.MICAlgs[0]] = u.opts.MICAlgs[0].New()
	}
	return out
}

// streamVerified records a signature that verified over content whose
// digests are sums. The outermost one gives the MIC and the Signer: it
// verifies last, after the ones its content holds.
func (u *streamUnwrapping) streamVerified(v *cms.Verified, sums map[crypto.Hash][]byte) {
	u.m.Signed = true
	u.blind = false
	u.m.Signer, u.m.SignedDigests = v.Signer, sums
	u.signedMIC = MIC{Alg: v.Hash, Digest: v.Digest}
	if len(u.opts.MICAlgs) > 0 && u.opts.MICAlgs[0] != v.Hash {
		u.signedMIC = MIC{Alg: u.opts.MICAlgs[0], Digest: sums[u.opts.MICAlgs[0]]}
	}
}

// writePayload writes the innermost entity's content to the payload.
func (u *streamUnwrapping) writePayload(hdr Header, body io.Reader, depth int) error {
	m := u.m
	m.Header = hdr
	m.ContentType = hdr.Get("Content-Type")
	if m.ContentType == "" {
		m.ContentType = "application/octet-stream"
	}
	m.Filename = filename(hdr.Get("Content-Disposition"))
	unsigned := !u.encryptedSeen && u.pending == 0 && !m.Signed
	if unsigned && depth == 0 && u.opts.UnsignedMIC == MICWithHeaders {
		// The entity rebuilt from the HTTP header fields (plainMIC).
		u.payHash = u.micAlg.New()
		u.payHash.Write(writeHeader(nil, hdr))
		u.payHash.Write([]byte{'\r', '\n'})
		body = io.TeeReader(body, u.payHash)
	}
	content, err := transferReader((&Entity{Header: hdr}).TransferEncoding(), body)
	if err != nil {
		return classify(stageMIME, fmt.Errorf("payload: %w", err))
	}
	dst := u.payload
	if u.zlib != nil && u.zlib.kept {
		dst = u.opts.Compressed.Plain
		m.Zlib = &ZlibPayload{Skip: u.zlibSkip}
	}
	if unsigned && u.opts.UnsignedMIC == MICContentOnly {
		u.payHash = u.micAlg.New()
		dst = io.MultiWriter(dst, u.payHash)
	}
	n, err := io.Copy(dst, content)
	m.PayloadSize = n
	if err != nil {
		var we *writeError
		if errors.As(err, &we) {
			return we.err
		}
		return classify(stageMIME, fmt.Errorf("payload: %w", err))
	}
	return nil
}

// writeError marks an error of the payload's writer (a full spool, say),
// which is not the message's fault and is returned unclassified.
type writeError struct{ err error }

func (e *writeError) Error() string { return e.err.Error() }

// PayloadWriter wraps w so that its errors reach UnwrapStream's caller
// as they are (errors.Is finds them), not as a failure of the message.
func PayloadWriter(w io.Writer) io.Writer { return payloadWriter{w} }

type payloadWriter struct{ w io.Writer }

func (p payloadWriter) Write(b []byte) (int, error) {
	n, err := p.w.Write(b)
	if err != nil {
		err = &writeError{err}
	}
	return n, err
}

// transferReader removes a Content-Transfer-Encoding as the bytes stream.
func transferReader(cte string, r io.Reader) (io.Reader, error) {
	switch cte {
	case "binary", "7bit", "8bit":
		return r, nil
	case "base64":
		return base64.NewDecoder(base64.StdEncoding, &spaceFilter{r: r}), nil
	case "quoted-printable":
		return quotedprintable.NewReader(r), nil
	}
	return nil, fmt.Errorf("%w: unknown Content-Transfer-Encoding %q", ErrMalformedMIME, cte)
}

// spaceFilter drops spaces and tabs (base64's decoder skips CR and LF
// itself).
type spaceFilter struct{ r io.Reader }

func (f *spaceFilter) Read(p []byte) (int, error) {
	for {
		n, err := f.r.Read(p)
		k := 0
		for _, c := range p[:n] {
			if c != ' ' && c != '\t' {
				p[k] = c
				k++
			}
		}
		if k > 0 || err != nil {
			return k, err
		}
	}
}

// cmsStream is the DER of an application/pkcs7-* entity as a stream,
// base64 decoded when its transfer encoding says so or, as cmsBody does,
// when it is base64 text without saying so.
func cmsStream(hdr Header, body io.Reader) io.Reader {
	cte := (&Entity{Header: hdr}).TransferEncoding()
	if cte == "base64" {
		return base64.NewDecoder(base64.StdEncoding, &spaceFilter{r: body})
	}
	br := bufio.NewReaderSize(body, 64<<10)
	if b, _ := br.Peek(1); len(b) == 1 && b[0] != 0x30 {
		if head, _ := br.Peek(64); isBase64Text(bytes.TrimSpace(head)) {
			return base64.NewDecoder(base64.StdEncoding, &spaceFilter{r: br})
		}
	}
	return br
}

// peekType reads the content type of the ContentInfo at the start of br
// without consuming it.
func peekType(br *bufio.Reader) (cms.Type, error) {
	head, _ := br.Peek(64)
	if len(head) < 4 || head[0] != 0x30 {
		return cms.TypeUnknown, fmt.Errorf("%w: not a ContentInfo", cms.ErrMalformed)
	}
	i := 2
	if head[1] > 0x80 {
		i += int(head[1] & 0x7f)
	}
	if i+2 > len(head) || head[i] != 0x06 || i+2+int(head[i+1]) > len(head) {
		return cms.TypeUnknown, fmt.Errorf("%w: content info without a content type", cms.ErrMalformed)
	}
	var oid asn1.ObjectIdentifier
	if _, err := asn1.Unmarshal(head[i:i+2+int(head[i+1])], &oid); err != nil {
		return cms.TypeUnknown, fmt.Errorf("%w: content type: %w", cms.ErrMalformed, err)
	}
	// A ContentInfo of that type and nothing else, for cms.Identify.
	probe := append([]byte{0x30, byte(2 + len(head[i+2:i+2+int(head[i+1])]))}, head[i:i+2+int(head[i+1])]...)
	return cms.Identify(probe)
}

// readHeader reads an entity's header block, up to and including the
// blank line, within lim, and parses it; raw is the block as read.
func readHeader(br *bufio.Reader, lim Limits) (_ Header, raw []byte, _ error) {

	for {
		line, err := br.ReadSlice('\n')
		raw = append(raw, line...)
		if len(raw) > lim.MaxHeaderBytes {
			return nil, nil, fmt.Errorf("%w: header block over %d bytes", ErrLimit, lim.MaxHeaderBytes)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			break
		}
	}
	h, _, err := (&mimeParser{lim: lim}).header(raw)
	return h, raw, err
}

// skipPreamble reads up to and including the first delimiter line.
func skipPreamble(br *bufio.Reader, delim []byte, max int) error {
	read := 0
	atLineStart := true
	for read <= max {
		line, err := br.ReadSlice('\n')
		read += len(line)
		if atLineStart && isDelimiterLine(line, delim) {
			if bytes.HasPrefix(line[len(delim):], []byte("--")) {
				return fmt.Errorf("%w: no body part before the close delimiter", ErrMalformedMIME)
			}
			return nil
		}
		atLineStart = err == nil
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return fmt.Errorf("%w: no body part delimited by %q", ErrMalformedMIME, delim[2:])
		}
	}
	return fmt.Errorf("%w: preamble over %d bytes", ErrLimit, max)
}

// isDelimiterLine reports a line that is "--boundary" followed by "--",
// transport padding or its end.
func isDelimiterLine(line, delim []byte) bool {
	if !bytes.HasPrefix(line, delim) {
		return false
	}
	rest := line[len(delim):]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t' || rest[0] == '\r' || rest[0] == '\n' || rest[0] == '-'
}

// signaturePart reads, after the first part's delimiter, the rest of the
// delimiter line and the signature part (at most MaxSignatureBytes), and
// returns its DER.
func signaturePart(br *bufio.Reader, delim []byte, lim Limits) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if bytes.HasPrefix(line, []byte("--")) || (err != nil && len(line) == 0) {
		return nil, fmt.Errorf("%w: multipart/signed with 1 part", ErrMalformedMIME)
	}
	part := &partReader{br: br, delim: delim}
	raw, err := io.ReadAll(io.LimitReader(part, MaxSignatureBytes+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > MaxSignatureBytes {
		return nil, fmt.Errorf("%w: signature part over %d bytes", ErrLimit, MaxSignatureBytes)
	}
	ent, err := parseHeaderOnly(raw, lim)
	if err != nil {
		return nil, err
	}
	der, _, err := cmsBody(ent)
	return der, err
}

// partReader reads a body part up to the next delimiter, which it
// consumes ("\n--boundary"; a CR before it belongs to it too, RFC 2046),
// leaving the rest of the delimiter line unread. found reports that the
// delimiter was met; without it the part runs to the end of the input.
type partReader struct {
	br    *bufio.Reader
	delim []byte // "\n--boundary"
	found bool
	eof   bool
}

func (p *partReader) Read(b []byte) (int, error) {
	if p.found || p.eof {
		return 0, io.EOF
	}
	peek, err := p.br.Peek(p.br.Size())
	if len(peek) == 0 {
		p.eof = true
		if err == io.EOF {
			return 0, io.EOF
		}
		return 0, err
	}
	end, at := p.scan(peek, err != nil)
	n := copy(b, peek[:end])
	if _, derr := p.br.Discard(n); derr != nil {
		return n, derr
	}
	if at >= 0 && n == end {
		if _, derr := p.br.Discard(at + len(p.delim) - end); derr != nil {
			return n, derr
		}
		p.found = true
	}
	return n, nil
}

// scan returns how much of peek is part content for sure, and where the
// delimiter's line break starts (-1 when not found). atEOF says peek
// holds the rest of the input.
func (p *partReader) scan(peek []byte, atEOF bool) (end, at int) {
	from := 0
	for {
		i := bytes.Index(peek[from:], p.delim)
		if i < 0 {
			break
		}
		i += from
		after := i + len(p.delim)
		if after == len(peek) && !atEOF {
			// The byte that tells a delimiter from a longer boundary is
			// not here yet: stop before it.
			return trimCR(peek, i), -1
		}
		if after == len(peek) || isDelimiterLine(peek[i+1:], p.delim[1:]) {
			return trimCR(peek, i), i
		}
		from = i + 1
	}
	if atEOF {
		return len(peek), -1
	}
	return max(0, len(peek)-len(p.delim)-1), -1
}

// trimCR returns i, less one when a CR precedes it.
func trimCR(b []byte, i int) int {
	if i > 0 && b[i-1] == '\r' {
		return i - 1
	}
	return i
}
