package outbox

import (
	"bytes"
	"errors"
	"testing"
)

// TestLengthGate: a body of the announced length passes whole, its last
// byte only on finish; one longer or shorter fails with errLength and
// never passes its last byte, so that the partner never has a whole
// request of the wrong body.
func TestLengthGate(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 10)
	tests := []struct {
		name   string
		head   int // bytes written before start
		give   int // bytes of body written in all
		writes int // size of each write after the head
		size   int64
		ok     bool
	}{
		{"exact", 10, 100, 7, 100, true},
		{"exact, one write", 0, 100, 100, 100, true},
		{"exact, all before start", 100, 100, 1, 100, true},
		{"one byte body", 0, 1, 1, 1, true},
		{"longer", 10, 100, 7, 99, false},
		{"longer, a write ending at the announced size", 10, 100, 7, 94, false},
		{"longer, all before start", 100, 100, 1, 99, false},
		{"shorter", 10, 99, 7, 100, false},
		{"shorter by a write", 10, 93, 7, 100, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			g := &lengthGate{}
			var err error
			_, err = g.Write(body[:tt.head])
			g.start(&out, tt.size)
			if out.Len() != 0 {
				t.Fatalf("%d bytes passed before the first write after start", out.Len())
			}
			for p := body[tt.head:tt.give]; len(p) > 0 && err == nil; {
				k := min(tt.writes, len(p))
				_, err = g.Write(p[:k])
				p = p[k:]
			}
			if err == nil {
				if int64(out.Len()) >= tt.size {
					t.Fatalf("%d bytes passed before finish, announced %d: the last byte must wait", out.Len(), tt.size)
				}
				err = g.finish()
			}
			switch {
			case tt.ok && err != nil:
				t.Fatalf("finish() = %v, want nil", err)
			case tt.ok && !bytes.Equal(out.Bytes(), body[:tt.give]):
				t.Fatalf("passed %q, want the whole body", out.Bytes())
			case !tt.ok && !errors.Is(err, errLength):
				t.Fatalf("error %v, want errLength", err)
			case !tt.ok && int64(out.Len()) >= tt.size:
				t.Fatalf("%d bytes passed of %d announced: the partner has a whole request", out.Len(), tt.size)
			}
		})
	}
}
