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

// remoteLargeSize is the document the memory tests stream: twice their memory
// limit, so a connector that buffered it whole could not pass.
const (
	remoteLargeSize  = 128 << 20
	remoteLargeLimit = 64 << 20
)

// generatedBody is a reader of n deterministic pseudo-random bytes that hashes
// what it hands out.
type generatedBody struct {
	rng  *rand.ChaCha8
	left int64
	sum  bodyHash
}

type bodyHash interface {
	io.Writer
	Sum([]byte) []byte
}

func newGeneratedBody(n int64) *generatedBody {
	return &generatedBody{rng: rand.NewChaCha8([32]byte{1}), left: n, sum: sha256.New()}
}

func (g *generatedBody) Read(p []byte) (int, error) {
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

// roundTripLargeRemote writes a large generatedBody document through d, reads it
// back through s, and checks the content and the peak memory of each way.
// Not parallel: the peak RSS is the whole process's.
func roundTripLargeRemote(t *testing.T, d connector.Destination, s connector.Source) {
	ctx := t.Context()
	gen := newGeneratedBody(remoteLargeSize)
	// The runtime's memory limit (GOMEMLIMIT) makes the collector return
	// garbage before the heap grows past it: what stays is what is live.
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(remoteLargeLimit))
	debug.FreeOSMemory() // the baselines: what is live, not what earlier tests left
	before := peakrss.Reset(t)
	if err := d.Write(ctx, connector.Put{Name: "large/doc.bin", Body: gen, Size: remoteLargeSize, ContentType: "application/octet-stream"}); err != nil {
		t.Fatalf("Write of %d MiB: %v", remoteLargeSize>>20, err)
	}
	peakrss.WantAboveIdle(t, before, peakrss.Peak(t), remoteLargeLimit*remoteRaceMemFactor, fmt.Sprintf("write of %d MiB", remoteLargeSize>>20))

	debug.FreeOSMemory()
	before = peakrss.Reset(t)
	r, err := s.Open(ctx, connector.Object{Path: "large/doc.bin"})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	_ = r.Close()
	if err != nil || n != remoteLargeSize {
		t.Fatalf("read back %d bytes, %v; want %d", n, err, remoteLargeSize)
	}
	peakrss.WantAboveIdle(t, before, peakrss.Peak(t), remoteLargeLimit*remoteRaceMemFactor, fmt.Sprintf("read of %d MiB", remoteLargeSize>>20))
	if !bytes.Equal(h.Sum(nil), gen.sum.Sum(nil)) {
		t.Errorf("the document read back differs from the one written (SHA-256)")
	}
}

func TestS3LargeDocumentBoundedMemory(t *testing.T) {
	c, _ := newS3(t, s3gw(t), nil)
	roundTripLargeRemote(t, c, c)
}

func TestSFTPLargeDocumentBoundedMemory(t *testing.T) {
	c, _ := newSFTP(t, sshd(t), nil)
	roundTripLargeRemote(t, c, c)
}
