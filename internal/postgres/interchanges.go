package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/edi"
)

// InterchangeInfo is a stored interchange of a message (table
// message_interchanges, migration 00013).
type InterchangeInfo struct {
	ID                 int64
	Message            int64
	Partner            string
	Direction          string
	Standard           string
	Sender, Receiver   edi.Party
	ControlNumber      string
	Version            string
	Test               bool
	OK                 bool
	Problems           []string
	GroupCount         int
	SetCount           int
	SetTypes           []string
	AckKinds           []string
	DuplicateOf        *int64
	AckStatus          string
	AckCodes           []string
	AckDueAt           *time.Time
	AckOverdue         bool
	AckedAt            *time.Time
	AckMessage         *int64
	CreatedAt          time.Time
	GroupControlNumber []string
}

// EDIRecord is the envelope of one message to store with it.
type EDIRecord struct {
	Partner   string
	Direction string // inbound | outbound
	Doc       *edi.Document
	// AckDue, for an outbound message, makes each interchange await its
	// functional acknowledgement until now + AckDue (ack_status pending).
	AckDue time.Duration
	// DuplicateWindow is how far back the same interchange marks a
	// duplicate (inbound) or a repeated control number (outbound: the
	// interchange's duplicate_of is the latest message that sent it
	// before, and the message gets an interchange-repeated event); 0: no
	// check.
	DuplicateWindow time.Duration
	// Refused counts the duplicates found as refused.
	Refused bool
	// RefuseDuplicates, for an inbound message not Refused, makes a
	// duplicate found only when the interchanges are written (a copy
	// received at the same instant, committed first) fail the write with
	// ErrDuplicateInterchange, so that the receiver answers it refused.
	RefuseDuplicates bool
}

// ErrDuplicateInterchange reports an inbound interchange found to be a
// duplicate only when it was being stored, for a partner that refuses
// duplicates (EDIRecord.RefuseDuplicates); nothing was written. Match it
// with errors.Is.
var ErrDuplicateInterchange = errors.New("duplicate interchange found while storing it")

// Duplicate is an interchange received before.
type Duplicate struct {
	ControlNumber string
	// First is the messages.id that carried it first.
	First int64
}

const duplicateSQL = `
SELECT message_id FROM message_interchanges
 WHERE partner = $1 AND direction = 'inbound' AND sender_id = $2 AND receiver_id = $3 AND control_number = $4
   AND created_at >= now() - $5::bigint * interval '1 microsecond' AND message_id <> $6
 ORDER BY id LIMIT 1`

// FindDuplicateInterchanges returns the interchanges of doc that partner
// sent before within window (database clock), for the receiver's decision
// before it answers; none when window is 0.
func (s *Store) FindDuplicateInterchanges(ctx context.Context, partner string, doc *edi.Document, window time.Duration) ([]Duplicate, error) {
	if window <= 0 || doc == nil {
		return nil, nil
	}
	var out []Duplicate
	for _, ic := range doc.Interchanges {
		var first int64
		err := s.pool.QueryRow(ctx, duplicateSQL, partner, clean(ic.Sender.ID), clean(ic.Receiver.ID), clean(ic.ControlNumber), window.Microseconds(), int64(0)).Scan(&first)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("look for duplicate interchanges: %w", err)
		}
		out = append(out, Duplicate{ControlNumber: ic.ControlNumber, First: first})
	}
	return out, nil
}

// repeatedSQL finds the latest earlier outbound interchange with the same
// control number, sender and receiver to the partner within the window.
const repeatedSQL = `
SELECT message_id FROM message_interchanges
 WHERE partner = $1 AND direction = 'outbound' AND sender_id = $2 AND receiver_id = $3 AND control_number = $4
   AND created_at >= now() - $5::bigint * interval '1 microsecond' AND message_id <> $6
 ORDER BY id DESC LIMIT 1`

// insertInterchanges writes rec's interchanges for message id in tx and
// returns the duplicates found (inbound) or the control numbers repeated
// (outbound, with the message that sent each last).
func insertInterchanges(ctx context.Context, tx pgx.Tx, id int64, rec EDIRecord) ([]Duplicate, error) {
	if err := lockInterchanges(ctx, tx, rec); err != nil {
		return nil, err
	}
	var dups []Duplicate
	for _, ic := range rec.Doc.Interchanges {
		var dup *int64
		if rec.Direction == "inbound" && rec.DuplicateWindow > 0 {
			var first int64
			err := tx.QueryRow(ctx, duplicateSQL, rec.Partner, clean(ic.Sender.ID), clean(ic.Receiver.ID), clean(ic.ControlNumber), rec.DuplicateWindow.Microseconds(), id).Scan(&first)
			switch {
			case err == nil && rec.RefuseDuplicates && !rec.Refused:
				return nil, fmt.Errorf("interchange %s (first received in message %d): %w", clean(ic.ControlNumber), first, ErrDuplicateInterchange)
			case err == nil:
				dup = &first
				dups = append(dups, Duplicate{ControlNumber: ic.ControlNumber, First: first})
				if _, err := tx.Exec(ctx, `INSERT INTO interchange_duplicates (message_id, partner, control_number, refused) VALUES ($1, $2, $3, $4)`,
					id, rec.Partner, clean(ic.ControlNumber), rec.Refused); err != nil {
					return nil, fmt.Errorf("count duplicate interchange: %w", err)
				}
			case !errors.Is(err, pgx.ErrNoRows):
				return nil, fmt.Errorf("look for duplicate interchanges: %w", err)
			}
		}
		if rec.Direction == "outbound" && rec.DuplicateWindow > 0 {
			var earlier int64
			err := tx.QueryRow(ctx, repeatedSQL, rec.Partner, clean(ic.Sender.ID), clean(ic.Receiver.ID), clean(ic.ControlNumber), rec.DuplicateWindow.Microseconds(), id).Scan(&earlier)
			switch {
			case err == nil:
				dup = &earlier
				dups = append(dups, Duplicate{ControlNumber: ic.ControlNumber, First: earlier})
				if _, err := tx.Exec(ctx, `
INSERT INTO events (type, message, partner, direction, detail)
SELECT 'interchange-repeated', id, partner, direction, jsonb_build_object(
       'message_id', message_id, 'status', status, 'control_number', $2::text, 'sent_before_in', $3::bigint)
  FROM messages WHERE id = $1`, id, clean(ic.ControlNumber), earlier); err != nil {
					return nil, fmt.Errorf("interchange-repeated event: %w", err)
				}
			case !errors.Is(err, pgx.ErrNoRows):
				return nil, fmt.Errorf("look for repeated interchanges: %w", err)
			}
		}
		if err := insertInterchange(ctx, tx, id, rec, &ic, dup); err != nil {
			return nil, err
		}
	}
	return dups, nil
}

// lockInterchanges serialises the duplicate check of rec's inbound
// interchanges with every other transaction receiving the same ones (same
// partner, sender, receiver and control number), on any replica: each
// takes a transaction-scoped advisory lock per interchange, in one order,
// so that of two copies received at once the second waits for the first
// to commit, then finds it, and only one is recorded as first.
func lockInterchanges(ctx context.Context, tx pgx.Tx, rec EDIRecord) error {
	if rec.Direction != "inbound" || rec.DuplicateWindow <= 0 || len(rec.Doc.Interchanges) == 0 {
		return nil
	}
	keys := make([]string, 0, len(rec.Doc.Interchanges))
	for _, ic := range rec.Doc.Interchanges {
		keys = append(keys, strings.Join([]string{"edihub interchange", rec.Partner, clean(ic.Sender.ID), clean(ic.Receiver.ID), clean(ic.ControlNumber)}, "\x1f"))
	}
	slices.Sort(keys)
	keys = slices.Compact(keys)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended(k, 0)) FROM unnest($1::text[]) WITH ORDINALITY AS u(k, n) ORDER BY n`, keys); err != nil {
		return fmt.Errorf("lock interchanges: %w", err)
	}
	return nil
}

func insertInterchange(ctx context.Context, tx pgx.Tx, id int64, rec EDIRecord, ic *edi.Interchange, dup *int64) error {
	var problems, types, kinds, groups []string
	for _, p := range ic.Problems {
		problems = append(problems, "interchange:"+string(p))
	}
	sets := 0
	for _, g := range ic.Groups {
		for _, p := range g.Problems {
			problems = append(problems, "group "+clean(g.ControlNumber)+":"+string(p))
		}
		sets += g.SetCount
		if !g.Implicit && len(groups) < 32 && !contains(groups, clean(g.FunctionalID)) {
			groups = append(groups, clean(g.FunctionalID))
		}
		for _, s := range g.Sets {
			for _, p := range s.Problems {
				problems = append(problems, "set "+clean(s.ControlNumber)+":"+string(p))
			}
			if len(types) < 32 && !contains(types, clean(s.Type)) {
				types = append(types, clean(s.Type))
			}
			if s.Ack != nil && !contains(kinds, s.Ack.Kind) {
				kinds = append(kinds, s.Ack.Kind)
			}
		}
	}
	if len(ic.TA1) > 0 {
		kinds = append(kinds, "TA1")
	}
	if len(problems) > 64 {
		problems = problems[:64]
	}
	ackStatus, due := "", int64(0)
	if rec.Direction == "outbound" && rec.AckDue > 0 && len(kinds) == 0 {
		ackStatus, due = "pending", rec.AckDue.Microseconds()
	}
	var icID int64
	err := tx.QueryRow(ctx, `
INSERT INTO message_interchanges (message_id, partner, direction, standard, sender_qualifier, sender_id,
       receiver_qualifier, receiver_id, control_number, version, test, ok, problems, group_count, set_count,
       set_types, ack_kinds, duplicate_of, ack_status, ack_due_at, group_types)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19,
        CASE WHEN $20::bigint > 0 THEN now() + $20::bigint * interval '1 microsecond' END, $21)
RETURNING id`,
		id, rec.Partner, rec.Direction, string(rec.Doc.Standard), clean(ic.Sender.Qualifier), clean(ic.Sender.ID),
		clean(ic.Receiver.Qualifier), clean(ic.Receiver.ID), clean(ic.ControlNumber), clean(ic.Version), ic.Test, ic.OK(),
		nonNil(problems), ic.GroupCount, sets, nonNil(types), nonNil(kinds), dup, ackStatus, due, nonNil(groups)).Scan(&icID)
	if err != nil {
		return fmt.Errorf("store interchange: %w", err)
	}
	if rec.Direction != "outbound" {
		return nil
	}
	for _, g := range ic.Groups {
		if g.Implicit {
			continue
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO message_groups (interchange_id, partner, functional_id, control_number, set_count)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`, icID, rec.Partner, clean(g.FunctionalID), clean(g.ControlNumber), g.SetCount); err != nil {
			return fmt.Errorf("store functional group: %w", err)
		}
	}
	return nil
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// RecordInterchanges stores the envelope of message id (already stored)
// in one transaction, and returns the duplicates found (inbound).
func (s *Store) RecordInterchanges(ctx context.Context, id int64, rec EDIRecord) ([]Duplicate, error) {
	var dups []Duplicate
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		dups, err = insertInterchanges(ctx, tx, id, rec)
		return err
	})
	return dups, err
}

// nextControlNumber takes partner's next acknowledgement control number in
// tx. The upsert's row lock serialises replicas; a rolled-back
// transaction gives its number back, a committed one never repeats
// (1…999999999, then 1 again).
func nextControlNumber(ctx context.Context, tx pgx.Tx, partner string) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, `
INSERT INTO edi_control_numbers AS c (partner, last) VALUES ($1, 1)
ON CONFLICT (partner) DO UPDATE SET last = CASE WHEN c.last >= 999999999 THEN 1 ELSE c.last + 1 END
RETURNING last`, partner).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("next control number for %s: %w", partner, err)
	}
	return n, nil
}

// NextControlNumber takes partner's next acknowledgement control number.
func (s *Store) NextControlNumber(ctx context.Context, partner string) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		n, err = nextControlNumber(ctx, tx, partner)
		return err
	})
	return n, err
}

// AckBuilder writes the acknowledgement for a control number; it returns
// the outbound message to queue (with its envelope in EDI).
type AckBuilder func(control int64) (NewOutbound, error)

// queueAck takes partner's next control number, builds the
// acknowledgement with it and queues it as an outbound message, in tx: a
// number is used only by a queued acknowledgement.
func queueAck(ctx context.Context, tx pgx.Tx, partner string, build AckBuilder) (Enqueued, error) {
	var e Enqueued
	n, err := nextControlNumber(ctx, tx, partner)
	if err != nil {
		return e, err
	}
	m, err := build(n)
	if err != nil {
		return e, fmt.Errorf("build acknowledgement %d for %s: %w", n, partner, err)
	}
	if err := enqueueTx(ctx, tx, m, &e); err != nil {
		return e, fmt.Errorf("queue acknowledgement for %s: %w", partner, err)
	}
	return e, nil
}

// Interchanges returns the interchanges stored for message id, in order.
func (s *Store) Interchanges(ctx context.Context, id int64) ([]InterchangeInfo, error) {
	rows, err := s.pool.Query(ctx, `
SELECT i.id, i.message_id, i.partner, i.direction, i.standard, i.sender_qualifier, i.sender_id, i.receiver_qualifier,
       i.receiver_id, i.control_number, i.version, i.test, i.ok, i.problems, i.group_count, i.set_count, i.set_types,
       i.ack_kinds, i.duplicate_of, i.ack_status, i.ack_codes, i.ack_due_at, i.ack_overdue, i.acked_at, i.ack_message,
       i.created_at, ARRAY(SELECT g.control_number FROM message_groups g WHERE g.interchange_id = i.id ORDER BY g.control_number)
  FROM message_interchanges i WHERE i.message_id = $1 ORDER BY i.id`, id)
	if err != nil {
		return nil, fmt.Errorf("read interchanges: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (InterchangeInfo, error) {
		var i InterchangeInfo
		err := r.Scan(&i.ID, &i.Message, &i.Partner, &i.Direction, &i.Standard, &i.Sender.Qualifier, &i.Sender.ID,
			&i.Receiver.Qualifier, &i.Receiver.ID, &i.ControlNumber, &i.Version, &i.Test, &i.OK, &i.Problems,
			&i.GroupCount, &i.SetCount, &i.SetTypes, &i.AckKinds, &i.DuplicateOf, &i.AckStatus, &i.AckCodes,
			&i.AckDueAt, &i.AckOverdue, &i.AckedAt, &i.AckMessage, &i.CreatedAt, &i.GroupControlNumber)
		return i, err
	})
	if err != nil {
		return nil, fmt.Errorf("read interchanges: %w", err)
	}
	return out, nil
}

// controlNumberForms are the stored forms an interchange control number
// search matches: as given, and for digits also without leading zeros
// and zero-padded to X12's nine digits.
func controlNumberForms(s string) []string {
	forms := []string{s}
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return forms
	}
	t := strings.TrimLeft(s, "0")
	if t == "" {
		t = "0"
	}
	for _, f := range []string{t, fmt.Sprintf("%09s", t)} {
		if !contains(forms, f) {
			forms = append(forms, f)
		}
	}
	return forms
}
