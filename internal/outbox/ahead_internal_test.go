package outbox

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// TestAheadWriterKeepsOrder writes a stream in writes of random sizes
// (some larger than a buffer, some empty) and checks that w got it
// whole, in order, once Flush returned, for several buffer counts.
func TestAheadWriterKeepsOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	want := make([]byte, 3<<20+17)
	for i := range want {
		want[i] = byte(rng.Uint32())
	}
	for _, n := range []int{1, 2, aheadBuffers} {
		var got bytes.Buffer
		a := newAheadWriter(&got, 64<<10, n)
		for p := want; len(p) > 0; {
			k := min(len(p), rng.IntN(200<<10))
			if w, err := a.Write(p[:k]); w != k || err != nil {
				t.Fatalf("%d buffers: Write of %d bytes = %d, %v", n, k, w, err)
			}
			p = p[k:]
			if rng.IntN(50) == 0 {
				if err := a.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := a.Flush(); err != nil {
			t.Fatal(err)
		}
		a.Close()
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("%d buffers: w got %d bytes, not the %d written in order", n, got.Len(), len(want))
		}
	}
}

// failAfter takes n bytes, then fails every write.
type failAfter struct {
	n   int
	got bytes.Buffer
}

var errSink = errors.New("sink failed")

func (f *failAfter) Write(p []byte) (int, error) {
	if f.got.Len()+len(p) > f.n {
		return 0, errSink
	}
	return f.got.Write(p)
}

// TestAheadWriterError checks that w's first error reaches the writer (a
// later Write, or Flush) and every call after it, and that nothing is
// written to w after it.
func TestAheadWriterError(t *testing.T) {
	sink := &failAfter{n: 100 << 10}
	a := newAheadWriter(sink, 64<<10, 2)
	defer a.Close()
	chunk := make([]byte, 32<<10)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = a.Write(chunk)
	}
	if err == nil {
		err = a.Flush()
	}
	if !errors.Is(err, errSink) {
		t.Fatalf("writes after w failed: %v, want its error", err)
	}
	if _, err := a.Write(chunk); !errors.Is(err, errSink) {
		t.Errorf("Write after the error: %v, want it again", err)
	}
	if err := a.Flush(); !errors.Is(err, errSink) {
		t.Errorf("Flush after the error: %v, want it again", err)
	}
	if sink.got.Len() != 64<<10 {
		t.Errorf("w took %d bytes, want the one buffer before it failed", sink.got.Len())
	}
}

// TestAheadWriterClose checks that Close drops what is buffered, ends
// the goroutine, and that writes after it fail.
func TestAheadWriterClose(t *testing.T) {
	var got bytes.Buffer
	a := newAheadWriter(&got, 64<<10, 2)
	if _, err := a.Write(make([]byte, 64<<10+10)); err != nil {
		t.Fatal(err)
	}
	a.Close()
	a.Close() // a no-op
	if got.Len() != 64<<10 {
		t.Errorf("w got %d bytes, want the full buffer only", got.Len())
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, errAheadClosed) {
		t.Errorf("Write after Close: %v", err)
	}
	if err := a.Flush(); !errors.Is(err, errAheadClosed) {
		t.Errorf("Flush after Close: %v", err)
	}
}
