package cms

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
	"testing/iotest"
)

// gcmAlg is the AlgorithmIdentifier of AES-GCM with nonce and ICV
// length.
func gcmAlg(t testing.TB, nonce []byte, icvLen int) pkix.AlgorithmIdentifier {
	t.Helper()
	params, err := asn1.Marshal(gcmParams{Nonce: nonce, ICVLen: icvLen})
	if err != nil {
		t.Fatal(err)
	}
	return pkix.AlgorithmIdentifier{Algorithm: oidAES256GCM, Parameters: asn1.RawValue{FullBytes: params}}
}

// TestGCMReaderMatchesAEAD opens what the standard library's GCM seals,
// for contents around the block and piece sizes, additional data or
// none, nonces of 12 bytes and others, tags of 12 to 16 bytes, read in
// one go, a byte at a time and in halves; any flipped bit of the
// ciphertext, the tag or the additional data fails at the end.
func TestGCMReaderMatchesAEAD(t *testing.T) {
	key := make([]byte, 32)
	rand.Read(key)
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	sizes := []int{0, 1, 15, 16, 17, 31, 32, 33, streamChunk - 17, streamChunk - 16, streamChunk - 1, streamChunk,
		streamChunk + 1, streamChunk + 15, streamChunk + 16, streamChunk + 17, 2*streamChunk - 16, 3*streamChunk + 5}
	type shape struct{ nonce, tag, aad int }
	shapes := []shape{{12, 16, 0}, {12, 16, 37}, {12, 12, 0}, {12, 14, 16}, {8, 16, 0}, {16, 16, 5}, {1, 16, 0}, {60, 16, 70}}
	for _, sh := range shapes {
		for _, size := range sizes {
			t.Run(fmt.Sprintf("nonce%d/tag%d/aad%d/%d", sh.nonce, sh.tag, sh.aad, size), func(t *testing.T) {
				var aead cipher.AEAD
				if sh.nonce == 12 {
					aead, err = cipher.NewGCMWithTagSize(block, sh.tag)
				} else {
					aead, err = cipher.NewGCMWithNonceSize(block, sh.nonce)
				}
				if err != nil {
					t.Fatal(err)
				}
				nonce, plain, aad := make([]byte, sh.nonce), make([]byte, size), make([]byte, sh.aad)
				rand.Read(nonce)
				rand.Read(plain)
				rand.Read(aad)
				sealed := aead.Seal(nil, nonce, plain, aad)
				ct, tag := sealed[:size], sealed[size:]
				if sh.aad == 0 {
					aad = nil
				}
				open := func(src io.Reader, mac, aad []byte, appended bool) ([]byte, error) {
					icv := 12
					if appended {
						icv = len(tag)
					}
					r, err := newGCMReader(src, block, gcmAlg(t, nonce, icv), func() ([]byte, []byte, error) { return mac, aad, nil })
					if err != nil {
						return nil, err
					}
					return io.ReadAll(r)
				}
				for _, wrap := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader, iotest.HalfReader} {
					got, err := open(wrap(bytes.NewReader(ct)), tag, aad, false)
					if err != nil || !bytes.Equal(got, plain) {
						t.Fatalf("open = %d bytes, %v; want the %d sealed", len(got), err, size)
					}
				}
				if sh.aad == 0 {
					// The tag appended to the ciphertext, mac empty.
					got, err := open(bytes.NewReader(sealed), nil, nil, true)
					if err != nil || !bytes.Equal(got, plain) {
						t.Fatalf("open, tag appended = %d bytes, %v", len(got), err)
					}
				}
				flip := func(b []byte, i int) []byte {
					b = bytes.Clone(b)
					b[i] ^= 0x20
					return b
				}
				bad := map[string]func() ([]byte, error){
					"tag": func() ([]byte, error) { return open(bytes.NewReader(ct), flip(tag, len(tag)-1), aad, false) },
				}
				if size > 0 {
					bad["first byte"] = func() ([]byte, error) { return open(bytes.NewReader(flip(ct, 0)), tag, aad, false) }
					bad["last byte"] = func() ([]byte, error) { return open(bytes.NewReader(flip(ct, size-1)), tag, aad, false) }
					bad["truncated"] = func() ([]byte, error) { return open(bytes.NewReader(ct[:size-1]), tag, aad, false) }
				}
				if sh.aad > 0 {
					bad["aad"] = func() ([]byte, error) { return open(bytes.NewReader(ct), tag, flip(aad, 0), false) }
					bad["no aad"] = func() ([]byte, error) { return open(bytes.NewReader(ct), tag, nil, false) }
				}
				for name, f := range bad {
					if got, err := f(); !errors.Is(err, ErrDecryption) {
						t.Errorf("%s altered: %d bytes, %v; want ErrDecryption", name, len(got), err)
					}
				}
			})
		}
	}
}

// TestGCMReaderHoldsTheEnd: the plaintext released before the tag was
// checked never includes the last bytes, and a bad tag ends the stream
// with ErrDecryption, never io.EOF.
func TestGCMReaderHoldsTheEnd(t *testing.T) {
	key := make([]byte, 16)
	block, _ := aes.NewCipher(key)
	aead, _ := cipher.NewGCM(block)
	nonce := make([]byte, 12)
	plain := bytes.Repeat([]byte("x"), 3*streamChunk)
	sealed := aead.Seal(nil, nonce, plain, nil)
	ct := sealed[:len(plain)]
	checked := false
	r, err := newGCMReader(bytes.NewReader(ct), block, gcmAlg(t, nonce, 16), func() ([]byte, []byte, error) {
		checked = true
		return make([]byte, 16), nil, nil // a wrong tag
	})
	if err != nil {
		t.Fatal(err)
	}
	var released int
	buf := make([]byte, 4096)
	for {
		n, err := r.Read(buf)
		if !checked {
			released += n
		}
		if err == io.EOF {
			t.Fatal("io.EOF with a wrong tag")
		}
		if err != nil {
			if !errors.Is(err, ErrDecryption) {
				t.Fatalf("error %v, want ErrDecryption", err)
			}
			break
		}
	}
	if released > len(plain)-16 {
		t.Errorf("%d bytes released before the tag was read, want at most %d", released, len(plain)-16)
	}
}

// TestGCMCounterWrap: the keystream's counter wraps in its low 32 bits
// (inc32), as GCM's does, where cipher.NewCTR would carry.
func TestGCMCounterWrap(t *testing.T) {
	block, _ := aes.NewCipher(make([]byte, 16))
	var j0 [16]byte
	copy(j0[:], "0123456789ab")
	binary.BigEndian.PutUint32(j0[12:], 0xfffffffc) // first counter ...fd: 3 blocks to the wrap
	want := make([]byte, 0, 6*16)
	ctr := j0
	for range 6 {
		binary.BigEndian.PutUint32(ctr[12:], binary.BigEndian.Uint32(ctr[12:])+1)
		var ks [16]byte
		block.Encrypt(ks[:], ctr[:])
		want = append(want, ks[:]...)
	}
	c := newGCMCTR(block, j0)
	got := make([]byte, len(want))
	for i := 0; i < len(got); i += 7 { // pieces across the block and wrap boundaries
		c.XORKeyStream(got[i:min(i+7, len(got))], got[i:min(i+7, len(got))])
	}
	if !bytes.Equal(got, want) {
		t.Errorf("keystream across the wrap:\n got %x\nwant %x", got, want)
	}
}

// TestDecryptStreamGCMEncodings: the shapes of GCM content partners emit
// (TestGCMNonStandardEncodings) decrypt as a stream as they do in
// memory, and fail alike.
func TestDecryptStreamGCMEncodings(t *testing.T) {
	cert, key := testIdentity(t)
	plain := bytes.Repeat([]byte("Content-Type: text/plain\r\n\r\nhello gcm "), 5000)
	std, err := Encrypt(plain, []*x509.Certificate{cert}, EncryptOptions{Cipher: AES128GCM})
	if err != nil {
		t.Fatal(err)
	}
	ad, err := parseEnvelope(std)
	if err != nil {
		t.Fatal(err)
	}
	var p gcmParams
	if _, err := asn1.Unmarshal(ad.alg.Parameters.FullBytes, &p); err != nil {
		t.Fatal(err)
	}
	var ris [][]byte
	for _, ri := range ad.ris {
		ris = append(ris, ri.FullBytes)
	}
	riSet := tlv(tagSet, ris...)
	ver := tlv(tagInteger, []byte{0})
	build := func(envelope []byte, icvLen int, content []byte, trailer ...[]byte) []byte {
		params := tlv(tagSequence, tlv(tagOctetString, p.Nonce), tlv(tagInteger, []byte{byte(icvLen)}))
		eci := tlv(tagSequence, mustOID(oidData), algorithmID(oidAES128GCM, params), tlv(tagContext0Pri, content))
		return tlv(tagSequence, envelope, tlv(tagContext0, tlv(tagSequence, append([][]byte{ver, riSet, eci}, trailer...)...)))
	}
	auth, env := mustOID(oidAuthEnvelopedData), mustOID(oidEnvelopedData)
	withTag := append(bytes.Clone(ad.ciphertext), ad.mac...)
	flipped := bytes.Clone(ad.ciphertext)
	flipped[len(flipped)/2] ^= 1
	tests := []struct {
		name string
		give []byte
		want error
	}{
		{"standard", std, nil},
		{"declared ICV length 12, tag 16", build(auth, 12, ad.ciphertext, tlv(tagOctetString, ad.mac)), nil},
		{"empty mac, tag appended", build(auth, 16, withTag, tlv(tagOctetString, nil)), nil},
		{"GCM in EnvelopedData, tag appended", build(env, 16, withTag), nil},
		{"unauthAttrs after the mac", build(auth, 16, ad.ciphertext, tlv(tagOctetString, ad.mac), tlv(tagContext2, tlv(tagSequence, mustOID(oidData), tlv(tagSet, tlv(tagNull))))), nil},
		{"truncated tag", build(auth, 16, ad.ciphertext, tlv(tagOctetString, ad.mac[:8])), ErrUnsupportedAlgorithm},
		{"wrong tag", build(auth, 16, ad.ciphertext, tlv(tagOctetString, make([]byte, 16))), ErrDecryption},
		{"altered ciphertext", build(auth, 16, flipped, tlv(tagOctetString, ad.mac)), ErrDecryption},
		{"authAttrs not sealed", build(auth, 16, ad.ciphertext, tlv(tagContext1, tlv(tagSequence, mustOID(oidAttrContentType), tlv(tagSet, mustOID(oidData)))), tlv(tagOctetString, ad.mac)), ErrDecryption},
		{"no mac", build(auth, 16, ad.ciphertext), ErrMalformed},
	}
	rs := []Recipient{{Cert: cert, Key: crypto.Decrypter(key)}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, memErr := Decrypt(tt.give, rs)
			r, err := DecryptStream(iotest.HalfReader(bytes.NewReader(tt.give)), rs)
			var got []byte
			if err == nil {
				got, err = io.ReadAll(r)
			}
			if tt.want == nil {
				if err != nil || !bytes.Equal(got, plain) {
					t.Fatalf("DecryptStream = %d bytes, %v; want the %d encrypted (Decrypt: %v)", len(got), err, len(plain), memErr)
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("DecryptStream error = %v, want %v (Decrypt: %v)", err, tt.want, memErr)
			}
			if memErr == nil {
				t.Errorf("Decrypt succeeded where DecryptStream fails")
			}
		})
	}
}

// BenchmarkGCMReader decrypts and authenticates 16 MiB as a stream.
func BenchmarkGCMReader(b *testing.B) {
	block, _ := aes.NewCipher(make([]byte, 32))
	aead, _ := cipher.NewGCM(block)
	nonce := make([]byte, 12)
	plain := make([]byte, 16<<20)
	sealed := aead.Seal(nil, nonce, plain, nil)
	ct, tag := sealed[:len(plain)], sealed[len(plain):]
	b.SetBytes(int64(len(plain)))
	for b.Loop() {
		r, err := newGCMReader(bytes.NewReader(ct), block, gcmAlg(b, nonce, 16), func() ([]byte, []byte, error) { return tag, nil, nil })
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
	}
}
