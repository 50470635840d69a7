package outbox

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/postgres"
)

// DeliveryForwardStore moves received documents into the outbox as
// deliveries; *postgres.Store implements it.
type DeliveryForwardStore interface {
	ForwardDeliveries(ctx context.Context, f postgres.DeliveryForward) (postgres.Forwarded, error)
}

// DeliveryForwarderOptions configure NewDeliveryForwarder.
type DeliveryForwarderOptions struct {
	Store  DeliveryForwardStore
	Logger *zap.Logger
	// Route names the route and the destinations of a received document
	// (the connectors' routes in force); it must not block. No
	// destinations: the document is not delivered.
	Route func(connector.Document) (route string, destinations []string)
	// Interval between two looks at the feed (DefaultForwardInterval).
	Interval time.Duration
	// MaxAttempts and RetryWindow bound the retries of one delivery, as
	// for messages (8 attempts when zero; no window when zero).
	MaxAttempts int
	RetryWindow time.Duration
	// Notify, when set, is called after deliveries were queued (a wakeup
	// for the local dispatcher).
	Notify func()
}

// DeliveryForwarder runs on every replica when deliveries are enabled:
// it turns each received event of the feed into one outbox row per
// destination its route names, which the dispatchers of every replica
// write. Reading the events, queuing the rows and advancing the cursor
// are one transaction, and the cursor row is locked while one replica
// forwards, so each (document, destination) is queued once.
type DeliveryForwarder struct {
	o   DeliveryForwarderOptions
	log *zap.Logger
}

// NewDeliveryForwarder validates o.
func NewDeliveryForwarder(o DeliveryForwarderOptions) (*DeliveryForwarder, error) {
	if o.Store == nil || o.Logger == nil || o.Route == nil {
		return nil, errors.New("outbox: delivery forwarder needs Store, Logger and Route")
	}
	if o.Interval <= 0 {
		o.Interval = DefaultForwardInterval
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 8
	}
	return &DeliveryForwarder{o: o, log: o.Logger.Named("deliveries")}, nil
}

// forwardBatch bounds the events one transaction reads.
const forwardBatch = 100

// Run forwards until ctx ends, then returns nil. Database errors are
// logged once per outage and retried at the next interval.
func (f *DeliveryForwarder) Run(ctx context.Context) error {
	failing := false
	for {
		for ctx.Err() == nil {
			r, err := f.o.Store.ForwardDeliveries(ctx, postgres.DeliveryForward{
				Cursor: postgres.DeliveryCursor, Limit: forwardBatch, Route: f.o.Route,
				MaxAttempts: f.o.MaxAttempts, RetryWindow: f.o.RetryWindow,
			})
			if err != nil {
				if ctx.Err() == nil && !failing {
					f.log.Warn("queue received documents for their destinations; retrying", zap.Error(err))
				}
				failing = true
				break
			}
			if failing {
				f.log.Info("queuing received documents for their destinations again")
				failing = false
			}
			if r.Queued > 0 && f.o.Notify != nil {
				f.o.Notify()
			}
			if r.Events < forwardBatch {
				break
			}
		}
		if !leader.Sleep(ctx, f.o.Interval) {
			return nil
		}
	}
}
