package receiver_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/testenv/openssltest"
	"github.com/edihub/edihub/internal/testenv/peakrss"
)

// largeSize is the payload of TestReceiveLargeMessageInConstantMemory:
// two and a half times the memory limit the test sets.
const (
	largeSize     = 160 << 20
	largeMemLimit = 64 << 20
	// maxAboveIdle is issue 22's target for a message of any size.
	maxAboveIdle = 64 << 20
)

// TestReceiveLargeMessageInConstantMemory receives a message 2.5 times
// larger than the Go memory limit the test sets (GOMEMLIMIT's runtime
// equivalent), built by openssl: compressed, signed and encrypted
// (AES-256-CBC, BER streamed), posted from its file. The MDN is openssl's
// MIC, the payload stored is the one sent (by digest), and the process's
// peak resident memory (VmHWM from /proc, reset before) stays within
// 64 MiB of what it was before the message.
func TestReceiveLargeMessageInConstantMemory(t *testing.T) {
	e := newEnv(t, envOptions{spool: true, spoolBytes: 4 * largeSize, maxBody: 2 * largeSize})
	ids := openssltest.Keys(t)
	m, err := openssltest.BuildLarge(t.TempDir(), openssltest.LargeSpec{Size: largeSize, Compress: true, Signer: ids.A, Recipient: ids.B})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("payload %d MiB, body %d MiB", largeSize>>20, m.BodySize>>20)
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(largeMemLimit))
	runtime.GC()
	before := peakrss.Reset(t)
	f, err := os.Open(m.BodyPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	req, err := http.NewRequest(http.MethodPost, e.url, f)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = m.BodySize
	req.Header = request(as2Header(partnerACME, station, "<large@x>", "sha-256"), opensslMessage{header: m.Header})
	r := do(t, req)
	peak := peakrss.Peak(t)
	got := parseMDN(t, r)
	if got.Disposition.String() != processed || got.MIC != m.MIC {
		t.Fatalf("MDN = %s MIC %q, want processed, %q (openssl dgst)", got.Disposition, got.MIC, m.MIC)
	}
	peakrss.WantAboveIdle(t, before, peak, maxAboveIdle, "")
	id := int64(e.count(t, `SELECT id FROM messages WHERE message_id = '<large@x>'`))
	h := sha256.New()
	if _, err := e.store.WritePayload(context.Background(), id, func(hub.MessageInfo) io.Writer { return h }); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), m.PayloadSHA256) {
		t.Error("stored payload differs from the payload sent")
	}
	wantStoredZlib(t, e, id, largeSize)
}

// wantStoredZlib checks that message id's payload of size bytes is
// stored as the zlib stream it arrived in (openssltest's payload
// compresses to under half its size; inflated it would be all of it),
// its size reported inflated.
func wantStoredZlib(t *testing.T, e *env, id int64, size int64) {
	t.Helper()
	zlib := e.count(t, `SELECT count(*) FROM payloads WHERE message_id = $1 AND encoding = 'zlib' AND chunked`, id)
	stored := e.count(t, `SELECT coalesce(sum(octet_length(data)), 0) FROM payload_chunks WHERE message_id = $1`, id)
	reported := e.count(t, `SELECT payload_size FROM messages WHERE id = $1`, id)
	if zlib != 1 || int64(stored) >= size*3/4 || int64(reported) != size {
		t.Errorf("payload stored: zlib rows %d, %d bytes, size %d; want 1, under %d, %d", zlib, stored, reported, size*3/4, size)
	}
}
