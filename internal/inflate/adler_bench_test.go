package inflate

import (
	adler32pkg "hash/adler32"
	"testing"
)

// BenchmarkAdler32 sums a window's worth of output with adlerUpdate and
// with hash/adler32, the reference, in the same run.
func BenchmarkAdler32(b *testing.B) {
	p := catalogue(outChunk)
	b.Run("adlerUpdate", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			adlerUpdate(1, p)
		}
	})
	b.Run("hash/adler32", func(b *testing.B) {
		b.SetBytes(int64(len(p)))
		for b.Loop() {
			adler32pkg.Checksum(p)
		}
	})
}
