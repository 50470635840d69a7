package interchange

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/postgres"
)

// WatchStore is the storage the Watcher needs; *postgres.Store implements it.
type WatchStore interface {
	OverdueAcks(ctx context.Context, limit int) ([]postgres.DueAck, error)
	FlagOverdueAcks(ctx context.Context, f hub.Fence, ids []int64) ([]postgres.DueAck, error)
	OverdueAckCounts(ctx context.Context) (map[string]int, error)
}

// DefaultWatchInterval is the Watcher's default Interval.
const DefaultWatchInterval = 30 * time.Second

// WatcherOptions configure NewWatcher. Store, Logger and Registerer are
// required; Interval defaults to DefaultWatchInterval, Batch to 500.
type WatcherOptions struct {
	Store      WatchStore
	Logger     *zap.Logger
	Registerer prometheus.Registerer
	Interval   time.Duration
	Batch      int
	// Partners, when set, lists the partners whose gauge is exported at
	// zero when none of theirs is overdue.
	Partners func() []string
}

// Watcher is the acknowledgement watcher, a leader-gated worker: it flags
// each outbound interchange whose functional acknowledgement did not come
// by its due time (the partner's edi_ack_due) overdue, once, and keeps
// edihub_ack_overdue{partner} at the number flagged and still
// unacknowledged.
type Watcher struct {
	o       WatcherOptions
	log     *zap.Logger
	overdue *prometheus.GaugeVec
	flagged *prometheus.CounterVec
}

// NewWatcher returns a Watcher.
func NewWatcher(o WatcherOptions) (*Watcher, error) {
	if o.Store == nil || o.Logger == nil || o.Registerer == nil {
		return nil, errors.New("interchange: watcher needs Store, Logger and Registerer")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultWatchInterval
	}
	if o.Batch <= 0 {
		o.Batch = 500
	}
	w := &Watcher{o: o, log: o.Logger.Named("ack-watcher"),
		overdue: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edihub_ack_overdue",
			Help: "Outbound interchanges whose functional acknowledgement is overdue and still missing (the leader's view).",
		}, []string{"partner"}),
		flagged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_ack_overdue_flagged_total",
			Help: "Outbound interchanges flagged with an overdue acknowledgement by this replica's watcher.",
		}, []string{"partner"}),
	}
	for _, c := range []prometheus.Collector{w.overdue, w.flagged} {
		if err := o.Registerer.Register(c); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// Run flags overdue acknowledgements every Interval until ctx ends (nil)
// or a newer term refuses its write (an error wrapping
// hub.ErrStaleFence). ctx must carry a fence (leader.FenceFrom).
func (w *Watcher) Run(ctx context.Context) error {
	f, ok := leader.FenceFrom(ctx)
	if !ok {
		return errors.New("ack watcher: no fence in the context (run it as a leader-gated worker)")
	}
	defer w.overdue.Reset()
	w.log.Info("acknowledgement watcher started", zap.Stringer("fence", f), zap.Duration("interval", w.o.Interval))
	return leader.Loop{Name: "acknowledgement watch", Step: w.step, Interval: w.o.Interval, Logger: w.log}.Run(ctx)
}

// step flags what is due, batch by batch, then sets the gauge.
func (w *Watcher) step(ctx context.Context, f hub.Fence) error {
	for {
		due, err := w.o.Store.OverdueAcks(ctx, w.o.Batch)
		if err != nil {
			return err
		}
		if len(due) == 0 {
			break
		}
		ids := make([]int64, len(due))
		for i, d := range due {
			ids[i] = d.Interchange
		}
		flagged, err := w.o.Store.FlagOverdueAcks(ctx, f, ids)
		if err != nil {
			return err
		}
		for _, d := range flagged {
			w.flagged.WithLabelValues(d.Partner).Inc()
			w.log.Warn("acknowledgement overdue", zap.String("partner", d.Partner), zap.Int64("message", d.Message), zap.String("control_number", d.ControlNumber))
		}
		if len(due) < w.o.Batch || len(flagged) == 0 {
			break
		}
	}
	counts, err := w.o.Store.OverdueAckCounts(ctx)
	if err != nil {
		return err
	}
	w.overdue.Reset()
	if w.o.Partners != nil {
		for _, p := range w.o.Partners() {
			w.overdue.WithLabelValues(p).Set(0)
		}
	}
	for p, n := range counts {
		w.overdue.WithLabelValues(p).Set(float64(n))
	}
	return nil
}
