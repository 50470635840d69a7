package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/hub"
)

// OutboxKindDelivery is an outbox row that writes a received document to
// one destination of the connectors (migration 00026).
const OutboxKindDelivery = "delivery"

// Events of deliveries, written by the transaction that finishes the
// delivery's outbox row (the trigger of migration 00026): the dispatcher's
// outcome or the claim's give-up. Their detail holds message_id,
// destination, route, name (the file or object written), attempts and,
// for a failure, error.
const (
	EventDeliveryDone   = "delivery-done"   // a received document was written to a destination
	EventDeliveryFailed = "delivery-failed" // a delivery failed for good: a dead letter
)

// DeliveryCursor names the deliveries forwarder's position in the feed.
const DeliveryCursor = "deliveries"

// DeliveryForward configures ForwardDeliveries.
type DeliveryForward struct {
	// Cursor names the consumer's position in event_cursors
	// (DeliveryCursor).
	Cursor string
	// Limit bounds the events read in one call.
	Limit       int
	MaxAttempts int
	// RetryWindow, when positive, keeps retrying past MaxAttempts (see
	// NewOutbound.RetryWindow).
	RetryWindow time.Duration
	// Route names the route and the destinations a received document goes
	// to; no destinations: the document is not delivered (it stays in the
	// API and the feed). It must not block. Destinations named twice are
	// delivered once.
	Route func(connector.Document) (route string, destinations []string)
}

// Forwarded is what one ForwardDeliveries call did.
type Forwarded struct {
	// Events counts the feed events read (and passed by the cursor),
	// whatever their type.
	Events int
	// Queued counts the delivery rows written.
	Queued int
}

// ForwardDeliveries reads the events after the consumer's cursor, and for
// each received event queues one outbox row of kind delivery per
// destination f.Route names, and advances the cursor past every event
// read, in one transaction: each (received message, destination) is
// queued exactly once, whichever replica forwards it (the cursor row is
// taken FOR UPDATE SKIP LOCKED, and a unique index refuses a second row for
// the same message and destination). The first call for a cursor starts it
// at the end of the feed: documents received before deliveries were first
// run are not delivered. A call while another replica holds the cursor
// does nothing. A received message deleted since (purged) is skipped.
func (s *Store) ForwardDeliveries(ctx context.Context, f DeliveryForward) (Forwarded, error) {
	if f.Route == nil {
		return Forwarded{}, errors.New("forward deliveries: no Route")
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	if f.MaxAttempts <= 0 {
		f.MaxAttempts = 1
	}
	var r Forwarded
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r = Forwarded{}
		evs, ok, err := readCursor(ctx, tx, f.Cursor, f.Limit)
		if err != nil || !ok || len(evs) == 0 {
			return err
		}
		var ids []int64
		for _, e := range evs {
			if e.Type == EventReceived {
				ids = append(ids, e.Message)
			}
		}
		docs, err := deliveryDocuments(ctx, tx, ids)
		if err != nil {
			return err
		}
		var msgs []int64
		var partners, dests, routes []string
		for _, id := range ids {
			d, ok := docs[id]
			if !ok {
				continue
			}
			route, to := f.Route(d)
			seen := map[string]bool{}
			for _, name := range to {
				if name == "" || seen[name] {
					continue
				}
				seen[name] = true
				msgs, partners, dests, routes = append(msgs, id), append(partners, d.Partner), append(dests, name), append(routes, route)
			}
		}
		if len(msgs) > 0 {
			tag, err := tx.Exec(ctx, `
INSERT INTO outbox (kind, message_id, partner, url, destination, route, max_attempts, retry_until)
SELECT 'delivery', m, p, '', d, r, $5,
       CASE WHEN $6::bigint > 0 THEN now() + $6::bigint * interval '1 microsecond' END
  FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS u(m, p, d, r)
ON CONFLICT (message_id, destination) WHERE kind = 'delivery' DO NOTHING`,
				msgs, partners, dests, routes, f.MaxAttempts, f.RetryWindow.Microseconds())
			if err != nil {
				return fmt.Errorf("queue deliveries: %w", err)
			}
			r.Queued = int(tag.RowsAffected())
		}
		r.Events = len(evs)
		return advanceCursor(ctx, tx, f.Cursor, evs[len(evs)-1].Cursor)
	})
	if err != nil {
		return Forwarded{}, fmt.Errorf("forward received documents to destinations: %w", err)
	}
	return r, nil
}

// documentSQL reads what a connector.Document holds of messages $1: the
// message row and the envelope of its first interchange.
const documentSQL = `
SELECT m.id, m.message_id, m.partner, CASE m.direction WHEN 'inbound' THEN m.as2_to ELSE m.as2_from END,
       m.direction, m.content_type, m.filename, m.mic, m.payload_size, m.created_at,
       coalesce(i.standard, ''), coalesce(i.set_types[1], ''), coalesce(i.group_types[1], ''), coalesce(i.control_number, '')
  FROM messages m
  LEFT JOIN LATERAL (SELECT standard, set_types, group_types, control_number FROM message_interchanges
                      WHERE message_id = m.id ORDER BY id LIMIT 1) i ON true
 WHERE m.id = ANY ($1::bigint[])`

// deliveryDocuments reads the documents of messages ids, by id; ids no
// longer stored are left out.
func deliveryDocuments(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, ids []int64) (map[int64]connector.Document, error) {
	docs := map[int64]connector.Document{}
	if len(ids) == 0 {
		return docs, nil
	}
	rows, err := q.Query(ctx, documentSQL, ids)
	if err != nil {
		return nil, fmt.Errorf("read documents: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (connector.Document, error) {
		var d connector.Document
		err := r.Scan(&d.ID, &d.MessageID, &d.Partner, &d.Station, &d.Direction, &d.ContentType, &d.FileName, &d.MIC,
			&d.Size, &d.Time, &d.Standard, &d.Type, &d.GroupType, &d.ICN)
		d.MessageID = strings.TrimSuffix(strings.TrimPrefix(d.MessageID, "<"), ">")
		d.Standard = strings.ToLower(d.Standard)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("read documents: %w", err)
	}
	for _, d := range list {
		docs[d.ID] = d
	}
	return docs, nil
}

// Delivery is a claimed delivery row with its document.
type Delivery struct {
	Destination string
	Route       string
	// Name is the name fixed by an earlier attempt; empty before the
	// first (see FixDeliveryName).
	Name     string
	Document connector.Document
}

// Delivery returns the delivery of the claimed row it, or an error
// wrapping ErrMessageNotFound when its message is gone.
func (s *Store) Delivery(ctx context.Context, it OutboxItem) (Delivery, error) {
	var d Delivery
	err := s.pool.QueryRow(ctx, `SELECT destination, route, target_name FROM outbox WHERE id = $1`, it.ID).
		Scan(&d.Destination, &d.Route, &d.Name)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("delivery %d: %w", it.ID, hub.ErrMessageNotFound)
	}
	if err != nil {
		return d, fmt.Errorf("delivery %d: %w", it.ID, err)
	}
	docs, err := deliveryDocuments(ctx, s.pool, []int64{it.MessageID})
	if err != nil {
		return d, fmt.Errorf("delivery %d: %w", it.ID, err)
	}
	doc, ok := docs[it.MessageID]
	if !ok {
		return d, fmt.Errorf("delivery %d: message %d: %w", it.ID, it.MessageID, hub.ErrMessageNotFound)
	}
	d.Document = doc
	return d, nil
}

// FixDeliveryName records name as the name the claimed delivery it is
// written under, unless an earlier attempt fixed one, and returns the name
// fixed: every attempt of a delivery writes the same name. It returns
// ErrClaimLost when the claim is no longer held.
func (s *Store) FixDeliveryName(ctx context.Context, it OutboxItem, name string) (string, error) {
	var fixed string
	err := s.pool.QueryRow(ctx, `
UPDATE outbox SET target_name = CASE WHEN target_name = '' THEN $4 ELSE target_name END
 WHERE id = $1 AND claimed_by = $2 AND attempts = $3 AND status = 'pending'
RETURNING target_name`, it.ID, it.ClaimedBy, it.Attempts, name).Scan(&fixed)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("fix the name of delivery %d: %w", it.ID, ErrClaimLost)
	}
	if err != nil {
		return "", fmt.Errorf("fix the name of delivery %d: %w", it.ID, err)
	}
	return fixed, nil
}

// DeliveryBacklog is the pending deliveries of one destination.
type DeliveryBacklog struct {
	Destination string
	Pending     int64
	// Oldest is how long the oldest pending delivery has waited since it
	// was queued (database clock).
	Oldest time.Duration
}

// DeliveryBacklogs returns the pending deliveries per destination that has
// any, by name.
func (s *Store) DeliveryBacklogs(ctx context.Context) ([]DeliveryBacklog, error) {
	rows, err := s.pool.Query(ctx, `
SELECT destination, count(*), extract(epoch FROM now() - min(created_at))::float8
  FROM outbox WHERE kind = 'delivery' AND status = 'pending'
 GROUP BY destination ORDER BY destination`)
	if err != nil {
		return nil, fmt.Errorf("delivery backlog: %w", err)
	}
	l, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DeliveryBacklog, error) {
		var b DeliveryBacklog
		var age float64
		err := r.Scan(&b.Destination, &b.Pending, &age)
		b.Oldest = time.Duration(age * float64(time.Second))
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("delivery backlog: %w", err)
	}
	return l, nil
}

// DeliveryInfo is one delivery of a received message, for its trace.
type DeliveryInfo struct {
	Destination string
	Route       string
	// Name is the name written (or to be written); empty before the first
	// attempt.
	Name string
	// Status is the outbox row's: pending, done or failed.
	Status    string
	Attempts  int
	LastError string
	CreatedAt time.Time
	// FinishedAt is when it was written or given up; nil while pending.
	FinishedAt *time.Time
}

// traceDeliveriesSQL: the deliveries of message $1, oldest first.
const traceDeliveriesSQL = `
SELECT destination, route, target_name, status, attempts, last_error, created_at, finished_at
  FROM outbox WHERE message_id = $1 AND kind = 'delivery' ORDER BY id`

func scanDeliveryInfo(r pgx.CollectableRow) (DeliveryInfo, error) {
	var d DeliveryInfo
	err := r.Scan(&d.Destination, &d.Route, &d.Name, &d.Status, &d.Attempts, &d.LastError, &d.CreatedAt, &d.FinishedAt)
	return d, err
}
