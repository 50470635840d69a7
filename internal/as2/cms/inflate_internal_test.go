package cms

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"encoding/asn1"
	"errors"
	"io"
	"slices"
	"testing"
	"testing/iotest"
)

// TestDecompressBufferCapped: the inflated buffer never grows past the
// limit (a doubling buffer would reach twice it).
func TestDecompressBufferCapped(t *testing.T) {
	const limit = 1<<20 + 12345
	for _, size := range []int{0, 1, 1000, limit - 1, limit} {
		content := bytes.Repeat([]byte("A"), size)
		ci, err := Compress(content)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decompress(ci, limit)
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("Decompress(%d bytes) = %d bytes, %v; want the content", size, len(got), err)
		}
		if cap(got) > limit+1 {
			t.Errorf("Decompress(%d bytes, limit %d): buffer capacity %d, want at most %d", size, limit, cap(got), limit+1)
		}
	}
	ci, err := Compress(bytes.Repeat([]byte("A"), limit+1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decompress(ci, limit); !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrDecompression) {
		t.Errorf("Decompress(limit+1 bytes) error = %v, want ErrTooLarge and ErrDecompression", err)
	}
}

// compressedOf is a CompressedData ContentInfo holding stream as its
// compressed content, in one primitive OCTET STRING or, for segments > 0,
// in a constructed one of that many segments (BER, definite length).
func compressedOf(stream []byte, segments int) []byte {
	content := tlv(tagOctetString, stream)
	if segments > 0 {
		var segs [][]byte
		step := max(len(stream)/segments, 1)
		for len(stream) > 0 {
			n := min(step, len(stream))
			segs = append(segs, tlv(tagOctetString, stream[:n]))
			stream = stream[n:]
		}
		content = tlv(tagOctetString|0x20, segs...)
	}
	cd := tlv(tagSequence,
		tlv(tagInteger, []byte{0}),
		algorithmID(oidZlibCompress, nil),
		tlv(tagSequence, mustOID(oidData), tlv(tagContext0, content)),
	)
	return wrapContentInfo(oidCompressedData, cd)
}

func rawDeflate(t testing.TB, content []byte) []byte {
	var b bytes.Buffer
	w, err := flate.NewWriter(&b, flate.DefaultCompression)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(content)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// errorClass is the sentinels of this package err wraps, the class a
// caller (as2's dispositions) tells errors apart by.
func errorClass(err error) []error {
	var c []error
	for _, s := range []error{ErrMalformed, ErrContentType, ErrUnsupportedAlgorithm, ErrDecompression, ErrTooLarge} {
		if errors.Is(err, s) {
			c = append(c, s)
		}
	}
	return c
}

// TestDecompressMatchesDecompressStream: the in-memory and the streamed
// inflate give the same content, or fail with the same class of error,
// for every kind of input either is tested with: a zlib stream, raw
// DEFLATE (no zlib header, as some implementations send: it inflated in
// memory and was refused streamed), BER segments, a bomb over the limit,
// and corrupt, truncated or foreign inputs.
func TestDecompressMatchesDecompressStream(t *testing.T) {
	content := bytes.Repeat([]byte("ISA*00*~GS*PO~ST*850*0001~BEG*00*SA*PO-1**20260101~\n"), 2000)
	zlibDER, err := Compress(content)
	if err != nil {
		t.Fatal(err)
	}
	raw := rawDeflate(t, content)
	rawDER := compressedOf(raw, 0)
	zlibStream := func() []byte {
		var b bytes.Buffer
		w := zlib.NewWriter(&b)
		w.Write(content)
		w.Close()
		return b.Bytes()
	}()
	badSum := bytes.Clone(zlibDER)
	badSum[len(badSum)-1] ^= 0xff
	withDict := compressedOf(append([]byte{0x78, 0xbb}, zlibStream[2:]...), 0)
	// An OID of the same length: the DER stays well formed.
	otherAlg := bytes.Replace(zlibDER, mustOID(oidZlibCompress), mustOID(asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 16, 3, 99}), 1)
	tests := []struct {
		name  string
		give  []byte
		limit int64
		want  []byte  // the content, when it inflates
		class []error // else the error's class
	}{
		{"zlib", zlibDER, 0, content, nil},
		{"raw deflate", rawDER, 0, content, nil},
		{"raw deflate, empty content", compressedOf(rawDeflate(t, nil), 0), 0, []byte{}, nil},
		{"raw deflate in segments", compressedOf(raw, 7), 0, content, nil},
		{"zlib in segments", compressedOf(zlibStream, 3), 0, content, nil},
		{"zlib at the limit", zlibDER, int64(len(content)), content, nil},
		{"zlib over the limit", zlibDER, int64(len(content) - 1), nil, []error{ErrDecompression, ErrTooLarge}},
		{"raw deflate over the limit", rawDER, 1000, nil, []error{ErrDecompression, ErrTooLarge}},
		{"bad checksum", badSum, 0, nil, []error{ErrDecompression}},
		{"zlib without its checksum", compressedOf(zlibStream[:len(zlibStream)-4], 0), 0, nil, []error{ErrDecompression}},
		{"raw deflate cut short", compressedOf(raw[:len(raw)/2], 0), 0, nil, []error{ErrDecompression}},
		{"raw deflate, reserved block type", compressedOf([]byte{0x07, 0x00, 0x00}, 0), 0, nil, []error{ErrDecompression}},
		{"zlib with a preset dictionary", withDict, 0, nil, []error{ErrDecompression}},
		{"message truncated in the zlib stream", zlibDER[:len(zlibDER)-10], 0, nil, []error{ErrMalformed, ErrDecompression}},
		{"message truncated in the raw deflate", rawDER[:len(rawDER)/2], 0, nil, []error{ErrMalformed, ErrDecompression}},
		{"message truncated in its header", zlibDER[:20], 0, nil, []error{ErrMalformed}},
		{"empty", nil, 0, nil, []error{ErrMalformed}},
		{"text", []byte("hello world"), 0, nil, []error{ErrMalformed}},
		{"not compressed data", wrapContentInfo(oidData, tlv(tagOctetString, content)), 0, nil, []error{ErrContentType}},
		{"another algorithm", otherAlg, 0, nil, []error{ErrUnsupportedAlgorithm}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decompress(tt.give, tt.limit)
			var streamed []byte
			r, serr := DecompressStream(iotest.HalfReader(bytes.NewReader(tt.give)), tt.limit)
			if serr == nil {
				streamed, serr = io.ReadAll(r)
			}
			if tt.class == nil {
				if err != nil || !bytes.Equal(got, tt.want) {
					t.Errorf("Decompress(%s) = %d bytes, %v; want the %d bytes of content", tt.name, len(got), err, len(tt.want))
				}
				if serr != nil || !bytes.Equal(streamed, tt.want) {
					t.Errorf("DecompressStream(%s) = %d bytes, %v; want the %d bytes of content", tt.name, len(streamed), serr, len(tt.want))
				}
				return
			}
			if c := errorClass(err); !slices.Equal(c, tt.class) {
				t.Errorf("Decompress(%s) error = %v, class %v; want class %v", tt.name, err, c, tt.class)
			}
			if c := errorClass(serr); !slices.Equal(c, tt.class) {
				t.Errorf("DecompressStream(%s) error = %v, class %v; want class %v", tt.name, serr, c, tt.class)
			}
		})
	}
}
