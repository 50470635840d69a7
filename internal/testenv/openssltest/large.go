package openssltest

import (
	"bufio"
	"compress/zlib"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// LargeSpec is a large AS2 message for BuildLarge: a payload of Size
// bytes, compressed (by edihub's zlib: this openssl has none) when
// Compress, then signed by Signer and encrypted to Recipient (AES-256-CBC,
// BER streamed) by openssl, every step from file to file.
type LargeSpec struct {
	Size              int64
	Compress          bool
	Signer, Recipient *Identity
	// Cipher is the openssl cipher option without its dash: "aes256"
	// when empty; "aes-256-gcm" makes AuthEnvelopedData.
	Cipher string
	// Opaque signs with the content inside the signature (an
	// application/pkcs7-mime signed-data entity, BER streamed) instead
	// of a multipart/signed; SignaturePath and MultipartPath are then
	// empty and OpaquePath is that entity.
	Opaque bool
	// CorruptZlib flips a bit in the middle of the zlib stream before
	// the compressed entity is signed: a partner's unreadable
	// compressed layer under a valid signature.
	CorruptZlib bool
}

// LargeMessage is a message built by BuildLarge, on disk.
type LargeMessage struct {
	// Header holds the MIME fields that travel as HTTP fields.
	Header http.Header
	// BodyPath is the request body; BodySize its size.
	BodyPath string
	BodySize int64
	// SignedPath is the signed entity (the MIC covers it), SignaturePath
	// its detached signature (DER) and MultipartPath the multipart/signed
	// entity of both that openssl encrypted (OpaquePath, with
	// LargeSpec.Opaque, the signed-data entity instead).
	SignedPath, SignaturePath, MultipartPath, OpaquePath string
	// MIC is openssl's SHA-256 of SignedPath, as an MDN returns it.
	MIC string
	// PayloadSHA256 is the digest of the payload.
	PayloadSHA256 []byte
}

// BuildLarge writes the message s into dir (a few files the size of the
// payload, and smaller ones when compressed). Nothing is held in memory.
func BuildLarge(dir string, s LargeSpec) (*LargeMessage, error) {
	m := &LargeMessage{}
	inner := filepath.Join(dir, "inner.mime")
	sum, err := writeLargePayload(inner, s.Size)
	if err != nil {
		return nil, err
	}
	m.PayloadSHA256 = sum
	m.SignedPath = inner
	if s.Compress {
		m.SignedPath = filepath.Join(dir, "compressed.mime")
		if err := writeCompressedEntity(inner, m.SignedPath, s.CorruptZlib); err != nil {
			return nil, err
		}
	}
	toEncrypt, err := signLarge(dir, s, m)
	if err != nil {
		return nil, err
	}
	cipher := s.Cipher
	if cipher == "" {
		cipher = "aes256"
	}
	m.BodyPath = filepath.Join(dir, "body.p7m")
	if _, err := TryRun(nil, "cms", "-encrypt", "-binary", "-stream", "-"+cipher, "-in", toEncrypt, "-outform", "DER",
		"-out", m.BodyPath, s.Recipient.CertPath); err != nil {
		return nil, fmt.Errorf("openssl encrypt: %w", err)
	}
	fi, err := os.Stat(m.BodyPath)
	if err != nil {
		return nil, err
	}
	m.BodySize = fi.Size()
	out, err := exec.Command("openssl", "dgst", "-sha256", "-binary", m.SignedPath).Output()
	if err != nil {
		return nil, fmt.Errorf("openssl dgst: %w", err)
	}
	m.MIC = base64.StdEncoding.EncodeToString(out) + ", sha-256"
	smimeType := "enveloped-data"
	if strings.HasSuffix(cipher, "gcm") {
		smimeType = "authEnveloped-data"
	}
	m.Header = http.Header{}
	m.Header.Set("Content-Type", `application/pkcs7-mime; smime-type=`+smimeType+`; name="smime.p7m"`)
	m.Header.Set("Content-Transfer-Encoding", "binary")
	return m, nil
}

// signLarge signs m.SignedPath as s asks and returns the path of the
// signed entity to encrypt: the multipart/signed of it and its detached
// signature, or (s.Opaque) the signed-data entity holding it.
func signLarge(dir string, s LargeSpec, m *LargeMessage) (string, error) {
	if s.Opaque {
		der := filepath.Join(dir, "opaque.der")
		if _, err := TryRun(nil, "cms", "-sign", "-binary", "-nodetach", "-stream", "-in", m.SignedPath, "-signer", s.Signer.CertPath,
			"-inkey", s.Signer.KeyPath, "-md", "sha256", "-outform", "DER", "-out", der); err != nil {
			return "", fmt.Errorf("openssl sign: %w", err)
		}
		defer os.Remove(der)
		m.OpaquePath = filepath.Join(dir, "opaque.mime")
		head := "Content-Type: application/pkcs7-mime; smime-type=signed-data; name=\"smime.p7m\"\r\nContent-Transfer-Encoding: binary\r\n\r\n"
		return m.OpaquePath, writeFiles(m.OpaquePath, []byte(head), der, nil)
	}
	sig := filepath.Join(dir, "sig.der")
	m.SignaturePath = sig
	if _, err := TryRun(nil, "cms", "-sign", "-binary", "-in", m.SignedPath, "-signer", s.Signer.CertPath, "-inkey", s.Signer.KeyPath,
		"-md", "sha256", "-outform", "DER", "-out", sig); err != nil {
		return "", fmt.Errorf("openssl sign: %w", err)
	}
	m.MultipartPath = filepath.Join(dir, "signed.mime")
	return m.MultipartPath, writeMultipartSigned(m.SignedPath, sig, m.MultipartPath)
}

// writeLargePayload writes the payload entity: X12-like segments with a
// counter up to size bytes, and returns the payload's SHA-256.
func writeLargePayload(path string, size int64) ([]byte, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	w.WriteString("Content-Type: application/EDI-X12\r\nContent-Transfer-Encoding: binary\r\n" +
		"Content-Disposition: attachment; filename=\"catalogue.edi\"\r\n\r\n")
	h := sha256.New()
	if err := writeLines(io.MultiWriter(w, h), size, true); err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	return h.Sum(nil), f.Close()
}

// WriteCatalogue writes size bytes of X12-like lines, a pseudo-random
// item code each (zlib halves them, no more), to w: a large payload made
// as it is written, never held whole. It returns w's first error.
func WriteCatalogue(w io.Writer, size int64) error {
	b := bufio.NewWriterSize(w, 1<<20)
	if err := writeLines(b, size, false); err != nil {
		return err
	}
	return b.Flush()
}

// writeLines writes WriteCatalogue's lines, up to size bytes, to w;
// secondCode adds a second pseudo-random code to each line (BuildLarge's
// payload, whose measured figures were taken with it).
func writeLines(w io.Writer, size int64, secondCode bool) error {
	var line []byte
	x := uint64(88172645463325252)
	for n, i := int64(0), 0; n < size; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		line = append(line[:0], "LIN*"...)
		line = strconv.AppendInt(line, int64(i), 10)
		line = append(line, "*VP*"...)
		line = strconv.AppendUint(line, x, 16)
		if secondCode {
			line = strconv.AppendUint(line, x*2654435761, 36)
		}
		line = append(line, "*PRICE*"...)
		line = strconv.AppendInt(line, int64(i%9973), 10)
		line = append(line, "~\n"...)
		if int64(len(line)) > size-n {
			line = line[:size-n]
		}
		if _, err := w.Write(line); err != nil {
			return err
		}
		n += int64(len(line))
	}
	return nil
}

// writeCompressedEntity writes an application/pkcs7-mime compressed-data
// entity holding in: the zlib stream goes to a scratch file first, for
// the DER lengths.
func writeCompressedEntity(in, out string, corrupt bool) error {
	z := out + ".z"
	defer os.Remove(z)
	src, err := os.Open(in)
	if err != nil {
		return err
	}
	defer src.Close()
	zf, err := os.Create(z)
	if err != nil {
		return err
	}
	defer zf.Close()
	zw, _ := zlib.NewWriterLevel(zf, zlib.BestSpeed)
	if _, err := io.Copy(zw, src); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	zn, err := zf.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if corrupt {
		if err := flipBit(zf, zn/2); err != nil {
			return err
		}
	}
	// ContentInfo { compressedData, [0] { CompressedData { 0, zlib,
	// { data, [0] { OCTET STRING } } } } }
	oidCompressed := []byte{0x06, 0x0b, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x10, 0x01, 0x09}
	algZlib := []byte{0x30, 0x0d, 0x06, 0x0b, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x10, 0x03, 0x08}
	oidData := []byte{0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x01}
	octets := derHeader(0x04, zn)
	explicit := derHeader(0xa0, int64(len(octets))+zn)
	eci := derHeader(0x30, int64(len(oidData)+len(explicit)+len(octets))+zn)
	cdLen := int64(3+len(algZlib)+len(eci)+len(oidData)+len(explicit)+len(octets)) + zn
	cd := derHeader(0x30, cdLen)
	content := derHeader(0xa0, int64(len(cd))+cdLen)
	ci := derHeader(0x30, int64(len(oidCompressed)+len(content)+len(cd))+cdLen)
	var head []byte
	head = append(head, "Content-Type: application/pkcs7-mime; smime-type=compressed-data; name=smime.p7z\r\nContent-Transfer-Encoding: binary\r\n\r\n"...)
	for _, p := range [][]byte{ci, oidCompressed, content, cd, {0x02, 0x01, 0x00}, algZlib, eci, oidData, explicit, octets} {
		head = append(head, p...)
	}
	return writeFiles(out, head, z, nil)
}

// flipBit flips the low bit of the byte at off in f.
func flipBit(f *os.File, off int64) error {
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		return err
	}
	b[0] ^= 1
	_, err := f.WriteAt(b, off)
	return err
}

// derHeader is a DER tag and definite length.
func derHeader(tag byte, n int64) []byte {
	if n < 0x80 {
		return []byte{tag, byte(n)}
	}
	var l []byte
	for v := n; v > 0; v >>= 8 {
		l = append([]byte{byte(v)}, l...)
	}
	return append([]byte{tag, 0x80 | byte(len(l))}, l...)
}

// writeMultipartSigned writes the multipart/signed entity of the signed
// entity in signed and the detached signature in sig.
func writeMultipartSigned(signed, sig, out string) error {
	der, err := os.ReadFile(sig)
	if err != nil {
		return err
	}
	const boundary = "----=_large_boundary_0001"
	head := "Content-Type: multipart/signed; protocol=\"application/pkcs7-signature\"; micalg=sha-256; boundary=\"" + boundary + "\"\r\n\r\n" +
		"--" + boundary + "\r\n"
	b64 := base64.StdEncoding.EncodeToString(der)
	var lines []string
	for len(b64) > 76 {
		lines, b64 = append(lines, b64[:76]), b64[76:]
	}
	lines = append(lines, b64)
	tail := "\r\n--" + boundary + "\r\nContent-Type: application/pkcs7-signature; name=smime.p7s\r\nContent-Transfer-Encoding: base64\r\n\r\n" +
		strings.Join(lines, "\r\n") + "\r\n--" + boundary + "--\r\n"
	return writeFiles(out, []byte(head), signed, []byte(tail))
}

// writeFiles writes head, the file mid and tail into out.
func writeFiles(out string, head []byte, mid string, tail []byte) error {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer f.Close()
	src, err := os.Open(mid)
	if err != nil {
		return err
	}
	defer src.Close()
	if _, err := f.Write(head); err != nil {
		return err
	}
	if _, err := io.Copy(f, src); err != nil {
		return err
	}
	if _, err := f.Write(tail); err != nil {
		return err
	}
	return f.Close()
}
