package cms

import (
	"bytes"
	"errors"
	"testing"
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
