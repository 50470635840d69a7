package console_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/console"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/spool"
	"github.com/edihub/edihub/internal/testenv/openssltest"
	"github.com/edihub/edihub/internal/testenv/peakrss"
)

// The large upload of TestSendLargeDocumentInConstantMemory: one and a
// half times the memory limit the test sets.
const (
	uploadSize     = 96 << 20
	uploadMemLimit = 64 << 20
	// uploadAboveIdle is issue 22's target for a document of any size.
	uploadAboveIdle = 64 << 20
)

// withSpool gives the console a spool of maxBytes that takes documents
// over from bytes, and an upload limit of maxUpload.
func withSpool(t *testing.T, maxBytes, from, maxUpload int64) (option, *spool.Spool) {
	t.Helper()
	sp, err := spool.New(t.TempDir(), maxBytes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	return func(o *console.Options, _ string) {
		o.Spool, o.SpoolFromBytes, o.MaxUploadBytes = sp, from, maxUpload
	}, sp
}

// writeDocument writes size bytes of X12-like lines to a file in dir
// named name and returns its path and SHA-256.
func writeDocument(t *testing.T, dir, name string, size int64) (string, []byte) {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if err := openssltest.WriteCatalogue(io.MultiWriter(f, h), size); err != nil {
		t.Fatal(err)
	}
	return path, h.Sum(nil)
}

// fillSendForm opens the send form and fills it in for ACME CORP with
// the file path, not sent yet.
func fillSendForm(t *testing.T, e *env, tb context.Context, path string) {
	t.Helper()
	run(t, tb, "fill in the send form",
		chromedp.Navigate(e.page("/send")),
		chromedp.WaitVisible(chromedp.CSS("#partner")),
		chromedp.SetValue(chromedp.CSS("#partner"), "ACME CORP"),
		chromedp.SetValue(chromedp.CSS("#content-type"), "application/edi-x12"),
		chromedp.SetUploadFiles(chromedp.CSS("#document"), []string{path}),
	)
}

// sendForm sends the filled-in form and waits for the page it lands on,
// which shows sel.
func sendForm(t *testing.T, tb context.Context, sel string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tb, 5*time.Minute) // a large upload, under the race detector too
	defer cancel()
	if err := chromedp.Do(ctx, submit("#send"), chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
		t.Fatalf("send the form: %v", err)
	}
}

// wantSpoolEmpty checks that the request's spool file is gone.
func wantSpoolEmpty(t *testing.T, sp *spool.Spool) {
	t.Helper()
	if sp.Used() != 0 {
		t.Errorf("spool holds %d bytes after the upload, want 0", sp.Used())
	}
}

// TestSendLargeDocumentInConstantMemory: an operator uploads, through
// the send form in Chromium, a document one and a half times larger
// than the Go memory limit the test sets (GOMEMLIMIT's runtime
// equivalent). The console reads it as it arrives into the spool and the
// queue stores it from there in pieces, in the enqueue transaction (as
// POST /api/v1/messages does): the console's process (this one; the
// browser is another) peaks within issue 22's 64 MiB above what it held
// before (VmHWM from /proc, reset before), the stored payload is the
// file sent, and the spool is empty after.
func TestSendLargeDocumentInConstantMemory(t *testing.T) {
	opt, sp := withSpool(t, 2*uploadSize, 1<<20, 2*uploadSize)
	e := newEnv(t, opt)
	e.addUser("olga", auth.RoleOperator)
	path, sum := writeDocument(t, t.TempDir(), "catalogue.edi", uploadSize)
	tb := tab(t)
	e.login(t, tb, "olga")
	fillSendForm(t, e, tb, path)

	defer debug.SetMemoryLimit(debug.SetMemoryLimit(uploadMemLimit))
	debug.FreeOSMemory()
	before := peakrss.Reset(t)
	sendForm(t, tb, "#status")
	peak := peakrss.Peak(t)
	peakrss.WantAboveIdle(t, before, peak, uploadAboveIdle, strconv.Itoa(uploadSize>>20)+" MiB uploaded and queued")

	if got := text(t, tb, ".flash"); !strings.Contains(got, "catalogue.edi is queued for ACME CORP") {
		t.Errorf("flash = %q", got)
	}
	recs := e.auditOf("message.send")
	if len(recs) != 1 || recs[0].Detail["size"] != float64(uploadSize) {
		t.Fatalf("audit of the send = %+v", recs)
	}
	id, _ := strconv.ParseInt(recs[0].Target, 10, 64)
	wantStored(t, e, id, sum, true)
	wantSpoolEmpty(t, sp)
	noErrors(t, tb)
}

// wantStored checks that message id was queued with the payload whose
// SHA-256 is sum, stored in pieces when chunked.
func wantStored(t *testing.T, e *env, id int64, sum []byte, chunked bool) {
	t.Helper()
	h := sha256.New()
	m, err := e.st.WritePayload(e.ctx, id, func(hub.MessageInfo) io.Writer { return h })
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), sum) || m.Status != "queued" || m.Partner != "ACME CORP" {
		t.Errorf("queued %+v, payload digest %x; want queued for ACME CORP with %x", m, h.Sum(nil), sum)
	}
	var got bool
	if err := e.db.QueryRow(e.ctx, `SELECT chunked FROM payloads WHERE message_id = $1`, id).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != chunked {
		t.Errorf("payload stored in pieces = %v, want %v", got, chunked)
	}
}

// TestSendDocumentLimits: with a spool, a document over the upload limit
// is refused (413) with the limit named, one the spool has no room for
// is refused (503) saying to try later, neither queued nor left in the
// spool; one over the threshold within both is spooled and stored in
// pieces, one under it held in memory.
func TestSendDocumentLimits(t *testing.T) {
	opt, sp := withSpool(t, 1536<<10, 256<<10, 2<<20)
	e := newEnv(t, opt)
	e.addUser("olga", auth.RoleOperator)
	dir := t.TempDir()
	tb := tab(t)
	e.login(t, tb, "olga")
	tests := []struct {
		name   string
		size   int64
		errSel string // "" when queued
		want   string
	}{
		{"over the upload limit", 3 << 20, "#send-error", "larger than 2.0 MiB"},
		{"no room in the spool", 1800 << 10, "#send-error", "no room for the document on this replica"},
		{"spooled", 600 << 10, "", "is queued for ACME CORP"},
		{"in memory", 100 << 10, "", "is queued for ACME CORP"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path, sum := writeDocument(t, dir, "doc-"+strconv.Itoa(i)+".edi", tt.size)
			fillSendForm(t, e, tb, path)
			if tt.errSel != "" {
				sendForm(t, tb, tt.errSel)
				if got := text(t, tb, tt.errSel); !strings.Contains(got, tt.want) {
					t.Errorf("error shown = %q, want it to say %q", got, tt.want)
				}
				if n := len(e.auditOf("message.send")); n != 0 {
					t.Errorf("%d messages sent, want none", n)
				}
				wantSpoolEmpty(t, sp)
				return
			}
			sendForm(t, tb, "#status")
			if got := text(t, tb, ".flash"); !strings.Contains(got, tt.want) {
				t.Errorf("flash = %q, want it to say %q", got, tt.want)
			}
			recs := e.auditOf("message.send")
			id, _ := strconv.ParseInt(recs[0].Target, 10, 64)
			wantStored(t, e, id, sum, tt.size > 256<<10)
			wantSpoolEmpty(t, sp)
		})
	}
}
