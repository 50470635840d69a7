package mdn_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

var reportHeader = http.Header{"Content-Type": {"multipart/report; report-type=disposition-notification; boundary=x"}}

// TestPollerOversizedMDNs: inbox rows over the MDN size limit (stored
// before the receiver refused them) become orphans saying so, without
// being read, and hold back nothing: the valid MDN stored after them
// delivers its message. So does a valid, signed MDN over the limit, and
// its message keeps awaiting one.
func TestPollerOversizedMDNs(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := e.send(signedPartner)
	big := e.send(signedPartner)
	junk := []int64{
		e.storeRaw(signedPartner, "", reportHeader, bytes.Repeat([]byte("j"), mdn.DefaultMaxMDNBytes+1)),
		e.storeRaw(signedPartner, "", reportHeader, bytes.Repeat([]byte("j"), 3<<20)),
	}
	const limit = 16 << 10
	padded := e.storeMDN(mdnOpts{from: signedPartner, id: big.MessageID, mic: big.MIC, signer: e.ids.A, text: strings.Repeat("long text ", 2*limit/10)})
	ok := e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, mic: m.MIC, signer: e.ids.A})

	// The default limit: the junk rows are orphans, the rest applies.
	reads := &readCountingStore{Store: e.st}
	p := e.poller(pollerOptions{store: reads})
	e.runPoller(p, e.openTerm(1))
	waitFor(t, "every MDN decided", func() bool { return e.pending() == 0 })
	inbox := e.inbox()
	for _, id := range junk {
		row := inbox[id]
		want := fmt.Sprintf("too large: %d bytes, over the %d bytes an MDN may have", row.Size, mdn.DefaultMaxMDNBytes)
		if row.State != postgres.InboxOrphan || !strings.HasPrefix(row.Reason, want) || row.Partner != signedPartner {
			t.Errorf("inbox MDN %d of %d bytes = {state %q, reason %q, partner %q}, want an orphan of %s: %q", id, row.Size, row.State, row.Reason, row.Partner, signedPartner, want)
		}
		if reads.read(id) {
			t.Errorf("inbox MDN %d of %d bytes was read, want it refused by its size", id, row.Size)
		}
	}
	if got := e.message(m.ID); got.Status != "delivered" || inbox[ok].State != postgres.InboxProcessed {
		t.Errorf("valid MDN after the oversized ones: inbox %q, message %q; want processed, delivered", inbox[ok].State, got.Status)
	}
	if got := e.message(big.ID); got.Status != "delivered" {
		t.Errorf("message of the padded MDN (%d bytes, under the default limit): %q, want delivered", inbox[padded].Size, got.Status)
	}

	// A limit below a valid MDN: an orphan, the message awaits still.
	e2 := newEnv(t, envOptions{})
	m2 := e2.send(signedPartner)
	id := e2.storeMDN(mdnOpts{from: signedPartner, id: m2.MessageID, mic: m2.MIC, signer: e2.ids.A, text: strings.Repeat("long text ", 2*limit/10)})
	e2.runPoller(e2.poller(pollerOptions{maxMDN: limit}), e2.openTerm(1))
	waitFor(t, "the MDN decided", func() bool { return e2.pending() == 0 })
	if row := e2.inbox()[id]; row.State != postgres.InboxOrphan || !strings.Contains(row.Reason, fmt.Sprintf("over the %d bytes", limit)) {
		t.Errorf("valid MDN of %d bytes over a limit of %d = {state %q, reason %q}, want an orphan: too large", row.Size, limit, row.State, row.Reason)
	}
	if got := e2.message(m2.ID); got.Status != outbox.StatusAwaitingMDN {
		t.Errorf("message of the oversized MDN: %q, want awaiting-mdn", got.Status)
	}
}

// readCountingStore records the inbox rows whose body was read.
type readCountingStore struct {
	*postgres.Store
	mu  sync.Mutex
	ids map[int64]bool
}

func (r *readCountingStore) PendingInboxMDN(ctx context.Context, id int64) (postgres.PendingMDN, error) {
	r.mu.Lock()
	if r.ids == nil {
		r.ids = map[int64]bool{}
	}
	r.ids[id] = true
	r.mu.Unlock()
	return r.Store.PendingInboxMDN(ctx, id)
}

func (r *readCountingStore) read(id int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ids[id]
}

// heapStore measures the live heap when the poller looks up the messages
// of a batch (all its rows parsed) and when it applies the batch: what it
// holds of the batch's rows then.
type heapStore struct {
	*postgres.Store
	mu   sync.Mutex
	heap []uint64
}

// liveHeap is the heap in use after two collections (the second empties
// sync.Pool victim caches, where pgx keeps its buffers).
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

func (h *heapStore) measure() {
	live := liveHeap()
	h.mu.Lock()
	h.heap = append(h.heap, live)
	h.mu.Unlock()
}

func (h *heapStore) OutboundMessages(ctx context.Context, keys []postgres.MessageKey) (map[postgres.MessageKey]postgres.AwaitedMessage, error) {
	h.measure()
	return h.Store.OutboundMessages(ctx, keys)
}

func (h *heapStore) ApplyMDNs(ctx context.Context, f hub.Fence, outs []postgres.MDNOutcome) ([]postgres.AppliedMDN, error) {
	h.measure()
	return h.Store.ApplyMDNs(ctx, f, outs)
}

// TestPollerHoldsNoBatchOfBodies: a batch of large inbox rows (under the
// limit, so each is read and parsed) is judged one body at a time: when the
// batch is applied, the poller holds none of them. Before, a batch of
// bodies was read in one query and held until applied, which ran the
// leader out of memory (and the next leader, on the same rows).
func TestPollerHoldsNoBatchOfBodies(t *testing.T) {
	e := newEnv(t, envOptions{})
	const n, size = 6, 6 << 20
	for range n {
		e.storeRaw(signedPartner, "", reportHeader, bytes.Repeat([]byte("j"), size))
	}
	hs := &heapStore{Store: e.st}
	base := liveHeap()
	e.runPoller(e.poller(pollerOptions{store: hs, batch: n, maxMDN: 2 * size}), e.openTerm(1))
	waitFor(t, "every MDN decided", func() bool { return e.pending() == 0 })
	for _, r := range e.inbox() {
		if r.State != postgres.InboxOrphan || !strings.HasPrefix(r.Reason, "unparseable") {
			t.Errorf("junk MDN %d = {state %q, reason %q}, want an orphan, unparseable", r.ID, r.State, r.Reason)
		}
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if len(hs.heap) == 0 {
		t.Fatal("OutboundMessages and ApplyMDNs never called")
	}
	// About one body, with room: pgx keeps the read buffer of the last
	// large row on its connection (rounded up to a power of two, 8 MiB)
	// until that connection reads again. The whole batch is 36 MiB.
	for _, live := range hs.heap {
		if live > base+3*size {
			t.Errorf("live heap when judging or applying a batch of %d MDNs of %d bytes: %d bytes above the start, want under %d (about one body, not the batch)", n, size, live-base, 3*size)
		}
	}
}

// TestPollerOnlyAsyncMDNRequests: a posted MDN carrying the Message-ID
// of a message that asked for a synchronous MDN, or for none, decides
// nothing, also while the message is retried: it becomes an orphan saying
// why, and the outbox goes on sending the message. A message that asked
// for an async MDN is decided by it while retried (the partner evidently
// has it).
func TestPollerOnlyAsyncMDNRequests(t *testing.T) {
	const down = "http://127.0.0.1:1/as2" // connection refused: retried
	e := newEnv(t, envOptions{partners: []extraPartner{
		// Enough attempts that no message gives up (and fails) before
		// the test looks, however slow the machine.
		{id: "SYNC CORP", url: down, lines: []string{"sign: sha-256", "mdn: sync", "mdn_signed: true", "max_attempts: 1000000"}},
		{id: "NONE CORP", url: down, lines: []string{"sign: sha-256", "mdn: none", "max_attempts: 1000000"}},
		{id: "ASYNC DOWN", url: down, lines: []string{"sign: sha-256", "mdn: async", "mdn_signed: true", "max_attempts: 1000000"}},
	}})
	tests := []struct {
		partner string
		reason  string // "": decided by the first MDN
	}{
		{"SYNC CORP", "asked for no async MDN (mdn: sync)"},
		{"NONE CORP", "asked for no async MDN (mdn: none)"},
		{"ASYNC DOWN", ""},
	}
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: e.st, Config: e.cfg})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make([]hub.MessageInfo, len(tests))
	ids := make([][]int64, len(tests))
	for i, tt := range tests {
		m, err := q.Enqueue(context.Background(), outbox.Document{Partner: tt.partner, ContentType: "application/EDI-X12", Payload: []byte("ISA*retrying~")})
		if err != nil {
			t.Fatal(err)
		}
		msgs[i] = e.waitStatus(m.ID, outbox.StatusRetrying)
		for _, d := range []mdn.Disposition{mdn.Processed(), mdn.Errored(as2.DispositionDecryptionFailed)} {
			ids[i] = append(ids[i], e.storeMDN(mdnOpts{from: tt.partner, id: msgs[i].MessageID, mic: msgs[i].MIC, disp: d, signer: e.ids.A}))
		}
	}
	e.runPoller(e.poller(pollerOptions{}), e.openTerm(1))
	waitFor(t, "every MDN decided", func() bool { return e.pending() == 0 })
	inbox := e.inbox()
	for i, tt := range tests {
		t.Run(tt.partner, func(t *testing.T) {
			if tt.reason == "" {
				first, second := inbox[ids[i][0]], inbox[ids[i][1]]
				if m := e.message(msgs[i].ID); m.Status != "delivered" || first.State != postgres.InboxProcessed || second.State != postgres.InboxOrphan {
					t.Errorf("async message retried: status %q, MDNs %q and %q; want delivered by the first, the second an orphan", m.Status, first.State, second.State)
				}
				return
			}
			want := fmt.Sprintf("message %d %s", msgs[i].ID, tt.reason)
			for _, id := range ids[i] {
				if row := inbox[id]; row.State != postgres.InboxOrphan || row.Reason != want {
					t.Errorf("MDN %d for the message = {state %q, reason %q}, want an orphan: %q", id, row.State, row.Reason, want)
				}
			}
			if m := e.message(msgs[i].ID); m.Status != outbox.StatusRetrying || m.CompletedAt != nil {
				t.Errorf("message after a posted MDN: %q, want retrying still", m.Status)
			}
		})
	}
}

// TestPollerFinalMessage: an MDN for a message decided already (by an
// earlier MDN, in an earlier poll) is an orphan that names the final
// status: the poller's own check, before anything is judged; the
// database's guard, which stays behind it for MDNs of one batch, says
// only that the message no longer awaits an MDN.
func TestPollerFinalMessage(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := e.send(signedPartner)
	e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, mic: m.MIC, signer: e.ids.A})
	e.runPoller(e.poller(pollerOptions{}), e.openTerm(1))
	e.waitStatus(m.ID, "delivered")
	waitFor(t, "the first MDN decided", func() bool { return e.pending() == 0 })
	late := []int64{
		e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, mic: m.MIC, signer: e.ids.A}),
		e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, disp: mdn.Errored(as2.DispositionDecryptionFailed), signer: e.ids.A}),
	}
	waitFor(t, "the late MDNs decided", func() bool { return e.pending() == 0 })
	want := fmt.Sprintf("message %d is already final (delivered)", m.ID)
	inbox := e.inbox()
	for _, id := range late {
		if row := inbox[id]; row.State != postgres.InboxOrphan || row.Reason != want {
			t.Errorf("late MDN %d = {state %q, reason %q}, want an orphan: %q", id, row.State, row.Reason, want)
		}
	}
	if got := e.message(m.ID); got.Status != "delivered" || got.Error != "" {
		t.Errorf("message after late MDNs = {status %q, error %q}, want delivered", got.Status, got.Error)
	}
}

// TestPollerTwoMDNsOneMessage: a partner that retried its MDN post leaves
// two MDNs for one message in one batch; the first decides it, the second
// (negative) is an orphan.
func TestPollerTwoMDNsOneMessage(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := e.send(signedPartner)
	first := e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, mic: m.MIC, signer: e.ids.A})
	second := e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, disp: mdn.Errored(as2.DispositionDecryptionFailed), signer: e.ids.A})
	e.runPoller(e.poller(pollerOptions{}), e.openTerm(1))
	waitFor(t, "both MDNs decided", func() bool { return e.pending() == 0 })
	inbox := e.inbox()
	if got := e.message(m.ID); got.Status != "delivered" || inbox[first].State != postgres.InboxProcessed {
		t.Errorf("message %q, first MDN %q; want delivered by the first", got.Status, inbox[first].State)
	}
	if row := inbox[second]; row.State != postgres.InboxOrphan || !strings.Contains(row.Reason, "(delivered)") {
		t.Errorf("second MDN = {state %q, reason %q}, want an orphan naming the status delivered", row.State, row.Reason)
	}
}

// TestPollerAppliedLog: the log line of an applied MDN names the message
// (id and Message-ID) besides the inbox row.
func TestPollerAppliedLog(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := e.send(signedPartner)
	inboxID := e.storeMDN(mdnOpts{from: signedPartner, id: m.MessageID, mic: m.MIC, signer: e.ids.A})
	core, logs := observer.New(zap.InfoLevel)
	e.runPoller(e.poller(pollerOptions{log: zap.New(core)}), e.openTerm(1))
	e.waitStatus(m.ID, "delivered")
	var entries []observer.LoggedEntry
	waitFor(t, "the applied log line", func() bool {
		entries = logs.FilterMessage("async MDN applied").All()
		return len(entries) > 0
	})
	got := entries[0].ContextMap()
	want := map[string]any{"inbox_id": inboxID, "id": m.ID, "message_id": m.MessageID, "partner": signedPartner, "result": "delivered"}
	for k, v := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(v) {
			t.Errorf("async MDN applied: %s = %v, want %v (fields %v)", k, got[k], v, got)
		}
	}
}
