package cms

import (
	"bytes"
	"compress/zlib"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	kzlib "github.com/klauspost/compress/zlib"
)

// TestParallelZlib checks the block-parallel zlib stream against the
// standard library's inflater, at block edges, for text and for random
// bytes, written in pieces of odd sizes.
func TestParallelZlib(t *testing.T) {
	text := bytes.Repeat([]byte("LIN*1*VP*0123456789*PRICE*42~\n"), 6*zlibBlock/30)
	noise := make([]byte, 3*zlibBlock+5)
	rng := rand.NewChaCha8([32]byte{1})
	rng.Read(noise)
	for _, tt := range []struct {
		name string
		give []byte
	}{
		{"empty", nil},
		{"one byte", []byte{'x'}},
		{"a block less one", text[:zlibBlock-1]},
		{"one block", text[:zlibBlock]},
		{"a block and one", text[:zlibBlock+1]},
		{"six blocks of text", text},
		{"random", noise},
	} {
		for _, piece := range []int{7, 65536, 3 << 20} {
			t.Run(fmt.Sprintf("%s/%d", tt.name, piece), func(t *testing.T) {
				var out bytes.Buffer
				z, err := newParallelZlib(&out, 1)
				if err != nil {
					t.Fatal(err)
				}
				for p := tt.give; len(p) > 0; {
					n := min(piece, len(p))
					if _, err := z.Write(p[:n]); err != nil {
						t.Fatal(err)
					}
					p = p[n:]
				}
				if err := z.Close(); err != nil {
					t.Fatal(err)
				}
				r, err := zlib.NewReader(bytes.NewReader(out.Bytes()))
				if err != nil {
					t.Fatal(err)
				}
				got, err := io.ReadAll(r)
				if err != nil {
					t.Fatalf("compress/zlib reads %d bytes, then %v", len(got), err)
				}
				if !bytes.Equal(got, tt.give) {
					t.Fatalf("inflated %d bytes, want the %d written", len(got), len(tt.give))
				}
			})
		}
	}
}

// BenchmarkZlib compares the block-parallel zlib stream with a serial
// one on 32 MiB of X12-like lines.
func BenchmarkZlib(b *testing.B) {
	var text []byte
	for i := 0; len(text) < 32<<20; i++ {
		text = fmt.Appendf(text, "LIN*%d*VP*%x*PRICE*%d~\n", i, uint64(i)*0x9e3779b97f4a7c15, i%9973)
	}
	b.Run("parallel", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			z, _ := newParallelZlib(io.Discard, 1)
			z.Write(text)
			z.Close()
		}
	})
	b.Run("serial", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			z, _ := kzlib.NewWriterLevel(io.Discard, 1)
			z.Write(text)
			z.Close()
		}
	})
}
