package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestHubToHubLargeMessage sends a message far above both stations'
// spool threshold from one edihub to another through the real send and
// receive paths: posted to the API chunked from a file (spooled, stored
// in pieces), built compressed, signed and encrypted as a stream, posted
// with its Content-Length, received through the spool with a signed
// synchronous MDN whose MIC matches; the payload the receiver serves is
// the file sent.
func TestHubToHubLargeMessage(t *testing.T) {
	const size = 40 << 20
	a, b := newHubStation(t, "HUB ALPHA"), newHubStation(t, "HUB-BRAVO")
	large := []string{"EDIHUB_SPOOL_FROM_BYTES", strconv.Itoa(1 << 20), "EDIHUB_MAX_BODY_BYTES", strconv.Itoa(256 << 20)}
	a.extraEnv, b.extraEnv = large, large
	a.start(t, b, "sign: sha-256", "encrypt: aes256-cbc", "compress: true", "mdn: sync", "mdn_signed: true")
	b.start(t, a, "sign: sha-256", "encrypt: aes256-cbc", "mdn: sync", "mdn_signed: true")

	path := filepath.Join(t.TempDir(), "catalogue.edi")
	want := writeCatalogue(t, path, size)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	req, err := http.NewRequest("POST", "http://"+a.as2Addr+"/api/v1/messages?partner="+url.QueryEscape(b.name)+"&filename=catalogue.edi",
		io.MultiReader(f)) // no length: chunked
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/EDI-X12")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("POST of %d MiB = %d %s, want 202", size>>20, resp.StatusCode, body)
	}
	loc := resp.Header.Get("Location")
	var sent hubMessage
	for deadline := time.Now().Add(5 * time.Minute); ; {
		a.api(t, "GET", loc, "", nil, &sent)
		if sent.Status == "delivered" || sent.Status == "failed" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if sent.Status != "delivered" {
		t.Fatalf("message status %q, disposition %q, error %q; want delivered", sent.Status, sent.Disposition, sent.Error)
	}
	var chunked, inputs bool
	var pieces int
	if err := pgtest.Conn(t, a.dbURL).QueryRow(context.Background(), `
SELECT o.body_chunked, o.build_inputs IS NOT NULL AND o.body_sha256 IS NOT NULL, (SELECT count(*) FROM outbox_body_chunks c WHERE c.outbox_id = o.id)
  FROM outbox o WHERE o.message_id = $1`, sent.ID).Scan(&chunked, &inputs, &pieces); err != nil || !chunked || !inputs || pieces != 0 {
		t.Errorf("sender's outbox row: body_chunked %v, build inputs %v, %d pieces (%v); want built as a stream, its inputs frozen, no piece of its body", chunked, inputs, pieces, err)
	}
	got := b.received(t, sent.MessageID)
	if got.MIC != sent.MIC || got.MIC == "" {
		t.Errorf("receiver's MIC %q, sender's %q", got.MIC, sent.MIC)
	}
	preq, err := http.NewRequest("GET", "http://"+b.as2Addr+got.Location+"/payload", nil)
	if err != nil {
		t.Fatal(err)
	}
	preq.Header.Set("Authorization", "Bearer "+b.token)
	presp, err := http.DefaultClient.Do(preq)
	if err != nil {
		t.Fatal(err)
	}
	defer presp.Body.Close()
	h := sha256.New()
	n, err := io.Copy(h, presp.Body)
	if err != nil || presp.StatusCode != 200 || n != size || [32]byte(h.Sum(nil)) != want {
		t.Errorf("receiver's payload = %d, %d bytes (%v), want 200 and the %d bytes sent", presp.StatusCode, n, err, size)
	}
	for _, s := range []*hubStation{a, b} {
		if m := s.metrics(t); !containsLine(m, "edihub_outbox_in_flight 0") {
			t.Errorf("%s: sends still in flight", s.name)
		}
	}
}

// writeCatalogue writes size bytes of X12-like lines to path and returns
// their SHA-256.
func writeCatalogue(t *testing.T, path string, size int) [32]byte {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	h := sha256.New()
	out := io.MultiWriter(w, h)
	var line []byte
	for i, n := 0, 0; n < size; i++ {
		line = append(line[:0], "LIN*"...)
		line = strconv.AppendInt(line, int64(i), 10)
		line = append(line, "*VP*"...)
		line = strconv.AppendUint(line, uint64(i)*2654435761, 36)
		line = append(line, "~\n"...)
		line = line[:min(len(line), size-n)]
		out.Write(line)
		n += len(line)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}

func containsLine(text, line string) bool {
	return slices.Contains(strings.Split(text, "\n"), line)
}
