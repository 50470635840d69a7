package receiver

import (
	"errors"
	"io"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// TestReadBodyAllocatesForWhatArrived: a Content-Length claiming far more
// than is sent does not get a buffer of that size.
func TestReadBodyAllocatesForWhatArrived(t *testing.T) {
	r := httptest.NewRequest("POST", "/as2", strings.NewReader(strings.Repeat("x", 100<<10)))
	r.ContentLength = 256 << 20
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := readBody(r)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("readBody(short body) error = %v, want io.ErrUnexpectedEOF", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("readBody allocated %d bytes for a 100 KiB body claiming 256 MiB, want under 4 MiB", got)
	}
}

func TestReadBodyContentLength(t *testing.T) {
	for _, n := range []int{1, 32<<10 - 1, 32 << 10, 32<<10 + 1, 5<<20 + 3} {
		want := strings.Repeat("abcdefg", n/7+1)[:n]
		r := httptest.NewRequest("POST", "/as2", strings.NewReader(want))
		r.ContentLength = int64(n)
		got, err := readBody(r)
		if err != nil || string(got) != want {
			t.Errorf("readBody(%d bytes) = %d bytes, %v; want the body", n, len(got), err)
		}
	}
}
