package cms

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"hash/adler32"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	kzlib "github.com/klauspost/compress/zlib"
	"go.uber.org/goleak"
)

// pzlibInputs are the contents TestParallelZlib compresses: nothing, a
// byte, text around the block edges and random bytes (deflate's stored
// blocks).
func pzlibInputs() []struct {
	name string
	give []byte
} {
	var text []byte
	for i := 0; len(text) < 5*zlibBlock+77; i++ {
		text = fmt.Appendf(text, "LIN*%d*VP*%x*PRICE*%d~\n", i, uint64(i)*0x9e3779b97f4a7c15, i%9973)
	}
	noise := make([]byte, 2*zlibBlock+5)
	rand.NewChaCha8([32]byte{1}).Read(noise)
	return []struct {
		name string
		give []byte
	}{
		{"empty", nil},
		{"one byte", []byte{'x'}},
		{"less than the window", text[:zlibWindow-1]},
		{"a block less one", text[:zlibBlock-1]},
		{"one block", text[:zlibBlock]},
		{"a block and one", text[:zlibBlock+1]},
		{"blocks of text", text},
		{"random", noise},
		{"text then random", append(bytes.Clone(text[:zlibBlock+zlibWindow/2]), noise...)},
	}
}

// TestParallelZlib checks the block-parallel zlib stream with two other
// inflaters than the one it was written for (the standard library's and
// klauspost/compress's), around block edges, for text and random bytes
// written in pieces of odd sizes, and that its goroutines end with Close.
func TestParallelZlib(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tt := range pzlibInputs() {
		for _, piece := range []int{7, 65536, 3 << 20} {
			t.Run(fmt.Sprintf("%s/%d", tt.name, piece), func(t *testing.T) {
				out := parallelZlibOf(t, tt.give, piece)
				for name, open := range map[string]func(io.Reader) (io.ReadCloser, error){
					"compress/zlib": zlib.NewReader, "klauspost zlib": kzlib.NewReader,
				} {
					r, err := open(bytes.NewReader(out))
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					got, err := io.ReadAll(r)
					if err != nil {
						t.Fatalf("%s reads %d bytes, then %v", name, len(got), err)
					}
					if !bytes.Equal(got, tt.give) {
						t.Fatalf("%s inflates %d bytes, want the %d written", name, len(got), len(tt.give))
					}
				}
			})
		}
	}
}

// parallelZlibOf compresses b with a parallelZlib at level 1, written in
// pieces of piece bytes.
func parallelZlibOf(t testing.TB, b []byte, piece int) []byte {
	t.Helper()
	var out bytes.Buffer
	z, err := newParallelZlib(&out, 1)
	if err != nil {
		t.Fatal(err)
	}
	for p := b; len(p) > 0; {
		n := min(piece, len(p))
		if _, err := z.Write(p[:n]); err != nil {
			t.Fatal(err)
		}
		p = p[n:]
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// TestParallelZlibZlibLibrary has zlib itself (the C library, through
// Python's zlib module, which checks the Adler-32) inflate the stream:
// openssl, the peer of the other tests, is built without zlib on Debian.
func TestParallelZlibZlibLibrary(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 (Debian's python3, which scripts/deps.sh installs) is needed to run C zlib: %v", err)
	}
	if err := exec.Command(py, "-c", "import zlib").Run(); err != nil {
		t.Fatalf("python3 has no zlib module: %v", err)
	}
	dir := t.TempDir()
	for i, tt := range pzlibInputs() {
		z := filepath.Join(dir, fmt.Sprint(i, ".z"))
		if err := os.WriteFile(z, parallelZlibOf(t, tt.give, 65536), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := exec.Command(py, "-c", "import sys, zlib; sys.stdout.buffer.write(zlib.decompress(open(sys.argv[1], 'rb').read()))", z).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, ee.Stderr)
			}
			t.Fatalf("%s: zlib: %v", tt.name, err)
		}
		if !bytes.Equal(got, tt.give) {
			t.Fatalf("%s: zlib inflates %d bytes, want the %d written", tt.name, len(got), len(tt.give))
		}
	}
}

// TestParallelZlibRatio: the blocks, each with the window before it as
// its dictionary, compress within 1% of one serial level 1 stream.
func TestParallelZlibRatio(t *testing.T) {
	var text []byte
	for i := 0; len(text) < 8<<20; i++ {
		text = fmt.Appendf(text, "LIN*%d*VP*%x*PRICE*%d~\n", i, uint64(i)*0x9e3779b97f4a7c15, i%9973)
	}
	var serial bytes.Buffer
	zw, _ := kzlib.NewWriterLevel(&serial, 1)
	zw.Write(text)
	zw.Close()
	par := parallelZlibOf(t, text, 1<<20)
	t.Logf("%d bytes: serial %d, parallel %d (%+.2f%%)", len(text), serial.Len(), len(par), 100*(float64(len(par))/float64(serial.Len())-1))
	if float64(len(par)) > 1.01*float64(serial.Len()) {
		t.Errorf("parallel stream %d bytes, serial %d: more than 1%% larger", len(par), serial.Len())
	}
}

// TestAdler32Combine: the combined Adler-32 of two pieces is the one of
// the whole, for pieces empty, short, and long enough to wrap the sums.
func TestAdler32Combine(t *testing.T) {
	b := make([]byte, 300_000)
	rand.NewChaCha8([32]byte{2}).Read(b)
	for _, cut := range [][2]int{{0, 0}, {0, 10}, {10, 10}, {1, 299_999}, {65521, 200_000}, {150_000, 300_000}, {0, 300_000}, {300_000, 300_000}} {
		a, c := b[:cut[0]], b[cut[0]:cut[1]]
		want := adler32.Checksum(b[:cut[1]])
		if got := adler32Combine(adler32.Checksum(a), adler32.Checksum(c), int64(len(c))); got != want {
			t.Errorf("combine(%d bytes, %d bytes) = %08x, want %08x", len(a), len(c), got, want)
		}
	}
	ff := bytes.Repeat([]byte{0xff}, 100_000)
	if got, want := adler32Combine(adler32.Checksum(ff), adler32.Checksum(ff), int64(len(ff))), adler32.Checksum(append(bytes.Clone(ff), ff...)); got != want {
		t.Errorf("combine(0xff…, 0xff…) = %08x, want %08x", got, want)
	}
}

// TestParallelZlibAbort: a stream given up mid-way (Abort), or whose
// destination fails, ends its goroutines and refuses further writes.
func TestParallelZlibAbort(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	text := bytes.Repeat([]byte("LIN*1*VP*0123456789*PRICE*42~\n"), 20*zlibBlock/30)
	z, err := newParallelZlib(io.Discard, 1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := z.Write(text[:5*zlibBlock+3]); err != nil {
		t.Fatal(err)
	}
	z.Abort()
	z.Abort()
	if _, err := z.Write([]byte("more")); err == nil {
		t.Error("Write after Abort: no error")
	}
	if err := z.Close(); err == nil {
		t.Error("Close after Abort: no error")
	}

	failing := errors.New("disk full")
	z, err = newParallelZlib(&failAfter{n: 1000, err: failing}, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, werr := z.Write(text)
	if cerr := z.Close(); !errors.Is(cerr, failing) || (werr != nil && !errors.Is(werr, failing)) {
		t.Errorf("destination failing: Write %v, Close %v; want %v", werr, cerr, failing)
	}
}

// failAfter accepts n bytes, then fails every write with err.
type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, f.err
	}
	f.n -= len(p)
	return len(p), nil
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
