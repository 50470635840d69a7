package inflate

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"errors"
	"fmt"
	adler32pkg "hash/adler32"
	"io"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"testing/iotest"
	"time"
)

// corpus is data of the kinds a payload is: EDI-like text, random
// bytes, runs, repeated patterns short and long, and a mix.
func corpus(seed uint64, n int) []byte {
	rnd := rand.New(rand.NewPCG(seed, 1))
	var b bytes.Buffer
	for b.Len() < n {
		switch rnd.IntN(5) {
		case 0:
			for range 1 + rnd.IntN(200) {
				b.WriteString("LIN*" + strconv.Itoa(rnd.IntN(100000)) + "*VP*" + strconv.FormatUint(rnd.Uint64(), 16) + "~\n")
			}
		case 1:
			r := make([]byte, 1+rnd.IntN(5000))
			for i := range r {
				r[i] = byte(rnd.Uint32())
			}
			b.Write(r)
		case 2:
			b.Write(bytes.Repeat([]byte{byte(rnd.Uint32())}, 1+rnd.IntN(3000)))
		case 3:
			// Matches at distances 8 to 40, overlapping their source
			// when longer: the word copies' cases.
			p := make([]byte, 8+rnd.IntN(33))
			for i := range p {
				p[i] = byte(rnd.Uint32())
			}
			b.Write(bytes.Repeat(p, 1+rnd.IntN(40)))
		default:
			p := make([]byte, 1+rnd.IntN(7))
			for i := range p {
				p[i] = byte('a' + rnd.IntN(3))
			}
			b.Write(bytes.Repeat(p, 1+rnd.IntN(500)))
		}
	}
	return b.Bytes()[:n]
}

func compress(t testing.TB, data []byte, level int) []byte {
	var z bytes.Buffer
	w, err := zlib.NewWriterLevel(&z, level)
	if err != nil {
		t.Fatal(err)
	}
	// Flushes in the middle put empty stored blocks and block
	// boundaries at byte edges.
	for len(data) > 0 {
		n := min(len(data), 100_000)
		w.Write(data[:n])
		data = data[n:]
		if len(data)%3 == 0 {
			w.Flush()
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return z.Bytes()
}

// reference inflates z with compress/zlib, or with compress/flate when
// z does not start with a zlib header (zlib.ErrHeader): the package's
// rule for raw DEFLATE.
func reference(z []byte) ([]byte, error) {
	var r io.Reader
	zr, err := zlib.NewReader(bytes.NewReader(z))
	switch {
	case errors.Is(err, zlib.ErrHeader):
		r = flate.NewReader(bytes.NewReader(z))
	case err != nil:
		return nil, err
	default:
		r = zr
	}
	return io.ReadAll(r)
}

func deflate(t testing.TB, data []byte, level int) []byte {
	var b bytes.Buffer
	w, err := flate.NewWriter(&b, level)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestInflateRawDeflate: a stream without a zlib header is inflated as
// raw DEFLATE (no Adler-32 to check) to what compress/flate gives; one
// cut short is io.ErrUnexpectedEOF, one with a bad block ErrCorrupt; a
// zlib header that asks for a dictionary stays ErrDictionary.
func TestInflateRawDeflate(t *testing.T) {
	for _, size := range []int{0, 1, 100, 65_536, 1<<20 + 3} {
		for _, level := range []int{flate.NoCompression, flate.BestSpeed, flate.DefaultCompression, flate.HuffmanOnly} {
			data := corpus(uint64(size*7+level), size)
			raw := deflate(t, data, level)
			for name, src := range map[string]io.Reader{
				"whole": bytes.NewReader(raw), "one byte at a time": iotest.OneByteReader(bytes.NewReader(raw)),
			} {
				got, err := io.ReadAll(NewReader(src))
				if err != nil || !bytes.Equal(got, data) {
					t.Fatalf("ReadAll(NewReader(raw DEFLATE of %d bytes, level %d, %s)) = %d bytes, %v; want the %d bytes", size, level, name, len(got), err, len(data))
				}
			}
		}
	}
	raw := deflate(t, corpus(11, 200_000), flate.DefaultCompression)
	tests := []struct {
		name string
		give []byte
		want error
	}{
		{"truncated", raw[:len(raw)/2], io.ErrUnexpectedEOF},
		{"last byte missing", raw[:len(raw)-1], io.ErrUnexpectedEOF},
		{"one byte", raw[:1], io.ErrUnexpectedEOF},
		{"reserved block type", []byte{0x07, 0x00}, ErrCorrupt},
		{"stored bad nlen", []byte{0x01, 0x05, 0x00, 0x00, 0x00}, ErrCorrupt},
		{"zlib header with dictionary", append([]byte{0x78, 0xbb}, raw...), ErrDictionary},
	}
	for _, tt := range tests {
		_, err := io.ReadAll(NewReader(bytes.NewReader(tt.give)))
		if !errors.Is(err, tt.want) {
			t.Errorf("ReadAll(NewReader(%s)) error = %v, want %v", tt.name, err, tt.want)
		}
		if _, werr := reference(tt.give); werr == nil {
			t.Errorf("reference(%s) succeeded, want it to fail too", tt.name)
		}
	}
}

func TestInflateMatchesZlib(t *testing.T) {
	for _, size := range []int{0, 1, 100, 65_536, 1 << 20, 3<<20 + 7} {
		for _, level := range []int{zlib.NoCompression, zlib.BestSpeed, zlib.DefaultCompression, zlib.BestCompression, zlib.HuffmanOnly} {
			t.Run(fmt.Sprintf("%d/%d", size, level), func(t *testing.T) {
				data := corpus(uint64(size+level), size)
				z := compress(t, data, level)
				for name, zr := range map[string]*Reader{
					"whole": NewReader(bytes.NewReader(z)), "one byte at a time": NewReader(iotest.OneByteReader(bytes.NewReader(z))),
					"half": NewReader(iotest.HalfReader(bytes.NewReader(z))),
					// The window starts small and grows (or would, for a
					// wrong hint) before it slides.
					"sized": NewReaderSize(bytes.NewReader(z), int64(len(z))), "sized too small": NewReaderSize(iotest.HalfReader(bytes.NewReader(z)), 1),
				} {
					got, err := io.ReadAll(zr)
					if err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					if !bytes.Equal(got, data) {
						t.Fatalf("%s: %d bytes differ from the %d compressed", name, len(got), len(data))
					}
				}
			})
		}
	}
}

func TestInflateFixedAndSmallReads(t *testing.T) {
	// Short inputs are compressed with the fixed code.
	for _, s := range []string{"a", "hello, hello, hello, hello", "ISA*00*~IEA*1*000000001~"} {
		z := compress(t, []byte(s), zlib.BestCompression)
		r := NewReader(bytes.NewReader(z))
		got, err := io.ReadAll(iotest.OneByteReader(r))
		if err != nil || string(got) != s {
			t.Fatalf("%q: got %q, %v", s, got, err)
		}
	}
}

func TestInflateRefusesWhatZlibRefuses(t *testing.T) {
	data := corpus(7, 200_000)
	z := compress(t, data, zlib.DefaultCompression)
	cases := map[string][]byte{
		"truncated":       z[:len(z)/2],
		"no checksum":     z[:len(z)-4],
		"short checksum":  z[:len(z)-2],
		"bad checksum":    append(append([]byte(nil), z[:len(z)-1]...), z[len(z)-1]^1),
		"bad header":      append([]byte{0x78, 0x9d}, z[2:]...), // raw DEFLATE, then, and not valid
		"dictionary":      append([]byte{0x78, 0xbb}, z[2:]...),
		"empty":           nil,
		"header only":     z[:2],
		"reserved block":  {0x78, 0x9c, 0x07},
		"stored bad nlen": {0x78, 0x9c, 0x01, 0x05, 0x00, 0x00, 0x00},
	}
	for name, in := range cases {
		want, werr := reference(in)
		got, gerr := io.ReadAll(NewReader(bytes.NewReader(in)))
		if werr == nil || gerr == nil {
			t.Errorf("%s: compress/zlib %v, inflate %v: want both to fail", name, werr, gerr)
			continue
		}
		if !bytes.HasPrefix(want, got) && !bytes.HasPrefix(got, want) {
			t.Errorf("%s: output differs before the failure", name)
		}
	}
	// A stream cut short is io.ErrUnexpectedEOF, a bad checksum
	// ErrChecksum.
	if _, err := io.ReadAll(NewReader(bytes.NewReader(cases["truncated"]))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("truncated: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, err := io.ReadAll(NewReader(bytes.NewReader(cases["bad checksum"]))); !errors.Is(err, ErrChecksum) {
		t.Errorf("bad checksum: %v, want ErrChecksum", err)
	}
}

func TestInflateSourceError(t *testing.T) {
	z := compress(t, corpus(3, 500_000), zlib.DefaultCompression)
	boom := errors.New("boom")
	_, err := io.ReadAll(NewReader(io.MultiReader(bytes.NewReader(z[:len(z)/2]), iotest.ErrReader(boom))))
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want the source's", err)
	}
}

// FuzzInflate checks inflate against compress/zlib, and compress/flate
// for a stream without a zlib header (reference), on any input: both
// succeed with the same output, or both fail.
func FuzzInflate(f *testing.F) {
	for i, level := range []int{0, 1, 6, 9, -2} {
		f.Add(compress(f, corpus(uint64(i), 3000), level))
	}
	f.Add([]byte{0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01})
	// Raw DEFLATE (no zlib header).
	f.Add(deflate(f, corpus(5, 3000), flate.DefaultCompression))
	f.Add([]byte{0x03, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		want, werr := reference(in)
		got, gerr := io.ReadAll(NewReader(bytes.NewReader(in)))
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("reference: %d bytes, %v; inflate: %d bytes, %v", len(want), werr, len(got), gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("outputs differ: %d and %d bytes", len(want), len(got))
		}
		// Sized by the input's length, as a message in memory is.
		sized, serr := io.ReadAll(NewReaderSize(bytes.NewReader(in), int64(len(in))))
		if (serr == nil) != (gerr == nil) || gerr == nil && !bytes.Equal(sized, got) {
			t.Fatalf("NewReaderSize: %d bytes, %v; NewReader: %d bytes, %v", len(sized), serr, len(got), gerr)
		}
	})
}

// FuzzInflateRaw feeds arbitrary DEFLATE data (after a valid zlib
// header) so that the fuzzer works on the block layer, not the header.
func FuzzInflateRaw(f *testing.F) {
	for i, level := range []int{1, 6, 9, -2} {
		var b bytes.Buffer
		w, _ := flate.NewWriter(&b, level)
		w.Write(corpus(uint64(i), 2000))
		w.Close()
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		fr := flate.NewReader(bytes.NewReader(raw))
		want, werr := io.ReadAll(fr)
		z := append([]byte{0x78, 0x9c}, raw...)
		r := NewReader(bytes.NewReader(z))
		got, gerr := io.ReadAll(r)
		// No checksum follows: a stream that inflates whole fails on it
		// (or on the missing bytes), so compare the output only.
		if werr == nil && !bytes.HasPrefix(got, want[:min(len(want), len(got))]) {
			t.Fatalf("outputs differ")
		}
		if werr == nil && gerr != nil && !errors.Is(gerr, io.ErrUnexpectedEOF) && !errors.Is(gerr, ErrChecksum) {
			t.Fatalf("compress/flate inflated it; inflate: %v", gerr)
		}
		if werr != nil && len(got) > len(want)+258 && gerr == nil {
			t.Fatalf("compress/flate failed (%v); inflate succeeded", werr)
		}
	})
}

func BenchmarkInflate(b *testing.B) {
	benchInflate(b, corpus(1, 16<<20), zlib.DefaultCompression)
}

// benchInflate inflates data compressed at level with this package and
// with compress/zlib, the reference, in the same run.
func benchInflate(b *testing.B, data []byte, level int) {
	z := compress(b, data, level)
	buf := make([]byte, 256<<10)
	for _, dec := range []struct {
		name string
		open func(io.Reader) io.Reader
	}{
		{"inflate", func(r io.Reader) io.Reader { return NewReader(r) }},
		{"compress/zlib", func(r io.Reader) io.Reader { zr, _ := zlib.NewReader(r); return zr }},
	} {
		b.Run(dec.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			cpu := cpuTime()
			for b.Loop() {
				io.CopyBuffer(io.Discard, dec.open(bytes.NewReader(z)), buf)
			}
			reportCPU(b, cpu, len(data))
		})
	}
}

// catalogue is the large-message bench's payload (openssltest.BuildLarge:
// X12-like lines with two pseudo-random codes each), which zlib halves.
func catalogue(size int) []byte {
	var b []byte
	x := uint64(88172645463325252)
	for i := 0; len(b) < size; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b = append(b, "LIN*"...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, "*VP*"...)
		b = strconv.AppendUint(b, x, 16)
		b = strconv.AppendUint(b, x*2654435761, 36)
		b = append(b, "*PRICE*"...)
		b = strconv.AppendInt(b, int64(i%9973), 10)
		b = append(b, "~\n"...)
	}
	return b[:size]
}

// BenchmarkInflateCatalogue inflates the large-message bench's payload,
// compressed as the bench does (zlib.BestSpeed).
func BenchmarkInflateCatalogue(b *testing.B) {
	benchInflate(b, catalogue(32<<20), zlib.BestSpeed)
}

// cpuTime is the process's CPU time (user and system): on a shared
// machine its rate is steadier than the wall clock's.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the MB/s of CPU time since cpu0, n bytes an
// iteration.
func reportCPU(b *testing.B, cpu0 time.Duration, n int) {
	if d := cpuTime() - cpu0; d > 0 {
		b.ReportMetric(float64(n)*float64(b.N)/1e6/d.Seconds(), "MB/cpu-s")
	}
}

func TestAdler32MatchesHash(t *testing.T) {
	data := corpus(9, 3<<20)
	for i := range 4000 {
		data[i*700] = 0xff // runs of 0xff: the lanes' largest values
	}
	for _, n := range []int{0, 1, 7, 8, 9, 15, 16, 17, 5552, adlerBlock - 1, adlerBlock, adlerBlock + 15, 65_536, 1<<20 - 1, 1 << 20, 1<<20 + 9, len(data)} {
		want := adler32pkg.Checksum(data[:n])
		if got := adlerUpdate(1, data[:n]); got != want {
			t.Fatalf("%d bytes: %08x, want %08x", n, got, want)
		}
		// In two calls split anywhere.
		h := adler32pkg.New()
		h.Write(data[:n/3])
		if got := adlerUpdate(adlerUpdate(1, data[:n/3]), data[n/3:n]); got != want || h.Sum32() != adlerUpdate(1, data[:n/3]) {
			t.Fatalf("%d bytes in two calls: %08x, want %08x", n, got, want)
		}
	}
	ff := bytes.Repeat([]byte{0xff}, 3<<20)
	if got, want := adlerUpdate(1, ff), adler32pkg.Checksum(ff); got != want {
		t.Fatalf("0xff bytes: %08x, want %08x", got, want)
	}
}

func FuzzAdler32(f *testing.F) {
	f.Add([]byte("ISA*00*~"))
	f.Fuzz(func(t *testing.T, p []byte) {
		if got, want := adlerUpdate(1, p), adler32pkg.Checksum(p); got != want {
			t.Fatalf("%08x, want %08x", got, want)
		}
	})
}
