package receiver

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/interchange"
	"github.com/edihub/edihub/internal/spool"
)

// anyEDI is an EDI step that finds nothing.
type anyEDI struct{}

func (anyEDI) Inspect(context.Context, *config.Partner, io.Reader) interchange.Inspection {
	return interchange.Inspection{}
}

func (anyEDI) Received(*config.Partner, int64, interchange.Inspection) {}

// TestPayloadSpool: a staged payload reaches its spool file whole, in
// order, when its head says the EDI step reads it (an interchange), and
// not at all otherwise; its head is kept either way, short payloads
// included.
func TestPayloadSpool(t *testing.T) {
	sp, err := spool.New(t.TempDir(), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{o: Options{EDI: anyEDI{}}}
	x12 := "ISA*00*          *00*          *ZZ*A*ZZ*B*240101*1200*U*00401*000000001*0*P*>~" + strings.Repeat("LIN*1*VP*X~", 3000)
	for _, c := range []struct {
		name, payload string
		spooled       bool
	}{
		{"EDI", x12, true},
		{"not EDI", strings.Repeat("not an interchange\n", 3000), false},
		{"short EDI", x12[:200], true},
		{"short", "hello", false},
	} {
		f, err := sp.Create()
		if err != nil {
			t.Fatal(err)
		}
		w := &payloadSpool{f: f, need: h.readsPayload, head: make([]byte, 0, headBytes)}
		// Writes of odd sizes, across the head's end.
		for p := c.payload; len(p) > 0; {
			n := min(len(p), 1000+len(p)%7)
			if m, err := w.Write([]byte(p[:n])); m != n || err != nil {
				t.Fatalf("%s: Write = %d, %v", c.name, m, err)
			}
			p = p[n:]
		}
		if err := w.decide(); err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(f.Reader())
		switch {
		case c.spooled && string(got) != c.payload:
			t.Errorf("%s: spooled %d bytes, want the %d written", c.name, len(got), len(c.payload))
		case !c.spooled && len(got) != 0:
			t.Errorf("%s: spooled %d bytes, want none", c.name, len(got))
		}
		if want := c.payload[:min(len(c.payload), headBytes)]; !bytes.Equal(w.head, []byte(want)) {
			t.Errorf("%s: head of %d bytes, want the first %d", c.name, len(w.head), len(want))
		}
		f.Close()
	}
}
