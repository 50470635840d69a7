package connector_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime/debug"
	"testing"

	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/testenv/peakrss"
)

// largeSize is the document the memory tests stream: twice their memory
// limit, so a connector that buffered it whole could not pass.
const (
	largeSize  = 128 << 20
	largeLimit = 64 << 20
)

// generated is a reader of n deterministic pseudo-random bytes that hashes
// what it hands out.
type generated struct {
	rng  *rand.ChaCha8
	left int64
	sum  hashWriter
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

func newGenerated(n int64) *generated {
	return &generated{rng: rand.NewChaCha8([32]byte{1}), left: n, sum: sha256.New()}
}

func (g *generated) Read(p []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.left {
		p = p[:g.left]
	}
	_, _ = g.rng.Read(p)
	_, _ = g.sum.Write(p)
	g.left -= int64(len(p))
	return len(p), nil
}

// roundTripLarge writes a large generated document through d, reads it
// back through s, and checks the content and the peak memory of each way.
// Not parallel: the peak RSS is the whole process's.
func roundTripLarge(t *testing.T, d connector.Destination, s connector.Source) {
	ctx := t.Context()
	gen := newGenerated(largeSize)
	// The runtime's memory limit (GOMEMLIMIT) makes the collector return
	// garbage before the heap grows past it: what stays is what is live.
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(largeLimit))
	debug.FreeOSMemory() // the baselines: what is live, not what earlier tests left
	before := peakrss.Reset(t)
	if err := d.Write(ctx, connector.Put{Name: "large/doc.bin", Body: gen, Size: largeSize, ContentType: "application/octet-stream"}); err != nil {
		t.Fatalf("Write of %d MiB: %v", largeSize>>20, err)
	}
	peakrss.WantAboveIdle(t, before, peakrss.Peak(t), largeLimit*raceMemFactor, fmt.Sprintf("write of %d MiB", largeSize>>20))

	debug.FreeOSMemory()
	before = peakrss.Reset(t)
	r, err := s.Open(ctx, connector.Object{Path: "large/doc.bin"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	_ = r.Close()
	if err != nil || n != largeSize {
		t.Fatalf("read back %d bytes, %v; want %d", n, err, largeSize)
	}
	peakrss.WantAboveIdle(t, before, peakrss.Peak(t), largeLimit*raceMemFactor, fmt.Sprintf("read of %d MiB", largeSize>>20))
	if !bytes.Equal(h.Sum(nil), gen.sum.Sum(nil)) {
		t.Errorf("the document read back differs from the one written (SHA-256)")
	}
}

func TestS3LargeDocumentBoundedMemory(t *testing.T) {
	c, _ := newS3(t, s3gw(t), nil)
	roundTripLarge(t, c, c)
}

func TestSFTPLargeDocumentBoundedMemory(t *testing.T) {
	c, _ := newSFTP(t, sshd(t), nil)
	roundTripLarge(t, c, c)
}
