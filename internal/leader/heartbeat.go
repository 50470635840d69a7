package leader

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/hub"
)

// HeartbeatStore records heartbeats through the fenced path.
// *postgres.Store implements it.
type HeartbeatStore interface {
	Heartbeat(ctx context.Context, f hub.Fence, holder string, retain time.Duration) error
}

// HeartbeatOptions configure NewHeartbeat.
type HeartbeatOptions struct {
	Store HeartbeatStore
	// Holder is written with every beat: the replica's identity.
	Holder string
	// Interval between beats; default 1 s.
	Interval time.Duration
	// Retain is how long beats are kept; default 1 h.
	Retain     time.Duration
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// Heartbeat is a leader-gated Worker that writes a fenced row to
// leader_heartbeats every interval, so operators (and the scenario tests)
// can see who led when, with which token, and that no stale term wrote.
type Heartbeat struct {
	o    HeartbeatOptions
	log  *zap.Logger
	last prometheus.Gauge
}

// NewHeartbeat returns the heartbeat worker and registers
// edihub_leader_heartbeat_timestamp_seconds.
func NewHeartbeat(o HeartbeatOptions) (*Heartbeat, error) {
	if o.Store == nil || o.Logger == nil || o.Registerer == nil || o.Holder == "" {
		return nil, errors.New("heartbeat: Store, Holder, Logger and Registerer are required")
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Retain <= 0 {
		o.Retain = time.Hour
	}
	h := &Heartbeat{o: o, log: o.Logger.Named("heartbeat"), last: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "edihub_leader_heartbeat_timestamp_seconds",
		Help: "Unix time of the last heartbeat this replica wrote as leader and the database accepted.",
	})}
	if err := o.Registerer.Register(h.last); err != nil {
		return nil, fmt.Errorf("heartbeat metrics: %w", err)
	}
	return h, nil
}

// Run beats until ctx ends. A beat refused for a stale token ends the term:
// Run returns an error wrapping hub.ErrStaleFence. Other database
// errors are logged and the next beat, an interval later, tries again.
func (h *Heartbeat) Run(ctx context.Context) error {
	return Loop{
		Name: "heartbeat", FailedMsg: "heartbeat not recorded; retrying", RecoveredMsg: "heartbeat recorded again",
		Step:     h.beat,
		Interval: h.o.Interval,
		Retry:    func(int, error) time.Duration { return h.o.Interval },
		Logger:   h.log,
	}.Run(ctx)
}

// beat writes one heartbeat.
func (h *Heartbeat) beat(ctx context.Context, f hub.Fence) error {
	if err := h.o.Store.Heartbeat(ctx, f, h.o.Holder, h.o.Retain); err != nil {
		return err
	}
	h.last.SetToCurrentTime()
	return nil
}
