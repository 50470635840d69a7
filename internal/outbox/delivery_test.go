package outbox_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// testFolder is a test-only folder destination on the real filesystem:
// each write goes to a temporary file in the target's directory, renamed
// over the name once whole. fail, when set, is asked before each write
// (numbered from 1) and may fail it.
type testFolder struct {
	root string
	fail func(n int) error

	mu    sync.Mutex
	names []string // the name of every write asked for, failed or not
}

func newTestFolder(t *testing.T) *testFolder { return &testFolder{root: t.TempDir()} }

func (f *testFolder) Write(ctx context.Context, p connector.Put) error {
	f.mu.Lock()
	f.names = append(f.names, p.Name)
	n := len(f.names)
	f.mu.Unlock()
	if f.fail != nil {
		if err := f.fail(n); err != nil {
			return err
		}
	}
	target := filepath.Join(f.root, filepath.FromSlash(p.Name))
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(target), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, p.Body); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), target)
}

func (f *testFolder) Check(context.Context) error { return nil }
func (f *testFolder) Close() error                { return nil }

func (f *testFolder) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.names)
}

// files returns every file under the folder's root, by name, with its
// content.
func (f *testFolder) files(t *testing.T) map[string][]byte {
	t.Helper()
	got := map[string][]byte{}
	err := filepath.WalkDir(f.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(f.root, p)
		got[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// destinations are the test's destinations by name.
type destinations map[string]connector.Destination

func (d destinations) Destination(name string) (connector.Destination, connector.DeliverOptions, error) {
	if dest, ok := d[name]; ok {
		return dest, connector.DeliverOptions{}, nil
	}
	return nil, connector.DeliverOptions{}, fmt.Errorf("%w %q", outbox.ErrUnknownDestination, name)
}

// deliveryRig is a store, a dispatcher writing to dests and a deliveries
// forwarder routing every document from ACME to route.
type deliveryRig struct {
	st  *postgres.Store
	reg *prometheus.Registry
}

// startDeliveryRig starts the forwarder (after placing its cursor, as its
// first run does) and a dispatcher over store (st when nil: a wrapper
// may stand in for it).
func startDeliveryRig(t *testing.T, st *postgres.Store, store outbox.Store, dests destinations, maxAttempts int, to ...string) *deliveryRig {
	t.Helper()
	if _, err := st.ForwardDeliveries(context.Background(), postgres.DeliveryForward{Cursor: postgres.DeliveryCursor,
		Route: func(connector.Document) (string, []string) { return "", nil }}); err != nil {
		t.Fatal(err)
	}
	cfg := loadConfig(t, partnerYAML{id: "ACME", url: "http://127.0.0.1:1/as2"})
	o := dispatcherOpts(t, st, cfg, "replica-1")
	if store != nil {
		o.Store = store
	}
	reg := prometheus.NewRegistry()
	o.Metrics, o.Destinations, o.Lease = outbox.NewMetrics(reg, nil), dests, time.Second
	d, err := outbox.NewDispatcher(o)
	if err != nil {
		t.Fatal(err)
	}
	f, err := outbox.NewDeliveryForwarder(outbox.DeliveryForwarderOptions{
		Store: st, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), Interval: 20 * time.Millisecond,
		MaxAttempts: maxAttempts, Notify: d.Wake,
		Route: func(doc connector.Document) (string, []string) {
			if doc.Partner == "ACME" {
				return "acme-in", to
			}
			return "", nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = d.Run(ctx) })
	wg.Go(func() { _ = f.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &deliveryRig{st: st, reg: reg}
}

// receive stores a processed receipt from partner with payload, in
// pieces (streamed), and returns its id.
func receive(t *testing.T, st *postgres.Store, partner, msgID string, payload []byte) int64 {
	t.Helper()
	id, err := st.SaveInbound(context.Background(), &postgres.InboundMessage{
		Partner: partner, AS2From: partner, AS2To: "EDIHUB TEST", MessageID: "<" + msgID + ">", Status: postgres.InboundProcessed,
		ContentType: "application/edi-x12", Filename: "po.x12", PayloadSize: int64(len(payload)), MDNMode: "none",
		PayloadOpen: func() io.Reader { return bytes.NewReader(payload) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// waitDeliveries polls until message id has n deliveries, none pending.
func waitDeliveries(t *testing.T, st *postgres.Store, id int64, n int) postgres.Trace {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tr, err := st.MessageTrace(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		pending := slices.ContainsFunc(tr.Deliveries, func(d postgres.DeliveryInfo) bool { return d.Status == postgres.OutboxPending })
		if len(tr.Deliveries) == n && !pending {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %d deliveries %+v; want %d, none pending", id, tr.Deliveries, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// count is the value of edihub_delivery_attempts_total{destination,result}.
func count(t *testing.T, reg *prometheus.Registry, destination, result string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "edihub_delivery_attempts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["destination"] == destination && labels["result"] == result {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func randomPayload(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// deliveryLine is a delivery of a trace in short: destination, name,
// status, attempts.
func deliveryLine(d postgres.DeliveryInfo) string {
	return fmt.Sprintf("%s %s %s %d", d.Destination, d.Name, d.Status, d.Attempts)
}

func deliveryLines(tr postgres.Trace) []string {
	var l []string
	for _, d := range tr.Deliveries {
		l = append(l, deliveryLine(d))
	}
	slices.Sort(l)
	return l
}

// TestDeliveryFanOut: a received document routed to two folder
// destinations is written whole, once, to each, under the default name,
// streamed from its stored pieces; a document no route takes gets no
// delivery and stays readable through the store the API uses.
func TestDeliveryFanOut(t *testing.T) {
	st := pgtest.Store(t)
	a, b := newTestFolder(t), newTestFolder(t)
	rig := startDeliveryRig(t, st, nil, destinations{"a": a, "b": b}, 3, "a", "b")
	// The unrouted document first: once the routed one is delivered, the
	// forwarder has passed both.
	other := receive(t, st, "OTHER", "unrouted@other", []byte("ISA*unrouted~"))
	payload := randomPayload(t, 600<<10)
	id := receive(t, st, "ACME", "fan-out@acme", payload)

	tr := waitDeliveries(t, st, id, 2)
	m, err := st.Message(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("ACME/%s/none-fan-out@acme.edi", m.CreatedAt.UTC().Format("2006/01/02"))
	want := []string{"a " + name + " done 1", "b " + name + " done 1"}
	if got := deliveryLines(tr); !slices.Equal(got, want) {
		t.Errorf("deliveries = %q, want %q", got, want)
	}
	for dn, f := range map[string]*testFolder{"a": a, "b": b} {
		files := f.files(t)
		if len(files) != 1 || !bytes.Equal(files[name], payload) {
			t.Errorf("folder %s holds %d files (want 1: %s with the payload)", dn, len(files), name)
		}
		if c := count(t, rig.reg, dn, outbox.ResultDeliveryDone); c != 1 {
			t.Errorf("edihub_delivery_attempts_total{destination=%q,result=delivered} = %v, want 1", dn, c)
		}
	}
	var done []string
	for _, e := range tr.Events {
		if e.Type == postgres.EventDeliveryDone {
			done = append(done, string(e.Detail))
		}
	}
	if len(done) != 2 || !strings.Contains(done[0], name) {
		t.Errorf("delivery-done events = %q, want 2 naming %s", done, name)
	}

	trOther, err := st.MessageTrace(context.Background(), other)
	if err != nil || len(trOther.Deliveries) != 0 {
		t.Errorf("unrouted document deliveries = %+v, %v; want none", trOther.Deliveries, err)
	}
	var buf bytes.Buffer
	if _, err := st.WritePayload(context.Background(), other, func(hub.MessageInfo) io.Writer { return &buf }); err != nil || buf.String() != "ISA*unrouted~" {
		t.Errorf("unrouted payload = %q, %v; want it kept for the API", buf.String(), err)
	}
}

// TestDeliveryRetriesUnavailable: a destination unavailable twice is
// retried with the outbox's backoff under the same name, and holds one
// file once it recovers.
func TestDeliveryRetriesUnavailable(t *testing.T) {
	st := pgtest.Store(t)
	a := newTestFolder(t)
	a.fail = func(n int) error {
		if n <= 2 {
			return fmt.Errorf("%w: dial tcp: connection refused", connector.ErrUnavailable)
		}
		return nil
	}
	rig := startDeliveryRig(t, st, nil, destinations{"a": a}, 8, "a")
	id := receive(t, st, "ACME", "retry@acme", []byte("ISA*retry~"))
	tr := waitDeliveries(t, st, id, 1)
	d := tr.Deliveries[0]
	if d.Status != postgres.OutboxDone || d.Attempts != 3 {
		t.Errorf("delivery = %+v, want done at attempt 3", d)
	}
	asked := a.asked()
	if len(asked) != 3 || asked[0] != d.Name || asked[1] != d.Name || asked[2] != d.Name {
		t.Errorf("names written = %q, want %q three times", asked, d.Name)
	}
	if files := a.files(t); len(files) != 1 || string(files[d.Name]) != "ISA*retry~" {
		t.Errorf("folder = %v, want one file %s", files, d.Name)
	}
	if c := count(t, rig.reg, "a", outbox.ResultDeliveryRetry); c != 2 {
		t.Errorf("retries counted = %v, want 2", c)
	}
}

// lossyStore loses the answer of the first delivery's outcome: the
// dispatcher wrote the file, then its FinishOutbox never reached the
// database (a crash, a network cut), so the claim runs out.
type lossyStore struct {
	*postgres.Store
	mu   sync.Mutex
	lost bool
}

func (s *lossyStore) FinishOutbox(ctx context.Context, it postgres.OutboxItem, r postgres.OutboxResult) error {
	s.mu.Lock()
	lose := it.Kind == postgres.OutboxKindDelivery && !s.lost
	s.lost = s.lost || lose
	s.mu.Unlock()
	if lose {
		return errors.New("connection reset by peer")
	}
	return s.Store.FinishOutbox(ctx, it, r)
}

// TestDeliveryLostAnswer: a delivery written whose outcome was lost is
// written again when its claim expires, under the same name: the folder
// holds one file.
func TestDeliveryLostAnswer(t *testing.T) {
	st := pgtest.Store(t)
	a := newTestFolder(t)
	startDeliveryRig(t, st, &lossyStore{Store: st}, destinations{"a": a}, 8, "a")
	id := receive(t, st, "ACME", "lost@acme", []byte("ISA*lost~"))
	tr := waitDeliveries(t, st, id, 1)
	d := tr.Deliveries[0]
	if d.Status != postgres.OutboxDone || d.Attempts != 2 {
		t.Errorf("delivery = %+v, want done at attempt 2", d)
	}
	if asked := a.asked(); len(asked) != 2 || asked[0] != asked[1] || asked[0] != d.Name {
		t.Errorf("names written = %q, want %q twice", asked, d.Name)
	}
	if files := a.files(t); len(files) != 1 || string(files[d.Name]) != "ISA*lost~" {
		t.Errorf("folder = %v, want one file %s", files, d.Name)
	}
}

// TestDeliveryRefused: a destination that refuses is retried until the
// attempts run out, with an error that names it and says what to fix;
// the delivery then fails for good with a delivery-failed event.
func TestDeliveryRefused(t *testing.T) {
	st := pgtest.Store(t)
	a := newTestFolder(t)
	a.fail = func(int) error { return fmt.Errorf("%w: sftp: permission denied", connector.ErrRefused) }
	gone := destinations{"a": a}
	rig := startDeliveryRig(t, st, nil, gone, 2, "a", "removed")
	id := receive(t, st, "ACME", "refused@acme", []byte("ISA*refused~"))
	tr := waitDeliveries(t, st, id, 2)
	slices.SortFunc(tr.Deliveries, func(x, y postgres.DeliveryInfo) int { return strings.Compare(x.Destination, y.Destination) })
	tests := []struct {
		give postgres.DeliveryInfo
		want []string
	}{
		{tr.Deliveries[0], []string{`gave up after 2 attempts`, `destination "a" refused the document; fix its credentials`, "permission denied"}},
		{tr.Deliveries[1], []string{`gave up after 2 attempts`, `destination "removed" is not usable (define it in the connectors document`}},
	}
	for _, tt := range tests {
		if tt.give.Status != postgres.OutboxFailed || tt.give.Attempts != 2 {
			t.Errorf("delivery to %s = %+v, want failed after 2 attempts", tt.give.Destination, tt.give)
		}
		for _, w := range tt.want {
			if !strings.Contains(tt.give.LastError, w) {
				t.Errorf("delivery to %s: error %q, want it to say %q", tt.give.Destination, tt.give.LastError, w)
			}
		}
	}
	failed := 0
	for _, e := range tr.Events {
		if e.Type == postgres.EventDeliveryFailed {
			failed++
		}
	}
	if failed != 2 {
		t.Errorf("delivery-failed events = %d, want 2", failed)
	}
	if c, r := count(t, rig.reg, "a", outbox.ResultDeliveryFailed), count(t, rig.reg, "a", outbox.ResultDeliveryRetry); c != 1 || r != 1 {
		t.Errorf("destination a counted failed %v, retry %v; want 1 and 1", c, r)
	}
	if files := a.files(t); len(files) != 0 {
		t.Errorf("folder = %v, want nothing written", files)
	}
}

// TestDeliveriesWithoutDestinations: a dispatcher without destinations
// leaves deliveries alone (no attempt spent) while it sends what it can,
// and the backlog gauges count them per destination.
func TestDeliveriesWithoutDestinations(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	if _, err := st.ForwardDeliveries(ctx, postgres.DeliveryForward{Cursor: postgres.DeliveryCursor,
		Route: func(connector.Document) (string, []string) { return "", nil }}); err != nil {
		t.Fatal(err)
	}
	w1 := receive(t, st, "ACME", "w1@acme", []byte("1"))
	w2 := receive(t, st, "ACME", "w2@acme", []byte("2"))
	n := 0
	if _, err := st.ForwardDeliveries(ctx, postgres.DeliveryForward{Cursor: postgres.DeliveryCursor,
		Route: func(connector.Document) (string, []string) {
			n++
			if n == 1 {
				return "r", []string{"a", "b"}
			}
			return "r", []string{"a"}
		}}); err != nil {
		t.Fatal(err)
	}
	partner := newPartner(t, func(int, request) (int, http.Header, []byte) { return 200, nil, nil })
	cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL, extra: []string{"mdn: none"}})
	startDispatcher(t, dispatcherOpts(t, st, cfg, "no-destinations"))
	waitStatus(t, st, enqueue(t, st, cfg, partnerID, []byte("x"), "", "").ID, "sent")

	reg := prometheus.NewRegistry()
	reg.MustRegister(outbox.NewDeliveryBacklog(st.DeliveryBacklogs))
	want := `
# HELP edihub_delivery_backlog Deliveries of received documents waiting to be written, per destination (all replicas).
# TYPE edihub_delivery_backlog gauge
edihub_delivery_backlog{destination="a"} 2
edihub_delivery_backlog{destination="b"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "edihub_delivery_backlog"); err != nil {
		t.Error(err)
	}
	if c := testutil.CollectAndCount(reg, "edihub_delivery_oldest_seconds"); c != 2 {
		t.Errorf("oldest waiting series = %d, want 2", c)
	}
	if a := countAttempts(t, st, w1, w2); a != 0 {
		t.Errorf("attempts spent on deliveries = %d, want 0", a)
	}
}

// countAttempts sums the attempts of the deliveries of messages ids.
func countAttempts(t *testing.T, st *postgres.Store, ids ...int64) int {
	t.Helper()
	total := 0
	for _, id := range ids {
		tr, err := st.MessageTrace(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range tr.Deliveries {
			total += d.Attempts
		}
	}
	return total
}
