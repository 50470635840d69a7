package outbox_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/spool"
	"github.com/edihub/edihub/internal/testenv/openssltest"
	"github.com/edihub/edihub/internal/testenv/peakrss"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// The large send of TestSendLargeMessageInConstantMemory: a payload two
// and a half times the memory limit the test sets.
const (
	largeSize     = 160 << 20
	largeMemLimit = 64 << 20
	// maxAboveIdle is issue 22's target for a message of any size.
	maxAboveIdle = 64 << 20
)

// bodySink is a partner that writes each request body to a file as it
// arrives (never holding it) and answers with status.
type bodySink struct {
	*httptest.Server
	dir string
	mu  sync.Mutex
	got []sunk
	// status answers request n (1-based); nil answers 200.
	status func(n int) int
}

type sunk struct {
	header http.Header
	length int64 // Content-Length, -1 when chunked
	path   string
	size   int64
	sha256 [32]byte
}

func newBodySink(t *testing.T, status func(n int) int) *bodySink {
	t.Helper()
	s := &bodySink{dir: t.TempDir(), status: status}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		n := len(s.got) + 1
		path := filepath.Join(s.dir, "body-"+strconv.Itoa(n))
		s.got = append(s.got, sunk{})
		s.mu.Unlock()
		f, err := os.Create(path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		h := sha256.New()
		size, err := io.Copy(io.MultiWriter(f, h), r.Body)
		if err != nil {
			return // the client gave up
		}
		s.mu.Lock()
		s.got[n-1] = sunk{header: r.Header.Clone(), length: r.ContentLength, path: path, size: size, sha256: [32]byte(h.Sum(nil))}
		s.mu.Unlock()
		code := http.StatusOK
		if s.status != nil {
			code = s.status(n)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *bodySink) requests() []sunk {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sunk(nil), s.got...)
}

// oneRequest is the only request the partner got, which must have been
// posted with its Content-Length (the body's size, not chunked).
func (s *bodySink) oneRequest(t *testing.T) sunk {
	t.Helper()
	reqs := s.requests()
	if len(reqs) != 1 {
		t.Fatalf("partner got %d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.length != r.size || r.size == 0 {
		t.Errorf("Content-Length %d for a body of %d bytes", r.length, r.size)
	}
	return r
}

// writeLargePayload writes size bytes of X12-like lines
// (openssltest.WriteCatalogue) to a file in dir and returns its path and
// SHA-256, holding nothing whole.
func writeLargePayload(t *testing.T, dir string, size int64) (string, []byte) {
	t.Helper()
	path := filepath.Join(dir, "catalogue.edi")
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

// enqueueFile queues the file at path for partner as a spooled document
// (outbox.Document.Open): stored in pieces, never read whole.
func enqueueFile(t *testing.T, q *outbox.Queue, partner, path string) outbox.Queued {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := q.Enqueue(context.Background(), outbox.Document{Partner: partner, ContentType: "application/EDI-X12", Filename: "catalogue.edi",
		Open: func() io.Reader { return io.NewSectionReader(f, 0, fi.Size()) }, Size: fi.Size()})
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return m
}

// TestSendLargeMessageInConstantMemory sends a message 2.5 times larger
// than the Go memory limit the test sets (GOMEMLIMIT's runtime
// equivalent): queued from a file (stored in pieces), built compressed,
// signed and encrypted as a stream into the spool, posted with its
// Content-Length. The process's peak resident memory (VmHWM from /proc,
// reset before) stays within 64 MiB of what it was before. openssl, the
// independent peer, then decrypts the body as received and verifies the
// signature; its SHA-256 of the signed entity is the MIC edihub stored,
// and the payload inside is the one queued. The spool is empty after.
func TestSendLargeMessageInConstantMemory(t *testing.T) { sendLargeInConstantMemory(t, "aes256-cbc") }

// TestSendLargeGCMInConstantMemory is TestSendLargeMessageInConstantMemory
// encrypted with AES-256-GCM: AuthEnvelopedData, its tag computed as the
// content streams, which openssl checks when it decrypts.
func TestSendLargeGCMInConstantMemory(t *testing.T) { sendLargeInConstantMemory(t, "aes256-gcm") }

// sendLargeInConstantMemory is TestSendLargeMessageInConstantMemory with
// the partner's cipher.
func sendLargeInConstantMemory(t *testing.T, cipher string) {
	st := pgtest.Store(t)
	k := keys(t)
	sink := newBodySink(t, nil)
	cfg := loadConfig(t, partnerYAML{id: "BIG PARTNER", url: sink.URL,
		extra: []string{"sign: sha-256", "encrypt: " + cipher, "compress: true", "mdn: none"}})
	sp, err := spool.New(t.TempDir(), 2*largeSize)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	o := dispatcherOpts(t, st, cfg, "big")
	o.Spool, o.SpoolFromBytes = sp, 1<<20
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	path, payloadSum := writeLargePayload(t, t.TempDir(), largeSize)

	defer debug.SetMemoryLimit(debug.SetMemoryLimit(largeMemLimit))
	debug.FreeOSMemory() // what an earlier test left resident is not idle
	before := peakrss.Reset(t)
	queued := enqueueFile(t, q, "BIG PARTNER", path)
	stop := startDispatcher(t, o)
	m := waitStatusWithin(t, st, queued.ID, 10*time.Minute, "sent", "failed")
	peak := peakrss.Peak(t)
	stop()
	if m.Status != "sent" {
		t.Fatalf("status %q (error %q), want sent", m.Status, m.Error)
	}
	peakrss.WantAboveIdle(t, before, peak, maxAboveIdle, fmt.Sprintf("queue, build, store, post of %d MiB", largeSize>>20))
	if sp.Used() != 0 {
		t.Errorf("spool holds %d bytes after the send, want 0", sp.Used())
	}
	r := sink.oneRequest(t)
	t.Logf("payload %d MiB, body %d MiB", largeSize>>20, r.size>>20)
	checkLargeWithOpenSSL(t, k, r, m.MIC, payloadSum)
}

// checkLargeWithOpenSSL has openssl decrypt the body r received and
// verify its signature over the signed entity, compares openssl's SHA-256
// of that entity with mic, and the payload inside with payloadSum.
func checkLargeWithOpenSSL(t *testing.T, k map[string]*identity, r sunk, mic string, payloadSum []byte) {
	t.Helper()
	part1, got := openSigned(t, k, r)
	if got != mic {
		t.Errorf("openssl's SHA-256 of the signed entity = %s, edihub's MIC %s", got, mic)
	}
	comp := splitEntity(t, part1)
	if !strings.Contains(comp.header["content-type"], "compressed-data") {
		t.Fatalf("signed entity is %q, want compressed-data", comp.header["content-type"])
	}
	zr, err := cms.DecompressStream(bytes.NewReader(comp.body), 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(zr)
	for { // the payload entity's header
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if l == "\r\n" {
			break
		}
	}
	h := sha256.New()
	if _, err := io.Copy(h, br); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h.Sum(nil), payloadSum) {
		t.Error("the payload openssl's peer finds differs from the one queued")
	}
}

// TestSendLargeSpoolCleanedOnFailure sends a message built as a stream to
// a partner that fails it each way an attempt can fail (down, too slow,
// 5xx, the send cancelled by shutdown) and checks that the spool holds
// nothing once the attempt is over; then the partner takes it, and
// every attempt that reached it posted the same bytes (the inputs of the
// first build frozen, the message built again from them for the retry,
// no byte of its body in the database) with the MIC stored at the
// build.
func TestSendLargeSpoolCleanedOnFailure(t *testing.T) {
	const size = 3 << 20
	dbURL := pgtest.URL(t)
	st, err := postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	conn := pgtest.Conn(t, dbURL)
	path, _ := writeLargePayload(t, t.TempDir(), size)
	tests := []struct {
		name string
		// partner returns the partner's URL, the answer to the first
		// attempt being a failure.
		partner func(t *testing.T, ok func()) (url string, sink *bodySink)
		opts    func(o *outbox.Options)
		timeout string
		// cancel stops the dispatcher during the first attempt.
		cancel bool
	}{
		{name: "partner down", partner: func(t *testing.T, ok func()) (string, *bodySink) {
			s := newBodySink(t, nil)
			url := s.URL
			s.Close() // nobody listens any more
			return url, nil
		}},
		{name: "5xx", partner: func(t *testing.T, ok func()) (string, *bodySink) {
			s := newBodySink(t, func(n int) int {
				if n == 1 {
					return http.StatusServiceUnavailable
				}
				return http.StatusOK
			})
			return s.URL, s
		}},
		{name: "timeout", timeout: "1s", partner: func(t *testing.T, ok func()) (string, *bodySink) {
			return hangingPartner(t, ok), nil
		}},
		{name: "cancelled", cancel: true, partner: func(t *testing.T, ok func()) (string, *bodySink) {
			return hangingPartner(t, ok), nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reached := make(chan struct{}, 16)
			url, sink := tt.partner(t, func() { reached <- struct{}{} })
			extra := []string{"sign: sha-256", "encrypt: aes128-cbc", "compress: true", "mdn: none", "max_attempts: 3"}
			if tt.timeout != "" {
				extra = append(extra, "timeout: "+tt.timeout)
			}
			cfg := loadConfig(t, partnerYAML{id: "BIG PARTNER", url: url, extra: extra})
			sp, err := spool.New(t.TempDir(), 64<<20)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sp.Close() })
			o := dispatcherOpts(t, st, cfg, "cleanup-"+strings.ReplaceAll(tt.name, " ", "-"))
			o.Spool, o.SpoolFromBytes = sp, 1<<20
			o.BackoffBase, o.BackoffMax = time.Hour, time.Hour // one attempt until the test moves the retry
			o.Jitter = func() float64 { return 0.5 }
			if tt.cancel {
				o.ShutdownTimeout = 100 * time.Millisecond
			}
			q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg})
			if err != nil {
				t.Fatal(err)
			}
			queued := enqueueFile(t, q, "BIG PARTNER", path)
			stop := startDispatcher(t, o)
			if tt.cancel {
				<-reached
				if sp.Used() == 0 {
					t.Fatal("spool empty while the message is posted, want its body there")
				}
				stop()
			} else {
				waitStatus(t, st, queued.ID, "retrying")
				stop()
			}
			if used := sp.Used(); used != 0 {
				t.Errorf("after the failed attempt the spool holds %d bytes, want 0", used)
			}
			if left := spoolFiles(t, sp); len(left) > 0 {
				t.Errorf("after the failed attempt the spool directory holds %v, want nothing", left)
			}
			wantFrozenInputs(t, conn, queued.ID)
			if sink == nil {
				return
			}
			built, err := st.Message(context.Background(), queued.ID)
			if err != nil {
				t.Fatal(err)
			}
			// The retry, built again from the payload and the frozen inputs.
			if _, err := conn.Exec(context.Background(), `UPDATE outbox SET next_attempt_at = now(), claimed_until = NULL, claimed_by = '' WHERE message_id = $1`, queued.ID); err != nil {
				t.Fatal(err)
			}
			stop = startDispatcher(t, o)
			m := waitStatus(t, st, queued.ID, "sent", "failed")
			// The message is sent once its status is stored; the attempt
			// removes its spool file after that: stopped, every attempt
			// has ended.
			stop()
			if m.Status != "sent" {
				t.Fatalf("status %q (error %q), want sent", m.Status, m.Error)
			}
			reqs := sink.requests()
			if len(reqs) != 2 || reqs[0].sha256 != reqs[1].sha256 || reqs[1].length != reqs[1].size {
				t.Errorf("partner got %d requests; want 2 with the same bytes and their Content-Length", len(reqs))
			}
			if m.MIC != built.MIC || m.MIC == "" {
				t.Errorf("MIC after the retry %q, at the first build %q; want the same", m.MIC, built.MIC)
			}
			if used := sp.Used(); used != 0 {
				t.Errorf("after the send the spool holds %d bytes, want 0", used)
			}
		})
	}
}

// hangingPartner reads a request body and never answers until the
// client gives up; reached is called once the body is in.
func hangingPartner(t *testing.T, reached func()) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		reached()
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// spoolFiles lists the files of sp's directory but its lock.
func spoolFiles(t *testing.T, sp *spool.Spool) []string {
	t.Helper()
	entries, err := os.ReadDir(sp.Dir())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.Name() != ".lock" {
			names = append(names, e.Name())
		}
	}
	return names
}

// waitStatusWithin is waitStatus with its own deadline.
func waitStatusWithin(t *testing.T, st *postgres.Store, id int64, d time.Duration, want ...string) hub.MessageInfo {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		m, err := st.Message(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if m.Status == w {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %d status %q (error %q), want one of %v", id, m.Status, m.Error, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestSendLargeCancelledMidBuild stops the dispatcher, giving up on its
// sends at once, while a large message is being built: every goroutine
// the build started (the payload read ahead, the parallel compression)
// has ended when the dispatcher has, the spool file is gone and nothing
// is frozen. The next dispatcher builds it
// again and sends it, and openssl reads what the partner got.
func TestSendLargeCancelledMidBuild(t *testing.T) {
	const size = 48 << 20
	dbURL := pgtest.URL(t)
	st, err := postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	conn := pgtest.Conn(t, dbURL)
	k := keys(t)
	sink := newBodySink(t, nil)
	cfg := loadConfig(t, partnerYAML{id: "BIG PARTNER", url: sink.URL,
		extra: []string{"sign: sha-256", "encrypt: aes256-cbc", "compress: true", "mdn: none"}})
	sp, err := spool.New(t.TempDir(), 2*size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sp.Close() })
	o := dispatcherOpts(t, st, cfg, "mid-build")
	o.Spool, o.SpoolFromBytes = sp, 1<<20
	o.ShutdownTimeout = time.Millisecond
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	path, payloadSum := writeLargePayload(t, t.TempDir(), size)
	queued := enqueueFile(t, q, "BIG PARTNER", path)

	idle := goleak.IgnoreCurrent()
	stop := startDispatcher(t, o)
	for deadline := time.Now().Add(time.Minute); sp.Used() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the build never wrote to the spool")
		}
	}
	stop()
	if len(sink.requests()) > 0 {
		t.Fatal("the partner got the message before the stop: the build was not cut short")
	}
	// The pool's connections opened meanwhile stay, with their dead-peer
	// watch.
	goleak.VerifyNone(t, idle, goleak.IgnoreTopFunction("github.com/edihub/edihub/internal/postgres.(*watchedConn).watch"))
	if used, left := sp.Used(), spoolFiles(t, sp); used != 0 || len(left) > 0 {
		t.Errorf("after the build was cut short the spool holds %d bytes in %v, want nothing", used, left)
	}
	var rows int
	var chunked, inputs bool
	if err := conn.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM outbox_body_chunks c WHERE c.outbox_id = o.id), o.body_chunked,
       o.build_inputs IS NOT NULL
  FROM outbox o JOIN messages m ON m.id = o.message_id WHERE m.id = $1`, queued.ID).Scan(&rows, &chunked, &inputs); err != nil {
		t.Fatal(err)
	}
	if rows != 0 || chunked || inputs {
		t.Errorf("after the build was cut short: %d frozen rows, body_chunked %v, build inputs %v; want none", rows, chunked, inputs)
	}

	if _, err := conn.Exec(context.Background(), `UPDATE outbox SET next_attempt_at = now(), claimed_until = NULL, claimed_by = '' WHERE message_id = $1`, queued.ID); err != nil {
		t.Fatal(err)
	}
	o.ShutdownTimeout = 0
	startDispatcher(t, o)
	m := waitStatusWithin(t, st, queued.ID, 10*time.Minute, "sent", "failed")
	if m.Status != "sent" {
		t.Fatalf("status %q (error %q), want sent", m.Status, m.Error)
	}
	checkLargeWithOpenSSL(t, k, sink.oneRequest(t), m.MIC, payloadSum)
}
