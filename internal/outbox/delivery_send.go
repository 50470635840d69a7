package outbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
)

// Destinations gives the destinations of the connectors in force by name.
// The dispatcher never closes what it returns: the provider owns the
// destinations (and closes them when the connectors change).
type Destinations interface {
	// Destination returns the destination configured under name and how
	// documents are written there (file-name template, sidecar, done
	// marker), or an error (wrapping ErrUnknownDestination when none is).
	Destination(name string) (connector.Destination, connector.DeliverOptions, error)
}

// ErrUnknownDestination reports a destination name the connectors in force
// do not define (removed or renamed after its deliveries were queued).
var ErrUnknownDestination = errors.New("no such destination")

// DeliveryStore is what writing deliveries needs from storage beyond
// Store; *postgres.Store implements it.
type DeliveryStore interface {
	Delivery(ctx context.Context, it postgres.OutboxItem) (postgres.Delivery, error)
	FixDeliveryName(ctx context.Context, it postgres.OutboxItem, name string) (string, error)
}

// DeliveryTimeout bounds one attempt to write a document to a
// destination; the claim is kept alive meanwhile (see keepClaim).
const DeliveryTimeout = 30 * time.Minute

// errWriteEnded ends the payload's stream when the destination stopped
// reading it (its Write returned).
var errWriteEnded = errors.New("destination stopped reading")

// deliver writes the document of the claimed delivery it to its
// destination and records the outcome. Every failure but a payload gone
// is retried with the outbox's backoff until the attempts and the retry
// window are used up; the delivery then fails for good, which writes its
// delivery-failed event.
func (d *Dispatcher) deliver(ctx context.Context, log *zap.Logger, it postgres.OutboxItem) {
	del, err := d.deliveries.Delivery(ctx, it)
	switch {
	case errors.Is(err, hub.ErrMessageNotFound):
		d.finishDelivery(ctx, log, it, "", attempt{err: fmt.Errorf("nothing to deliver: the received message is gone (purged or deleted): %w", err)})
		return
	case err != nil:
		if ctx.Err() == nil {
			log.Warn("read the delivery; the claim expires and it is tried again", zap.Error(err))
		}
		return
	}
	log = log.With(zap.String("destination", del.Destination), zap.Int64("message", it.MessageID))
	dest, opts, err := d.o.Destinations.Destination(del.Destination)
	if err != nil {
		d.finishDelivery(ctx, log, it, del.Destination, attempt{retryable: true,
			err: fmt.Errorf("destination %q is not usable (define it in the connectors document, or its deliveries fail when their retries run out): %w", del.Destination, err)})
		return
	}
	name := del.Name
	if name == "" {
		n, err := opts.Template.Expand(del.Document)
		if err != nil {
			d.finishDelivery(ctx, log, it, del.Destination, attempt{retryable: true,
				err: fmt.Errorf("name the document for destination %q (fix its name template in the connectors document): %w", del.Destination, err)})
			return
		}
		if name, err = d.deliveries.FixDeliveryName(ctx, it, n); err != nil {
			if ctx.Err() == nil && !errors.Is(err, postgres.ErrClaimLost) {
				log.Warn("record the delivery's name; the claim expires and it is tried again", zap.Error(err))
			}
			return
		}
	}
	log = log.With(zap.String("name", name))
	a := d.writeDelivery(ctx, dest, opts, it, del, name)
	if ctx.Err() != nil {
		log.Warn("delivery abandoned at shutdown; the claim expires and another dispatcher writes it again")
		return
	}
	d.finishDelivery(ctx, log, it, del.Destination, a)
}

// finishDelivery records the attempt a and counts it under destination.
func (d *Dispatcher) finishDelivery(ctx context.Context, log *zap.Logger, it postgres.OutboxItem, destination string, a attempt) {
	if result, ok := d.finish(ctx, log, it, nil, a); ok {
		if destination == "" {
			destination = "unknown"
		}
		d.o.Metrics.delivery.WithLabelValues(destination, result).Inc()
	}
}

// writeDelivery streams the stored payload of it's message into dest
// under name, and judges the outcome. The payload is read from the
// database as the destination reads it (a pipe): constant memory, whatever
// the document's size.
func (d *Dispatcher) writeDelivery(ctx context.Context, dest connector.Destination, opts connector.DeliverOptions, it postgres.OutboxItem, del postgres.Delivery, name string) attempt {
	ctx, cancel := context.WithTimeout(ctx, DeliveryTimeout)
	defer cancel()
	pr, pw := io.Pipe()
	var readErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, readErr = d.o.Store.WritePayload(ctx, it.MessageID, func(hub.MessageInfo) io.Writer { return pw })
		pw.CloseWithError(readErr) // nil: io.EOF
	}()
	err := connector.WriteDocument(ctx, dest, name, del.Document, opts, pr)
	pr.CloseWithError(errWriteEnded)
	<-done
	if readErr != nil && !errors.Is(readErr, errWriteEnded) {
		if errors.Is(readErr, hub.ErrMessageNotFound) {
			return attempt{err: fmt.Errorf("nothing to deliver: the stored payload is gone (purged or deleted): %w", readErr)}
		}
		return attempt{retryable: true, err: fmt.Errorf("read the stored payload of message %d: %w", it.MessageID, readErr)}
	}
	if err != nil {
		return deliveryFailed(ctx, del.Destination, err)
	}
	return attempt{}
}

// deliveryFailed is the attempt whose write to destination failed with
// err, in words for the operator: what failed and what to do.
func deliveryFailed(ctx context.Context, destination string, err error) attempt {
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil:
		err = fmt.Errorf("destination %q did not take the document within %s: %w", destination, DeliveryTimeout, err)
	case errors.Is(err, connector.ErrRefused):
		err = fmt.Errorf("destination %q refused the document; fix its credentials, host key, permissions, path or bucket in the connectors document or on its server (edihub retries until its retries run out): %w", destination, err)
	case errors.Is(err, connector.ErrUnavailable):
		err = fmt.Errorf("destination %q is unavailable: %w", destination, err)
	default:
		err = fmt.Errorf("write to destination %q: %w", destination, err)
	}
	return attempt{retryable: true, err: err}
}
