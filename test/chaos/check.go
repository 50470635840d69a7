package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/edihub/edihub/test/failover"
)

// Verdict is what the checkers found; Failures lists the broken
// invariants.
type Verdict struct {
	// Partner → hub: documents the partner got a positive MDN for, and of
	// them those the hub does not have (lost) or has more than once.
	Acknowledged, Lost, Duplicated int
	// The partner's documents that ended failed (a negative MDN or out of
	// retries) or were not final when the run ended.
	PartnerFailed, PartnerNotFinal int

	// Hub → partner: outbound messages; those with no final state, with
	// more than one (events), stored twice by the partner, and posted to
	// the partner more often than the hub recorded attempts (the outbox
	// claim counts an attempt before the send; message_attempts records
	// its outcome after it).
	Outbound, NotFinal, FinalTwice, PartnerStoredTwice, OverPosted int
	// Documents the hub's API accepted (202) that the hub does not have.
	SubmittedLost     int
	Delivered, Failed int

	// Async MDNs: applied to a message (processed with a result),
	// applied more than once to one message, delivered messages with no
	// applied MDN, and MDNs still pending in the inbox.
	MDNsApplied, MDNAppliedTwice, DeliveredWithoutMDN, MDNsPending int

	// End-of-day report: days stored, mails received, days without
	// exactly one mail, mails whose figures differ from a recount.
	ReportDays, ReportMails, ReportDaysWrong, RecountMismatch int
	// Recounted says what the recount compared: the mail's part and its
	// size.
	Recounted string

	// Fencing: terms, accepted fenced writes, and the fence checker's
	// findings (stale, interleaved, unknown writes; terms out of token
	// order, which is the token going backwards).
	Terms, Beats                                 int
	Stale, Interleaved, UnknownWrites, Backwards int

	// Availability of the hub's AS2 endpoint to the partner's POSTs
	// during faults that left a replica and the database up.
	ServingPosts, ServingOK int
	LongestGap              time.Duration // between 2xx answers, inside those faults
	Details                 []string      // examples of what broke

	noReport bool // the run left the report out (Options.NoReport)
}

// Availability is the share of POSTs answered 2xx during serving faults.
func (v Verdict) Availability() float64 {
	if v.ServingPosts == 0 {
		return 1
	}
	return float64(v.ServingOK) / float64(v.ServingPosts)
}

// Failures names every broken invariant (availability is reported, not
// judged).
func (v Verdict) Failures() []string {
	var fs []string
	add := func(n int, what string) {
		if n != 0 {
			fs = append(fs, fmt.Sprintf("%s: %d", what, n))
		}
	}
	add(v.Lost, "acknowledged documents lost")
	add(v.Duplicated, "acknowledged documents stored twice")
	add(v.SubmittedLost, "documents accepted by the hub's API lost")
	add(v.NotFinal, "outbound messages without a final state")
	add(v.FinalTwice, "outbound messages with two final states")
	add(v.PartnerStoredTwice, "outbound messages the partner stored twice")
	add(v.OverPosted, "Message-IDs posted to the partner more often than attempts recorded")
	add(v.MDNAppliedTwice, "async MDNs applied twice")
	add(v.DeliveredWithoutMDN, "delivered messages without an applied MDN")
	add(v.MDNsPending, "async MDNs left pending")
	add(v.ReportDaysWrong, "report days without exactly one mail")
	add(v.RecountMismatch, "report mails unequal to a recount")
	add(v.Stale, "stale fenced writes accepted")
	add(v.Interleaved, "interleaved fenced writes")
	add(v.UnknownWrites, "fenced writes of no opened term")
	add(v.Backwards, "terms out of token order (token backwards)")
	if v.ReportDays == 0 && !v.noReport {
		fs = append(fs, "no report day stored")
	}
	return fs
}

func (v *Verdict) detail(format string, args ...any) {
	if len(v.Details) < 20 {
		v.Details = append(v.Details, fmt.Sprintf(format, args...))
	}
}

// check runs every checker on the settled stack.
func (s *stack) check(ctx context.Context, outcomes []*Outcome, accepted []string) (Verdict, error) {
	v := Verdict{noReport: s.o.NoReport}
	if err := s.checkSubmitted(ctx, &v, accepted); err != nil {
		return v, err
	}
	checks := []func(context.Context, *Verdict) error{s.checkInbound, s.checkOutbound, s.checkMDNs, s.checkFence}
	if !s.o.NoReport {
		checks = append(checks, s.checkReport)
	}
	for _, f := range checks {
		if err := f(ctx, &v); err != nil {
			return v, err
		}
	}
	v.availability(s.hubFront.Posts(), outcomes)
	return v, nil
}

// countBy runs q (two columns: text key, bigint count) into a map.
func countBy(ctx context.Context, db *pgxpool.Pool, q string, args ...any) (map[string]int, error) {
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	m := map[string]int{}
	var k string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error { m[k] = n; return nil })
	return m, err
}

// checkInbound: every document the partner got a positive MDN for is
// stored by the hub exactly once.
func (s *stack) checkInbound(ctx context.Context, v *Verdict) error {
	rows, err := s.partnerDB.Query(ctx, `SELECT message_id, status FROM messages WHERE direction = 'outbound'`)
	if err != nil {
		return fmt.Errorf("partner's outbound: %w", err)
	}
	status := map[string]string{}
	var id, st string
	if _, err := pgx.ForEachRow(rows, []any{&id, &st}, func() error { status[id] = st; return nil }); err != nil {
		return fmt.Errorf("partner's outbound: %w", err)
	}
	stored, err := countBy(ctx, s.hubDB, `SELECT message_id, count(*) FROM messages WHERE direction = 'inbound' GROUP BY message_id`)
	if err != nil {
		return fmt.Errorf("hub's inbound: %w", err)
	}
	for id, st := range status {
		switch st {
		case "delivered":
			v.Acknowledged++
			switch n := stored[id]; {
			case n == 0:
				v.Lost++
				v.detail("lost: %s was acknowledged to the partner, the hub has no such message", id)
			case n > 1:
				v.Duplicated++
				v.detail("duplicated: the hub stored %s %d times", id, n)
			}
		case "failed":
			v.PartnerFailed++
		default:
			v.PartnerNotFinal++
		}
	}
	return nil
}

// checkOutbound: every hub → partner message reached exactly one final
// state, the partner stored it at most once, and was posted each
// Message-ID at most once per attempt the hub recorded.
func (s *stack) checkOutbound(ctx context.Context, v *Verdict) error {
	rows, err := s.hubDB.Query(ctx, `SELECT m.message_id, m.status, greatest(m.attempts, (SELECT count(*) FROM message_attempts a WHERE a.message_id = m.id),
	        (SELECT coalesce(sum(o.attempts), 0) FROM outbox o WHERE o.kind = 'message' AND o.message_id = m.id)),
	        (SELECT count(*) FROM events e WHERE e.message = m.id AND e.type IN ('delivered', 'failed'))
	   FROM messages m WHERE m.direction = 'outbound'`)
	if err != nil {
		return fmt.Errorf("hub's outbound: %w", err)
	}
	type out struct {
		status          string
		attempts, final int
	}
	msgs := map[string]out{}
	var id string
	var o out
	if _, err := pgx.ForEachRow(rows, []any{&id, &o.status, &o.attempts, &o.final}, func() error { msgs[id] = o; return nil }); err != nil {
		return fmt.Errorf("hub's outbound: %w", err)
	}
	stored, err := countBy(ctx, s.partnerDB, `SELECT message_id, count(*) FROM messages WHERE direction = 'inbound' GROUP BY message_id`)
	if err != nil {
		return fmt.Errorf("partner's inbound: %w", err)
	}
	posted := map[string]int{}
	for _, p := range s.partnerFront.Posts() {
		if !p.MDN {
			posted[p.MessageID]++
		}
	}
	v.Outbound = len(msgs)
	for id, m := range msgs {
		switch {
		case m.status == "delivered":
			v.Delivered++
		case m.status == "failed":
			v.Failed++
		}
		if m.final == 0 || (m.status != "delivered" && m.status != "failed") {
			v.NotFinal++
			v.detail("not final: %s is %s; %s", id, m.status, s.mdnStory(ctx, id))
		}
		if m.final > 1 {
			v.FinalTwice++
			v.detail("final twice: %s has %d delivered/failed events", id, m.final)
		}
		if stored[id] > 1 {
			v.PartnerStoredTwice++
			v.detail("the partner stored %s %d times", id, stored[id])
		}
		if posted[id] > m.attempts {
			v.OverPosted++
			v.detail("%s was posted to the partner %d times, the hub recorded %d attempts", id, posted[id], m.attempts)
		}
	}
	return nil
}

// mdnStory tells what became of the async MDN of outbound message id: the
// partner's MDN deliveries and the hub's inbox rows for it.
func (s *stack) mdnStory(ctx context.Context, id string) string {
	var partner, hub string
	err := s.partnerDB.QueryRow(ctx, `
SELECT coalesce(string_agg(format('%s after %s attempts (%s)', o.status, o.attempts, o.last_error), '; '), 'none')
  FROM outbox o JOIN messages m ON m.id = o.message_id
 WHERE o.kind = 'mdn' AND m.direction = 'inbound' AND m.message_id = $1`, id).Scan(&partner)
	if err != nil {
		partner = err.Error()
	}
	if err := s.hubDB.QueryRow(ctx, `
SELECT coalesce(string_agg(format('%s (%s)', state, reason), '; '), 'none') FROM mdn_inbox WHERE original_message_id = $1`, id).Scan(&hub); err != nil {
		hub = err.Error()
	}
	return fmt.Sprintf("the partner's MDN deliveries: %s; the hub's inbox: %s", partner, hub)
}

// checkMDNs: every async MDN applied once; every delivered message has
// its MDN applied; none is left pending.
func (s *stack) checkMDNs(ctx context.Context, v *Verdict) error {
	applied, err := countBy(ctx, s.hubDB, `SELECT m.message_id, count(i.id) FILTER (WHERE i.state = 'processed' AND i.result IN ('delivered', 'failed'))
	   FROM messages m LEFT JOIN mdn_inbox i ON i.message_ref = m.id
	  WHERE m.direction = 'outbound' AND m.status = 'delivered' GROUP BY m.message_id`)
	if err != nil {
		return fmt.Errorf("MDN inbox: %w", err)
	}
	for id, n := range applied {
		v.MDNsApplied += min(n, 1)
		switch {
		case n == 0:
			v.DeliveredWithoutMDN++
			v.detail("%s is delivered with no applied MDN", id)
		case n > 1:
			v.MDNAppliedTwice++
			v.detail("%s had %d MDNs applied", id, n)
		}
	}
	return s.hubDB.QueryRow(ctx, `SELECT count(*) FROM mdn_inbox WHERE state = 'pending'`).Scan(&v.MDNsPending)
}

// checkFence judges the terms and accepted fenced writes (test/failover's
// checker) across every fault, the database failover included.
func (s *stack) checkFence(ctx context.Context, v *Verdict) error {
	h, err := s.hub.History(ctx)
	if err != nil {
		return err
	}
	h.Terms = slices.DeleteFunc(h.Terms, func(t failover.Term) bool { return t.Identity == seedHolder })
	fv := failover.Check(h)
	v.Terms, v.Beats = len(h.Terms), len(h.Beats)
	v.Stale, v.Interleaved, v.UnknownWrites, v.Backwards = len(fv.Stale), len(fv.Interleaved), len(fv.Unknown), len(fv.Unordered)
	if err := fv.Err(); err != nil {
		v.detail("fence: %v", err)
	}
	return nil
}

// availability counts the partner's POSTs during each fault and, once
// each, those during serving faults, with the longest time without a 2xx
// answer inside a serving fault.
func (v *Verdict) availability(posts []Post, outcomes []*Outcome) {
	serving := func(p Post) bool {
		for _, o := range outcomes {
			if o != nil && o.Serving && !p.At.Before(o.Start) && !p.At.After(o.End) {
				return true
			}
		}
		return false
	}
	for _, p := range posts {
		if serving(p) {
			v.ServingPosts++
			if p.OK() {
				v.ServingOK++
			}
		}
	}
	for _, o := range outcomes {
		if o == nil {
			continue
		}
		last := o.Start
		for _, p := range posts {
			if p.At.Before(o.Start) || p.At.After(o.End) {
				continue
			}
			o.Posts++
			if !p.OK() {
				continue
			}
			o.PostsOK++
			answered := p.At.Add(p.Took)
			if o.Serving {
				v.LongestGap = max(v.LongestGap, answered.Sub(last))
			}
			if answered.After(last) {
				last = answered
			}
		}
		if o.Serving {
			v.LongestGap = max(v.LongestGap, o.End.Sub(last))
		}
	}
}

// checkSubmitted: every document the hub's API accepted is stored.
func (s *stack) checkSubmitted(ctx context.Context, v *Verdict, accepted []string) error {
	have, err := countBy(ctx, s.hubDB, `SELECT message_id, count(*) FROM messages WHERE direction = 'outbound' GROUP BY message_id`)
	if err != nil {
		return fmt.Errorf("hub's outbound: %w", err)
	}
	for _, id := range accepted {
		if have[id] == 0 {
			v.SubmittedLost++
			v.detail("lost: the hub's API accepted %s, the hub has no such message", id)
		}
	}
	return nil
}
