package cms

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"encoding/asn1"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxDecompressedSize is the limit Decompress applies when the
// caller passes a limit of zero or less.
const DefaultMaxDecompressedSize = 512 << 20

type compressedData struct {
	Version          int
	Algorithm        asn1.RawValue
	EncapContentInfo encapsulatedContentInfo
}

// Compress returns a DER CompressedData ContentInfo (RFC 3274) holding
// content deflated in a zlib stream.
func Compress(content []byte) ([]byte, error) {
	var buf bytes.Buffer
	buf.Grow(len(content)/3 + 64)
	zw := zlib.NewWriter(&buf)
	if _, err := zw.Write(content); err != nil {
		return nil, fmt.Errorf("compress: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compress: %w", err)
	}
	cd := tlv(tagSequence,
		tlv(tagInteger, []byte{0}),
		algorithmID(oidZlibCompress, nil),
		tlv(tagSequence, mustOID(oidData), tlv(tagContext0, tlv(tagOctetString, buf.Bytes()))),
	)
	return wrapContentInfo(oidCompressedData, cd), nil
}

// Decompress inflates a CompressedData ContentInfo into a buffer that never
// grows past maxSize+1 bytes. Output larger than maxSize bytes (DefaultMaxDecompressedSize when maxSize <= 0) stops the
// inflation with an error wrapping both ErrDecompression and ErrTooLarge.
// Other errors wrap ErrMalformed, ErrContentType, ErrUnsupportedAlgorithm
// or ErrDecompression.
func Decompress(b []byte, maxSize int64) ([]byte, error) {
	return DecompressReserving(b, maxSize, nil)
}

// DecompressReserving is Decompress with reserve called before the output
// buffer is allocated or grown, with the bytes it is about to add; an
// error from reserve stops the inflation and is returned as is (not
// wrapped in ErrDecompression). reserve lets a caller account the memory
// against a budget shared by concurrent messages. nil reserves nothing.
func DecompressReserving(b []byte, maxSize int64, reserve func(n int64) error) ([]byte, error) {
	if maxSize <= 0 {
		maxSize = DefaultMaxDecompressedSize
	}
	ci, err := parseContentInfo(b)
	if err != nil {
		return nil, err
	}
	if !ci.ContentType.Equal(oidCompressedData) {
		return nil, fmt.Errorf("%w: %v is not compressed data", ErrContentType, ci.ContentType)
	}
	var cd compressedData
	if _, err := asn1.Unmarshal(ci.Content.Bytes, &cd); err != nil {
		return nil, fmt.Errorf("%w: compressed data: %w", ErrMalformed, err)
	}
	var alg struct {
		Algorithm  asn1.ObjectIdentifier
		Parameters asn1.RawValue `asn1:"optional"`
	}
	if _, err := asn1.Unmarshal(cd.Algorithm.FullBytes, &alg); err != nil {
		return nil, fmt.Errorf("%w: compression algorithm: %w", ErrMalformed, err)
	}
	if !alg.Algorithm.Equal(oidZlibCompress) {
		return nil, fmt.Errorf("%w: compression %v", ErrUnsupportedAlgorithm, alg.Algorithm)
	}
	if len(cd.EncapContentInfo.EContent.FullBytes) == 0 {
		return nil, fmt.Errorf("%w: compressed data without content", ErrMalformed)
	}
	z, err := octets(cd.EncapContentInfo.EContent)
	if err != nil {
		return nil, err
	}
	return inflate(z, maxSize, reserve)
}

// inflate reads a zlib stream, or a raw deflate stream as some old
// implementations write, up to maxSize bytes.
func inflate(z []byte, maxSize int64, reserve func(int64) error) ([]byte, error) {
	if reserve == nil {
		reserve = func(int64) error { return nil }
	}
	var r io.ReadCloser
	zr, err := zlib.NewReader(bytes.NewReader(z))
	if err != nil {
		if !errors.Is(err, zlib.ErrHeader) {
			return nil, fmt.Errorf("%w: %w", ErrDecompression, err)
		}
		r = flate.NewReader(bytes.NewReader(z))
	} else {
		r = zr
	}
	defer r.Close()
	// Most EDI compresses 5-20x; start at 4x and double, but never past
	// maxSize+1 bytes: a bomb gets at most the limit, not twice it.
	first := min(int64(len(z))*4+512, maxSize+1)
	if err := reserve(first); err != nil {
		return nil, err
	}
	out := make([]byte, 0, first)
	for {
		if len(out) == cap(out) {
			if int64(len(out)) > maxSize {
				return nil, fmt.Errorf("%w: %w: more than %d bytes", ErrDecompression, ErrTooLarge, maxSize)
			}
			add := min(int64(cap(out)), maxSize+1-int64(cap(out)))
			if err := reserve(add); err != nil {
				return nil, err
			}
			// make, not slices.Grow: the capacity is then exactly what
			// was reserved.
			grown := make([]byte, len(out), int64(cap(out))+add)
			copy(grown, out)
			out = grown
		}
		n, err := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrDecompression, err)
		}
	}
	if int64(len(out)) > maxSize {
		return nil, fmt.Errorf("%w: %w: more than %d bytes", ErrDecompression, ErrTooLarge, maxSize)
	}
	return out, nil
}
