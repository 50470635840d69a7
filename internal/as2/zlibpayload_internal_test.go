package as2

import (
	"bytes"
	"testing"
)

// TestZlibTeeHold: the stream read before the decision is held and
// passed on when kept, dropped when not, and past MaxZlibHold dropped
// whatever keep then asks (the payload is stored inflated).
func TestZlibTeeHold(t *testing.T) {
	for _, c := range []struct {
		name       string
		before     int
		want, kept bool
	}{
		{"kept", 1000, true, true},
		{"not kept", 1000, false, false},
		{"over the hold", MaxZlibHold + 1, true, false},
	} {
		var out bytes.Buffer
		tee := &zlibTee{w: &out}
		if n, err := tee.Write(make([]byte, c.before)); n != c.before || err != nil {
			t.Fatalf("%s: Write = %d, %v", c.name, n, err)
		}
		kept, err := tee.keep(c.want)
		if err != nil || kept != c.kept {
			t.Fatalf("%s: keep(%v) = %v, %v; want %v", c.name, c.want, kept, err, c.kept)
		}
		_, _ = tee.Write([]byte("after"))
		want := 0
		if c.kept {
			want = c.before + len("after")
		}
		if out.Len() != want {
			t.Errorf("%s: %d bytes passed on, want %d", c.name, out.Len(), want)
		}
	}
}
