package cms

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"io"
)

// DefaultMaxDecompressedSize is the limit Decompress applies when the
// caller passes a limit of zero or less.
const DefaultMaxDecompressedSize = 512 << 20

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
// grows past maxSize+1 bytes. It is DecompressStream over b, read into
// memory: both accept and refuse the same inputs, with the same errors
// (a zlib stream, or raw DEFLATE when the zlib header is absent; bytes
// after the compressed content are not read). Output larger than
// maxSize bytes (DefaultMaxDecompressedSize when maxSize <= 0) stops the
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
	if reserve == nil {
		reserve = func(int64) error { return nil }
	}
	r, err := DecompressStream(bytes.NewReader(b), maxSize)
	if err != nil {
		return nil, err
	}
	// Most EDI compresses 5-20x; start at 4x and double, but never past
	// maxSize+1 bytes: a bomb gets at most the limit, not twice it.
	first := min(int64(len(b))*4+512, maxSize+1)
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
		// r wraps its errors (ErrDecompression, ErrTooLarge past
		// maxSize).
		n, err := r.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
