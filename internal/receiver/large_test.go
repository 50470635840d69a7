package receiver_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/openssltest"
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
	before := resetPeakRSS(t)
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
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	peak := procStatusBytes(t, "VmHWM")
	got := parseMDN(t, reply{status: resp.StatusCode, header: resp.Header, body: body})
	if got.Disposition.String() != processed || got.MIC != m.MIC {
		t.Fatalf("MDN = %s MIC %q, want processed, %q (openssl dgst)", got.Disposition, got.MIC, m.MIC)
	}
	wantPeakAboveIdle(t, before, peak)
	id := int64(e.count(t, `SELECT id FROM messages WHERE message_id = '<large@x>'`))
	h := sha256.New()
	if _, err := e.store.WritePayload(context.Background(), id, func(postgres.MessageInfo) io.Writer { return h }); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), m.PayloadSHA256) {
		t.Error("stored payload differs from the payload sent")
	}
}

// wantPeakAboveIdle checks issue 22's target: a peak RSS within
// maxAboveIdle of before; it logs the figure.
func wantPeakAboveIdle(t *testing.T, before, peak int64) {
	t.Helper()
	if above := peak - before; above > maxAboveIdle {
		t.Errorf("peak RSS %d MiB above the %d MiB before the message, want under %d MiB", above>>20, before>>20, maxAboveIdle>>20)
	} else {
		t.Logf("peak RSS %.1f MiB above the %d MiB before the message", float64(above)/(1<<20), before>>20)
	}
}

// resetPeakRSS resets the process's VmHWM to its VmRSS (clear_refs 5)
// and returns it.
func resetPeakRSS(t *testing.T) int64 {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS: %v", err)
	}
	return procStatusBytes(t, "VmRSS")
}

// procStatusBytes reads a kB field of /proc/self/status.
func procStatusBytes(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal(fmt.Sprintf("%s not in /proc/self/status", field))
	return 0
}
