package interchange_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/interchange"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const po = "ISA*00*          *00*          *ZZ*ACME           *ZZ*EDIHUB         *261202*0405*U*00401*000000123*0*P*>~" +
	"GS*PO*ACME*EDIHUB*20261202*0405*55*X*004010~ST*850*0001~BEG*00*SA*PO1**20261202~SE*3*0001~GE*1*55~IEA*1*000000123~"

// fakeStore is the Tracker's and the Watcher's storage.
type fakeStore struct {
	mu      sync.Mutex
	dups    []postgres.Duplicate
	due     []postgres.DueAck
	flagged map[int64]bool
	stale   bool
}

func (f *fakeStore) FindDuplicateInterchanges(context.Context, string, *edi.Document, time.Duration) ([]postgres.Duplicate, error) {
	return f.dups, nil
}

func (f *fakeStore) OverdueAcks(context.Context, int) ([]postgres.DueAck, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []postgres.DueAck
	for _, d := range f.due {
		if !f.flagged[d.Interchange] {
			out = append(out, d)
		}
	}
	return out, nil
}

func (f *fakeStore) FlagOverdueAcks(_ context.Context, _ hub.Fence, ids []int64) ([]postgres.DueAck, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stale {
		return nil, hub.ErrStaleFence
	}
	var out []postgres.DueAck
	for _, d := range f.due {
		for _, id := range ids {
			if id == d.Interchange && !f.flagged[id] {
				f.flagged[id] = true
				out = append(out, d)
			}
		}
	}
	return out, nil
}

func (f *fakeStore) OverdueAckCounts(context.Context) (map[string]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, d := range f.due {
		if f.flagged[d.Interchange] {
			out[d.Partner]++
		}
	}
	return out, nil
}

// fakeAcker makes acknowledgement messages and counts the wakeups.
type fakeAcker struct{ notified int }

func (a *fakeAcker) AckOutbound(partner, contentType string, build outbox.AckBuilder) (postgres.AckBuilder, error) {
	return func(control int64) (postgres.NewOutbound, error) {
		b, err := build(control)
		return postgres.NewOutbound{Partner: partner, ContentType: contentType, Payload: b}, err
	}, nil
}

func (a *fakeAcker) Notify() { a.notified++ }

// save does what SaveInbound does with in.Save: it builds each
// acknowledgement with the next control number (1, 2, …) and returns
// their documents.
func save(t *testing.T, in interchange.Inspection) []string {
	t.Helper()
	if in.Save == nil {
		return nil
	}
	var docs []string
	for i, build := range in.Save.Acks {
		m, err := build(int64(i + 1))
		if err != nil {
			t.Fatalf("building acknowledgement %d: %v", i+1, err)
		}
		docs = append(docs, string(m.Payload))
		in.Save.Queued = append(in.Save.Queued, postgres.Enqueued{ID: int64(i + 1)})
	}
	return docs
}

func newTracker(t *testing.T, st *fakeStore, a *fakeAcker, reg prometheus.Registerer) *interchange.Tracker {
	t.Helper()
	tr, err := interchange.NewTracker(interchange.Options{Store: st, Acker: a, Logger: zap.NewNop(), Registerer: reg,
		Now: func() time.Time { return time.Date(2026, 12, 2, 4, 5, 0, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func partner(e config.EDISettings) *config.Partner {
	return &config.Partner{AS2ID: "ACME", EDI: e}
}

func TestTrackerAcknowledges(t *testing.T) {
	tests := []struct {
		name     string
		settings config.EDISettings
		payload  string
		wantAcks []string // set types of each queued acknowledgement
	}{
		{"acks off", config.EDISettings{X12Ack: "997"}, po, nil},
		{"997", config.EDISettings{Acks: true, X12Ack: "997"}, po, []string{"997"}},
		{"999", config.EDISettings{Acks: true, X12Ack: "999"}, po, []string{"999"}},
		{"unknown kind", config.EDISettings{Acks: true, X12Ack: "998"}, po, nil},
		{"not EDI", config.EDISettings{Acks: true, X12Ack: "997"}, "<?xml version=\"1.0\"?><a/>", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, a := &fakeStore{}, &fakeAcker{}
			reg := prometheus.NewRegistry()
			tr := newTracker(t, st, a, reg)
			p := partner(tt.settings)
			in := tr.Inspect(context.Background(), p, strings.NewReader(tt.payload))
			docs := save(t, in)
			tr.Received(p, 1, in)
			var got []string
			for _, d := range docs {
				doc, err := edi.Parse(strings.NewReader(d), edi.Limits{})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, doc.Interchanges[0].Groups[0].Sets[0].Type)
				if doc.Interchanges[0].Receiver.ID != "ACME" || doc.Interchanges[0].ControlNumber != "000000001" {
					t.Errorf("acknowledgement %q: want it addressed to ACME with control number 000000001 from the counter", d)
				}
			}
			if !cmp.Equal(got, tt.wantAcks) {
				t.Errorf("acknowledgements queued = %v, want %v", got, tt.wantAcks)
			}
			if wantNotified := min(len(tt.wantAcks), 1); a.notified != wantNotified {
				t.Errorf("dispatcher woken %d times, want %d", a.notified, wantNotified)
			}
			if sent := sentAcks(t, reg); sent != float64(len(tt.wantAcks)) {
				t.Errorf(`edihub_edi_acks_total{direction="sent",status="accepted"} = %v, want %d`, sent, len(tt.wantAcks))
			}
			wantRec := tt.payload == po
			if (in.Save != nil) != wantRec || wantRec && (in.Save.Record.Doc != in.Doc || in.Save.Record.Direction != "inbound") {
				t.Errorf("Inspect.Save = %+v, want the inbound envelope stored: %v", in.Save, wantRec)
			}
		})
	}
}

// sentAcks is edihub_edi_acks_total{partner="ACME",direction="sent",status="accepted"}
// in reg, 0 when the series does not exist.
func sentAcks(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"partner": "ACME", "direction": "sent", "status": "accepted"}
	for _, mf := range mfs {
		if mf.GetName() != "edihub_edi_acks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if cmp.Equal(got, want) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestTrackerDuplicates: a duplicate is refused only when the profile says
// refuse; a refused one is recorded as refused, neither settles nor is
// acknowledged.
func TestTrackerDuplicates(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		st := &fakeStore{dups: []postgres.Duplicate{{ControlNumber: "000000123", First: 7}}}
		a := &fakeAcker{}
		tr := newTracker(t, st, a, prometheus.NewRegistry())
		p := partner(config.EDISettings{Acks: true, X12Ack: "997", RefuseDuplicates: refuse, DuplicateWindow: time.Hour})
		in := tr.Inspect(context.Background(), p, strings.NewReader(po))
		if in.Refuse != refuse || refuse && !strings.Contains(in.Reason, "000000123") {
			t.Errorf("refuse %v: Inspect = %+v", refuse, in)
		}
		if in.Save == nil || in.Save.Record.Refused != refuse || in.Save.Record.DuplicateWindow != time.Hour {
			t.Fatalf("refuse %v: Inspect.Save = %+v, want the envelope recorded (refused %v) with the partner's window", refuse, in.Save, refuse)
		}
		if docs := save(t, in); (len(docs) == 0) != refuse {
			t.Errorf("refuse %v: %d acknowledgements queued", refuse, len(docs))
		}
		tr.Received(p, 2, in)
	}
}

// TestTrackerSettles: an inbound 997 is to settle what we sent and is
// never acknowledged itself.
func TestTrackerSettles(t *testing.T) {
	doc, _ := edi.Parse(strings.NewReader(po), edi.Limits{})
	ack, _ := edi.Acknowledge(edi.AckRequest{Interchange: &doc.Interchanges[0], Standard: edi.X12, Kind: edi.Ack997, Control: 5, Now: time.Now()})
	st, a := &fakeStore{}, &fakeAcker{}
	tr := newTracker(t, st, a, prometheus.NewRegistry())
	p := partner(config.EDISettings{Acks: true, X12Ack: "997"})
	in := tr.Inspect(context.Background(), p, bytes.NewReader(ack.Document))
	if in.Save == nil || len(in.Save.Reports) != 1 || in.Save.Reports[0].Kind != "997" {
		t.Fatalf("Inspect.Save = %+v, want one 997 report", in.Save)
	}
	if docs := save(t, in); len(docs) != 0 {
		t.Errorf("an acknowledgement was acknowledged: %q", docs)
	}
}

// TestWatcher flags each overdue interchange once, sets the gauge, and
// stops on a stale fence.
func TestWatcher(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st := &fakeStore{flagged: map[int64]bool{}, due: []postgres.DueAck{{Interchange: 1, Partner: "ACME"}, {Interchange: 2, Partner: "ACME"}, {Interchange: 3, Partner: "BETA"}}}
		reg := prometheus.NewRegistry()
		w, err := interchange.NewWatcher(interchange.WatcherOptions{Store: st, Logger: zap.NewNop(), Registerer: reg, Interval: time.Hour, Batch: 2})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(leader.WithFence(context.Background(), hub.Fence{Lease: "l", Token: 1}))
		done := make(chan error, 1)
		go func() { done <- w.Run(ctx) }()
		// Once Run waits out its interval (synctest's clock: an hour that
		// never passes here), the first cycle has flagged all it found.
		synctest.Wait()
		if n := testutil.CollectAndCount(reg, "edihub_ack_overdue"); n != 2 {
			t.Errorf("edihub_ack_overdue has %d series after the first cycle, want 2 (ACME, BETA)", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v, want nil when the term ends", err)
		}
		if len(st.flagged) != 3 {
			t.Errorf("flagged %v, want all three", st.flagged)
		}
		want := "edihub_ack_overdue_flagged_total"
		if got := testutil.CollectAndCount(reg, want); got != 2 {
			t.Errorf("%s has %d series, want 2 (ACME, BETA)", want, got)
		}
		st.stale = true
		st.flagged = map[int64]bool{}
		err = w.Run(leader.WithFence(context.Background(), hub.Fence{Lease: "l", Token: 1}))
		if !errors.Is(err, hub.ErrStaleFence) {
			t.Errorf("Run with a stale fence = %v, want ErrStaleFence", err)
		}
	})
}

// TestTrackerTA1NotAcknowledged: an interchange without groups (a TA1
// only: an interchange acknowledgement) is never answered with a 997 or
// 999, even when the profile asks for acknowledgements.
func TestTrackerTA1NotAcknowledged(t *testing.T) {
	const ta1 = "ISA*00*          *00*          *ZZ*ACME           *ZZ*EDIHUB         *261202*0406*U*00401*000000124*0*P*>~" +
		"TA1*000000777*261202*0405*A*000~IEA*0*000000124~"
	for _, kind := range []string{"997", "999"} {
		st, a := &fakeStore{}, &fakeAcker{}
		tr := newTracker(t, st, a, prometheus.NewRegistry())
		p := partner(config.EDISettings{Acks: true, X12Ack: kind})
		in := tr.Inspect(context.Background(), p, strings.NewReader(ta1))
		if in.Save == nil || len(in.Save.Reports) != 1 || in.Save.Reports[0].Kind != "TA1" {
			t.Fatalf("%s: Inspect.Save = %+v, want the TA1 reported", kind, in.Save)
		}
		docs := save(t, in)
		tr.Received(p, 1, in)
		if len(docs) != 0 || a.notified != 0 {
			t.Errorf("%s: acknowledgements queued for a TA1 = %q (dispatcher woken %d times), want none", kind, docs, a.notified)
		}
	}
}

// stuckStore is a WatchStore whose overdue interchanges can never be
// flagged (acknowledged between the read and the write, or flagged by
// another term): every read returns the same full batch and every flag
// flags none. It reports each call on calls.
type stuckStore struct {
	due   []postgres.DueAck
	calls chan string
}

func (s *stuckStore) OverdueAcks(ctx context.Context, _ int) ([]postgres.DueAck, error) {
	select {
	case s.calls <- "read":
		return s.due, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *stuckStore) FlagOverdueAcks(context.Context, hub.Fence, []int64) ([]postgres.DueAck, error) {
	return nil, nil
}

func (s *stuckStore) OverdueAckCounts(ctx context.Context) (map[string]int, error) {
	select {
	case s.calls <- "count":
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// TestWatcherEndsStepOnBatchFlaggingNothing: a full batch of which
// nothing gets flagged ends the step (the same batch would be read
// again, forever): the step reads once, then sets the gauge.
func TestWatcherEndsStepOnBatchFlaggingNothing(t *testing.T) {
	st := &stuckStore{due: []postgres.DueAck{{Interchange: 1, Partner: "ACME"}, {Interchange: 2, Partner: "ACME"}}, calls: make(chan string)}
	w, err := interchange.NewWatcher(interchange.WatcherOptions{Store: st, Logger: zap.NewNop(), Registerer: prometheus.NewRegistry(), Interval: time.Hour, Batch: 2})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(leader.WithFence(context.Background(), hub.Fence{Lease: "l", Token: 1}))
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var got []string
	for len(got) < 2 {
		got = append(got, <-st.calls)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil when the term ends", err)
	}
	if want := []string{"read", "count"}; !cmp.Equal(got, want) {
		t.Errorf("store calls of the first step = %v, want %v: a batch that flags nothing ends the step", got, want)
	}
}
