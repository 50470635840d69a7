package pickup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/pickup"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }

const (
	lease   = "edihub-leader"
	partner = "ACME"
)

// rig is a migrated database with a term open, a queue for partner ACME
// and a connection to look at the rows.
type rig struct {
	st    *postgres.Store
	db    *pgx.Conn
	queue *outbox.Queue
	fence hub.Fence
}

func newHub(t *testing.T) *rig {
	t.Helper()
	u := pgtest.URL(t)
	st, err := postgres.Open(context.Background(), u, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	f := hub.Fence{Lease: lease, Token: 1}
	if err := st.OpenTerm(context.Background(), f, "replica-a"); err != nil {
		t.Fatal(err)
	}
	pu, _ := url.Parse("http://127.0.0.1:1/as2")
	cfg := &config.File{Station: config.Station{AS2ID: "EDIHUB"}, Partners: []config.Partner{
		{AS2ID: partner, URL: pu, MDN: config.MDNSync, MaxAttempts: 3},
	}}
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: st, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{st: st, db: pgtest.Conn(t, u), queue: q, fence: f}
}

// newTerm opens the next term, as a successor leader does.
func (h *rig) newTerm(t *testing.T, holder string) hub.Fence {
	t.Helper()
	f := hub.Fence{Lease: lease, Token: h.fence.Token + 1}
	if err := h.st.OpenTerm(context.Background(), f, holder); err != nil {
		t.Fatal(err)
	}
	h.fence = f
	return f
}

type pollerOpts struct {
	stable   pickup.Stability
	maxFiles int
	maxSize  int64
	route    func(string) (pickup.Route, bool)
	receiver func(edi.Party) (string, bool)
	now      func() time.Time
	logger   *zap.Logger
}

func (h *rig) poller(t *testing.T, src connector.Source, o pollerOpts) (*pickup.Poller, *prometheus.Registry) {
	t.Helper()
	route := o.route
	if route == nil {
		route = func(string) (pickup.Route, bool) { return pickup.Route{Name: "to-acme", Partner: partner}, true }
	}
	log := o.logger
	if log == nil {
		log = zap.NewNop()
	}
	reg := prometheus.NewRegistry()
	p, err := pickup.NewPoller(pickup.Options{
		Store: h.st,
		Sources: func() []pickup.SourceSpec {
			return []pickup.SourceSpec{{Name: "erp-outbox", Source: src, Stable: o.stable, Route: route}}
		},
		Outbound:          h.queue.Outbound,
		PartnerByReceiver: o.receiver,
		MaxFiles:          o.maxFiles,
		MaxSize:           o.maxSize,
		Now:               o.now,
		Logger:            log,
		Registerer:        reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p, reg
}

// sent are the outbound messages queued, with their payloads.
type sentMessage struct {
	id       int64
	partner  string
	filename string
	payload  []byte
	outbox   int
}

func (h *rig) sent(t *testing.T) []sentMessage {
	t.Helper()
	rows, err := h.db.Query(context.Background(), `
SELECT m.id, m.partner, m.filename,
       CASE WHEN p.chunked THEN coalesce((SELECT string_agg(c.data, ''::bytea ORDER BY c.seq) FROM payload_chunks c WHERE c.message_id = m.id), ''::bytea) ELSE p.data END,
       (SELECT count(*) FROM outbox o WHERE o.message_id = m.id AND o.kind = 'message')
  FROM messages m JOIN payloads p ON p.message_id = m.id
 WHERE m.direction = 'outbound' ORDER BY m.id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (sentMessage, error) {
		var s sentMessage
		err := r.Scan(&s.id, &s.partner, &s.filename, &s.payload, &s.outbox)
		return s, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// messageRows counts every messages row, whatever its state.
func (h *rig) messageRows(t *testing.T) int {
	t.Helper()
	var n int
	if err := h.db.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM payload_chunks)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (h *rig) claims(t *testing.T) []postgres.PickupClaim {
	t.Helper()
	rows, err := h.db.Query(context.Background(), `SELECT id, path, state, coalesce(message, 0), fence_token FROM pickup_claims ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (postgres.PickupClaim, error) {
		var c postgres.PickupClaim
		err := r.Scan(&c.ID, &c.Path, &c.State, &c.Message, &c.Fence)
		return c, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func poll(t *testing.T, p *pickup.Poller, f hub.Fence) {
	t.Helper()
	if err := p.Poll(context.Background(), f); err != nil {
		t.Fatalf("Poll(%s) = %v, want nil", f, err)
	}
}

var t0 = time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)

// TestPickupExactlyOnce: a stable file becomes one outbound message with
// its bytes, its claim is archived and the file moved to the archive;
// more polls send nothing more.
func TestPickupExactlyOnce(t *testing.T) {
	h := newHub(t)
	src := newTestDirSource(t)
	body := bytes.Repeat([]byte("ORDER 4711\n"), 200_000) // 2.2 MB: stored in pieces
	src.write(t, "acme/order-1.txt", body, t0)
	p, _ := h.poller(t, src, pollerOpts{})

	poll(t, p, h.fence)
	if got := h.sent(t); len(got) != 0 {
		t.Fatalf("after the first poll, %d messages queued, want 0 (a file is stable at the second poll)", len(got))
	}
	for range 3 {
		poll(t, p, h.fence)
	}
	got := h.sent(t)
	if len(got) != 1 {
		t.Fatalf("after four polls, %d messages queued, want 1", len(got))
	}
	m := got[0]
	if m.partner != partner || m.filename != "order-1.txt" || !bytes.Equal(m.payload, body) || m.outbox != 1 {
		t.Errorf("message = partner %q filename %q, %d payload bytes (equal %v), %d outbox rows; want %q, order-1.txt, the file's %d bytes, 1 row",
			m.partner, m.filename, len(m.payload), bytes.Equal(m.payload, body), m.outbox, partner, len(body))
	}
	cs := h.claims(t)
	if len(cs) != 1 || cs[0].State != postgres.PickupArchived || cs[0].Message != m.id || cs[0].Fence != h.fence.Token {
		t.Fatalf("claims = %+v, want one archived claim of message %d under token %d", cs, m.id, h.fence.Token)
	}
	archived := "archive/acme/" + itoa(cs[0].ID) + "-order-1.txt"
	if src.exists("acme/order-1.txt") || !src.exists(archived) {
		t.Errorf("file at source %v, in archive %s %v; want moved to the archive", src.exists("acme/order-1.txt"), archived, src.exists(archived))
	}
}

// TestPickupUnstableFileWaits: a file whose size changes between polls
// is not taken; once unchanged across two polls it is, with its last
// bytes.
func TestPickupUnstableFileWaits(t *testing.T) {
	h := newHub(t)
	src := newTestDirSource(t)
	p, _ := h.poller(t, src, pollerOpts{})
	body := []byte("UNB+UNOC:3+EDIHUB+ACME")
	for i := range 4 {
		body = append(body, "+more"...)
		src.write(t, "growing.edi", body, t0) // same time, growing size
		poll(t, p, h.fence)
		if got := h.sent(t); len(got) != 0 {
			t.Fatalf("poll %d while the file grows: %d messages, want 0", i+1, len(got))
		}
	}
	poll(t, p, h.fence) // unchanged since the last poll
	if got := h.sent(t); len(got) != 1 || !bytes.Equal(got[0].payload, body) {
		t.Fatalf("after a poll with the file unchanged: %d messages, want 1 with the last bytes", len(got))
	}
}

// TestPickupFencedOutLeaderEnqueuesNothing: a leader paused in the middle
// of copying a file, overtaken by a successor that takes the same file,
// commits nothing when it resumes; the successor's term opened without
// waiting for the copy.
func TestPickupFencedOutLeaderEnqueuesNothing(t *testing.T) {
	h := newHub(t)
	src := newFakeSource()
	body := bytes.Repeat([]byte("x"), 1<<20)
	src.put("big.bin", body, t0)
	old := h.fence
	pOld, _ := h.poller(t, src, pollerOpts{})
	poll(t, pOld, old) // seen once

	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // before the store closes, should the test fail early
	src.hold, src.started = hold, make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- pOld.Poll(context.Background(), old) }()
	<-src.started // the old leader is copying, inside its transaction

	// A successor opens its term (this would wait if the copy held the
	// fence row) and takes the file.
	src.mu.Lock()
	src.hold = nil // the successor's reads are not held
	src.mu.Unlock()
	next := h.newTerm(t, "replica-b")
	pNew, _ := h.poller(t, src, pollerOpts{})
	poll(t, pNew, next)
	poll(t, pNew, next)
	if got := h.sent(t); len(got) != 1 {
		t.Fatalf("successor queued %d messages, want 1", len(got))
	}

	release()
	if err := <-done; !errors.Is(err, hub.ErrStaleFence) {
		t.Fatalf("old leader's Poll = %v, want ErrStaleFence", err)
	}
	got := h.sent(t)
	if len(got) != 1 {
		t.Fatalf("%d messages after the old leader resumed, want 1 (the successor's)", len(got))
	}
	cs := h.claims(t)
	if len(cs) != 1 || cs[0].Fence != next.Token {
		t.Errorf("claims = %+v, want one, by token %d", cs, next.Token)
	}
}

// TestPickupSuccessorArchivesWithoutSending: the file's message is
// committed but the archive fails (the leader died, the source refused);
// the next leader archives it and sends nothing again.
func TestPickupSuccessorArchivesWithoutSending(t *testing.T) {
	h := newHub(t)
	src := newFakeSource()
	src.put("po.txt", []byte("purchase order"), t0)
	src.archiveErr = connector.ErrUnavailable
	p1, reg1 := h.poller(t, src, pollerOpts{})
	poll(t, p1, h.fence)
	if err := p1.Poll(context.Background(), h.fence); !errors.Is(err, connector.ErrUnavailable) {
		t.Fatalf("Poll with a failing archive = %v, want the source's ErrUnavailable", err)
	}
	if cs := h.claims(t); len(cs) != 1 || cs[0].State != postgres.PickupEnqueued {
		t.Fatalf("claims = %+v, want one still enqueued", cs)
	}
	if n := value(t, reg1, "edihub_pickup_errors_total", map[string]string{"source": "erp-outbox", "stage": "archive"}); n != 1 {
		t.Errorf("archive errors = %v, want 1", n)
	}

	src.mu.Lock()
	src.archiveErr = nil
	src.mu.Unlock()
	next := h.newTerm(t, "replica-b")
	p2, _ := h.poller(t, src, pollerOpts{})
	poll(t, p2, next)
	poll(t, p2, next)
	if got := h.sent(t); len(got) != 1 {
		t.Fatalf("%d messages after the successor's polls, want 1", len(got))
	}
	cs := h.claims(t)
	if len(cs) != 1 || cs[0].State != postgres.PickupArchived {
		t.Fatalf("claims = %+v, want one archived", cs)
	}
	if len(src.archived) != 1 || src.archived[0] != "po.txt -> archive/"+itoa(cs[0].ID)+"-po.txt" {
		t.Errorf("archived = %q, want po.txt moved once to archive/%d-po.txt", src.archived, cs[0].ID)
	}
}

// TestPickupSameVersionNotTakenTwice: a file put back with the same
// size and time after it was sent is left where it is, counted as a
// duplicate once.
func TestPickupSameVersionNotTakenTwice(t *testing.T) {
	h := newHub(t)
	src := newTestDirSource(t)
	core, logs := observer.New(zap.WarnLevel)
	p, reg := h.poller(t, src, pollerOpts{logger: zap.New(core)})
	src.write(t, "inv.txt", []byte("invoice 1"), t0)
	poll(t, p, h.fence)
	poll(t, p, h.fence)
	src.write(t, "inv.txt", []byte("invoice 1"), t0) // the same version again
	for range 3 {
		poll(t, p, h.fence)
	}
	if got := h.sent(t); len(got) != 1 {
		t.Fatalf("%d messages, want 1", len(got))
	}
	if !src.exists("inv.txt") {
		t.Error("the repeated file was moved; want it left where it is")
	}
	if n := value(t, reg, "edihub_pickup_files_total", map[string]string{"source": "erp-outbox", "result": pickup.ResultDuplicate}); n != 1 {
		t.Errorf("duplicates counted = %v, want 1", n)
	}
	if n := logs.FilterMessageSnippet("already sent").Len(); n != 1 {
		t.Errorf("duplicate logged %d times, want once", n)
	}
	// A new version of the same name is a new document.
	src.write(t, "inv.txt", []byte("invoice 2"), t0.Add(time.Minute))
	poll(t, p, h.fence)
	poll(t, p, h.fence)
	if got := h.sent(t); len(got) != 2 || string(got[1].payload) != "invoice 2" {
		t.Fatalf("after a new version: %d messages, want 2, the second with the new bytes", len(got))
	}
}

// TestPickupCancelStopsCopy: cancelling the context (leadership lost)
// in the middle of a copy stops it before the file's end and stores
// nothing.
func TestPickupCancelStopsCopy(t *testing.T) {
	h := newHub(t)
	src := newFakeSource()
	src.put("huge.bin", bytes.Repeat([]byte("y"), 16<<20), t0)
	p, _ := h.poller(t, src, pollerOpts{maxSize: 1 << 30})
	poll(t, p, h.fence)

	var read atomic.Int64
	src.hold, src.started = make(chan struct{}), make(chan struct{})
	src.counter = &read
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Poll(ctx, h.fence) }()
	<-src.started
	cancel()
	close(src.hold)
	<-done
	if n := read.Load(); n >= 16<<20 {
		t.Errorf("read %d bytes after the cancel, want fewer than the file's %d", n, 16<<20)
	}
	if n := h.messageRows(t); n != 0 {
		t.Errorf("%d message and payload rows stored, want 0", n)
	}
	if cs := h.claims(t); len(cs) != 0 {
		t.Errorf("claims = %+v, want none", cs)
	}
}

// TestPickupMarker: in marker mode a file is taken once NAME.done
// exists, at the first poll, and the marker is archived with it.
func TestPickupMarker(t *testing.T) {
	h := newHub(t)
	src := newTestDirSource(t)
	p, _ := h.poller(t, src, pollerOpts{stable: pickup.StableMarker})
	src.write(t, "asn.txt", []byte("ship notice"), t0)
	poll(t, p, h.fence)
	poll(t, p, h.fence)
	if got := h.sent(t); len(got) != 0 {
		t.Fatalf("without a marker: %d messages, want 0", len(got))
	}
	src.write(t, "asn.txt.done", nil, t0)
	poll(t, p, h.fence)
	if got := h.sent(t); len(got) != 1 {
		t.Fatalf("with the marker: %d messages, want 1", len(got))
	}
	id := itoa(h.claims(t)[0].ID)
	for name, want := range map[string]bool{"asn.txt": false, "asn.txt.done": false, "archive/" + id + "-asn.txt": true, "archive/" + id + "-asn.txt.done": true} {
		if got := src.exists(name); got != want {
			t.Errorf("%s exists = %v, want %v", name, got, want)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// value is the value of the series name{labels} in reg; 0 when absent.
func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

// TestPickupLeavesRefusedFiles: a file no route takes, one larger than
// the limit and one whose interchange receiver names no partner stay
// where they are, each logged and counted once however many polls see
// it; a route without a partner sends an interchange to the partner of
// its receiver ID.
func TestPickupLeavesRefusedFiles(t *testing.T) {
	const isa = "ISA*00*          *00*          *ZZ*EDIHUB         *ZZ*%-15s*261202*0405*U*00401*000000101*0*P*>~" +
		"GS*PO*EDIHUB*X*20261202*0405*101*X*004010~ST*850*0001~BEG*00*SA*PO1**20261202~SE*3*0001~GE*1*101~IEA*1*000000101~"
	h := newHub(t)
	src := newTestDirSource(t)
	core, logs := observer.New(zap.WarnLevel)
	p, reg := h.poller(t, src, pollerOpts{
		maxSize: 1000,
		route: func(path string) (pickup.Route, bool) {
			switch {
			case strings.HasPrefix(path, "acme/"):
				return pickup.Route{Name: "acme", Partner: partner}, true
			case strings.HasPrefix(path, "edi/"):
				return pickup.Route{Name: "by-receiver"}, true
			}
			return pickup.Route{}, false
		},
		receiver: func(p edi.Party) (string, bool) { return partner, p.Qualifier == "ZZ" && p.ID == "ACMEEDI" },
		logger:   zap.New(core),
	})
	src.write(t, "other/x.txt", []byte("nobody's"), t0)
	src.write(t, "acme/big.txt", bytes.Repeat([]byte("z"), 1001), t0)
	src.write(t, "edi/unknown.x12", fmt.Appendf(nil, isa, "NOBODY"), t0)
	src.write(t, "edi/acme.x12", fmt.Appendf(nil, isa, "ACMEEDI"), t0)
	for range 4 {
		poll(t, p, h.fence)
	}
	got := h.sent(t)
	if len(got) != 1 || got[0].partner != partner || got[0].filename != "acme.x12" {
		t.Fatalf("sent = %+v, want acme.x12 only, to %s", got, partner)
	}
	for _, name := range []string{"other/x.txt", "acme/big.txt", "edi/unknown.x12"} {
		if !src.exists(name) {
			t.Errorf("%s was moved; want it left where it is", name)
		}
	}
	for result, want := range map[string]float64{pickup.ResultUnrouted: 2, pickup.ResultTooLarge: 1, pickup.ResultEnqueued: 1, pickup.ResultArchived: 1} {
		if n := value(t, reg, "edihub_pickup_files_total", map[string]string{"source": "erp-outbox", "result": result}); n != want {
			t.Errorf("files_total{result=%q} = %v, want %v", result, n, want)
		}
	}
	if n := logs.FilterMessage("file left where it is").Len(); n != 3 {
		t.Errorf("refusals logged %d times over four polls, want 3 (once per file)", n)
	}
	if n := logs.FilterFieldKey("reason").FilterMessageSnippet("left").Filter(func(e observer.LoggedEntry) bool {
		return strings.Contains(e.ContextMap()["reason"].(string), `receiver ID "NOBODY"`)
	}).Len(); n != 1 {
		t.Errorf("no log names the unknown receiver ID NOBODY")
	}
}

// TestPickupBoundAndGauges: one poll takes at most MaxFiles files; the
// rest are the backlog, whose oldest file's age is exported.
func TestPickupBoundAndGauges(t *testing.T) {
	h := newHub(t)
	src := newTestDirSource(t)
	now := t0.Add(time.Hour)
	p, reg := h.poller(t, src, pollerOpts{maxFiles: 2, now: func() time.Time { return now }})
	for i := range 5 {
		src.write(t, fmt.Sprintf("f%d.txt", i), []byte{'a' + byte(i)}, t0.Add(time.Duration(i)*time.Minute))
	}
	gauge := func(name string) float64 {
		return value(t, reg, name, map[string]string{"source": "erp-outbox"})
	}
	poll(t, p, h.fence)
	if b, o := gauge("edihub_pickup_backlog_files"), gauge("edihub_pickup_oldest_waiting_seconds"); b != 5 || o != 3600 {
		t.Errorf("after the first poll: backlog %v, oldest %vs; want 5 and 3600", b, o)
	}
	poll(t, p, h.fence)
	got := h.sent(t)
	if len(got) != 2 || string(got[0].payload) != "a" || string(got[1].payload) != "b" {
		t.Fatalf("second poll sent %d messages, want 2, the oldest files first", len(got))
	}
	// The two oldest were taken: f2 (written at t0+2m) waits longest.
	if b, o := gauge("edihub_pickup_backlog_files"), gauge("edihub_pickup_oldest_waiting_seconds"); b != 3 || o != 3480 {
		t.Errorf("after the second poll: backlog %v, oldest %vs; want 3 and 3480", b, o)
	}
	poll(t, p, h.fence)
	poll(t, p, h.fence)
	if got := h.sent(t); len(got) != 5 {
		t.Fatalf("after four polls %d messages, want 5", len(got))
	}
	if b, o := gauge("edihub_pickup_backlog_files"), gauge("edihub_pickup_oldest_waiting_seconds"); b != 0 || o != 0 {
		t.Errorf("with nothing left: backlog %v, oldest %vs; want 0 and 0", b, o)
	}
	if n := gauge("edihub_pickup_last_list_timestamp_seconds"); n != float64(now.Unix()) {
		t.Errorf("last list = %v, want %d", n, now.Unix())
	}
}

// TestPollerRun: as a leader-gated worker the poller idles without
// sources, picks files up at its ticks, and returns nil when its term
// ends, dropping its gauges.
func TestPollerRun(t *testing.T) {
	h := newHub(t)
	src := newTestDirSource(t)
	var sources atomic.Bool
	reg := prometheus.NewRegistry()
	notified := make(chan struct{}, 10)
	p, err := pickup.NewPoller(pickup.Options{
		Store: h.st,
		Sources: func() []pickup.SourceSpec {
			if !sources.Load() {
				return nil
			}
			return []pickup.SourceSpec{{Name: "s", Source: src, Poll: time.Millisecond,
				Route: func(string) (pickup.Route, bool) { return pickup.Route{Partner: partner}, true }}}
		},
		Outbound: h.queue.Outbound, Notify: func() { notified <- struct{}{} },
		Tick: time.Millisecond, Logger: zap.NewNop(), Registerer: reg,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background()); err == nil {
		t.Fatal("Run without a fence = nil, want an error")
	}
	ctx, cancel := context.WithCancel(leader.WithFence(context.Background(), h.fence))
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	src.write(t, "a.txt", []byte("hello"), t0)
	sources.Store(true)
	<-notified // the file was queued
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after its term ended = %v, want nil", err)
	}
	if got := h.sent(t); len(got) != 1 {
		t.Errorf("%d messages, want 1", len(got))
	}
	if n := value(t, reg, "edihub_pickup_last_list_timestamp_seconds", nil); n != 0 {
		t.Errorf("gauge left after the term = %v, want dropped", n)
	}
}
