package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/hub"
)

// DayTraffic is what the database holds about one report window [Start,
// End): raw figures, grouped but not interpreted. internal/report turns
// them into the day's report.
type DayTraffic struct {
	Start, End time.Time
	// Groups are the messages created in the window, grouped by partner,
	// direction, status, disposition and the overdue flag.
	Groups []MessageGroup
	// Latency is the time from submission to the MDN that settled an
	// outbound message of the window (status delivered or failed, with a
	// disposition), per partner; Partner "" is the whole hub.
	Latency []LatencyGroup
	// Duplicates answered in the window (by the time the resend came),
	// per partner.
	Duplicates map[string]int64
	// Hourly counts the messages created in the window per direction and
	// hour since Start (bucket 0 is [Start, Start+1h)).
	Hourly []HourCount
	// Terms opened in the window on the lease; Failovers those of them
	// whose predecessor term had another holder.
	Terms, Failovers int64
	// FencingRejections in the window, on the lease.
	FencingRejections int64
	// EDI counts the interchanges of the window's messages per partner:
	// sent and their acknowledgement states, duplicates received.
	EDI []EDIGroup
	// BacklogOutbound counts outbound messages created before End and not
	// finished at End; BacklogMDNInbox async MDNs received before End and
	// not processed at End.
	BacklogOutbound, BacklogMDNInbox int64
}

// MessageGroup is a count of messages sharing the grouped columns.
type MessageGroup struct {
	Partner     string
	Direction   string
	Status      string
	Disposition string
	Overdue     bool
	Count       int64
	// Bytes is the sum of payload sizes.
	Bytes int64
	// Retries is the sum of attempts beyond the first.
	Retries int64
}

// EDIGroup is one partner's interchange figures of a window.
type EDIGroup struct {
	Partner string
	// Sent: outbound interchanges other than acknowledgements.
	Sent                           int64
	Accepted, WithErrors, Rejected int64
	Overdue                        int64
	Duplicates, DuplicatesRefused  int64
}

// LatencyGroup is the distribution of MDN latencies of one partner (or
// the hub, Partner ""), in seconds.
type LatencyGroup struct {
	Partner  string
	Count    int64
	P50, P95 float64
}

// HourCount is the number of messages of one direction created in one
// hour of the window.
type HourCount struct {
	Hour      int
	Direction string
	Count     int64
}

// DayTraffic reads the raw figures of the window [start, end) for the
// leadership lease lease, in one read-only transaction (one snapshot).
func (s *Store) DayTraffic(ctx context.Context, start, end time.Time, lease string) (*DayTraffic, error) {
	if !end.After(start) {
		return nil, fmt.Errorf("day traffic: empty window %s..%s", start, end)
	}
	d := &DayTraffic{Start: start, End: end, Duplicates: map[string]int64{}}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly, IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		return readDayTraffic(ctx, tx, d, lease)
	})
	if err != nil {
		return nil, fmt.Errorf("day traffic %s..%s: %w", start.Format(time.RFC3339), end.Format(time.RFC3339), err)
	}
	return d, nil
}

// The queries of DayTraffic. $1 and $2 are the window's start and end, $3
// the lease.
const (
	messageGroupsSQL = `
SELECT partner, direction, status, disposition, mdn_overdue, count(*), coalesce(sum(payload_size), 0),
       coalesce(sum(greatest(attempts - 1, 0)), 0)
  FROM messages
 WHERE created_at >= $1 AND created_at < $2
 GROUP BY 1, 2, 3, 4, 5
 ORDER BY 1, 2, 3, 4, 5`

	latencySQL = `
SELECT coalesce(partner, ''), count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - created_at)),
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM completed_at - created_at))
  FROM messages
 WHERE created_at >= $1 AND created_at < $2 AND direction = 'outbound'
   AND status IN ('delivered', 'failed') AND disposition <> '' AND completed_at IS NOT NULL
 GROUP BY GROUPING SETS ((partner), ())
HAVING count(*) > 0`

	duplicatesSQL = `
SELECT partner, count(*) FROM duplicates WHERE answered_at >= $1 AND answered_at < $2 GROUP BY partner`

	hourlySQL = `
SELECT floor(extract(epoch FROM created_at - $1::timestamptz) / 3600)::int, direction, count(*)
  FROM messages
 WHERE created_at >= $1 AND created_at < $2
 GROUP BY 1, 2 ORDER BY 1, 2`

	termsSQL = `
SELECT count(*) FILTER (WHERE opened_at >= $1 AND opened_at < $2),
       count(*) FILTER (WHERE opened_at >= $1 AND opened_at < $2 AND prev IS NOT NULL AND prev <> holder)
  FROM (SELECT opened_at, holder, lag(holder) OVER (ORDER BY token) AS prev FROM leader_terms WHERE lease = $3) t`

	fencingRejectionsSQL = `
SELECT count(*) FROM fencing_rejections WHERE lease = $3 AND rejected_at >= $1 AND rejected_at < $2`

	ediSQL = `
SELECT partner, sum(sent), sum(accepted), sum(with_errors), sum(rejected), sum(overdue), sum(dups), sum(refused) FROM (
  SELECT partner,
         count(*) FILTER (WHERE direction = 'outbound' AND cardinality(ack_kinds) = 0) AS sent,
         count(*) FILTER (WHERE direction = 'outbound' AND ack_status = 'accepted') AS accepted,
         count(*) FILTER (WHERE direction = 'outbound' AND ack_status = 'accepted-with-errors') AS with_errors,
         count(*) FILTER (WHERE direction = 'outbound' AND ack_status = 'rejected') AS rejected,
         count(*) FILTER (WHERE ack_overdue AND ack_status = 'pending') AS overdue,
         0 AS dups, 0 AS refused
    FROM message_interchanges WHERE created_at >= $1 AND created_at < $2 GROUP BY partner
  UNION ALL
  SELECT partner, 0, 0, 0, 0, 0, count(*), count(*) FILTER (WHERE refused)
    FROM interchange_duplicates WHERE at >= $1 AND at < $2 GROUP BY partner) t
 GROUP BY partner ORDER BY partner`

	// backlogSQL takes only the window's end, as $1.
	backlogSQL = `
SELECT (SELECT count(*) FROM messages
         WHERE direction = 'outbound' AND created_at < $1 AND (completed_at IS NULL OR completed_at >= $1)),
       (SELECT count(*) FROM mdn_inbox
         WHERE received_at < $1 AND (processed_at IS NULL OR processed_at >= $1))`
)

// readDayTraffic fills d, whose Start, End and Duplicates map are set,
// from tx.
func readDayTraffic(ctx context.Context, tx pgx.Tx, d *DayTraffic, lease string) error {
	start, end := d.Start, d.End
	var err error
	if d.Groups, err = collectWindow(ctx, tx, messageGroupsSQL, start, end, func(r pgx.CollectableRow) (MessageGroup, error) {
		var g MessageGroup
		err := r.Scan(&g.Partner, &g.Direction, &g.Status, &g.Disposition, &g.Overdue, &g.Count, &g.Bytes, &g.Retries)
		return g, err
	}); err != nil {
		return fmt.Errorf("messages: %w", err)
	}
	if d.Latency, err = collectWindow(ctx, tx, latencySQL, start, end, func(r pgx.CollectableRow) (LatencyGroup, error) {
		var g LatencyGroup
		err := r.Scan(&g.Partner, &g.Count, &g.P50, &g.P95)
		return g, err
	}); err != nil {
		return fmt.Errorf("latency: %w", err)
	}
	if err := readDuplicates(ctx, tx, start, end, d.Duplicates); err != nil {
		return fmt.Errorf("duplicates: %w", err)
	}
	if d.Hourly, err = collectWindow(ctx, tx, hourlySQL, start, end, func(r pgx.CollectableRow) (HourCount, error) {
		var h HourCount
		err := r.Scan(&h.Hour, &h.Direction, &h.Count)
		return h, err
	}); err != nil {
		return fmt.Errorf("hourly: %w", err)
	}
	if err := tx.QueryRow(ctx, termsSQL, start, end, lease).Scan(&d.Terms, &d.Failovers); err != nil {
		return fmt.Errorf("terms: %w", err)
	}
	if err := tx.QueryRow(ctx, fencingRejectionsSQL, start, end, lease).Scan(&d.FencingRejections); err != nil {
		return fmt.Errorf("fencing rejections: %w", err)
	}
	if d.EDI, err = collectWindow(ctx, tx, ediSQL, start, end, func(r pgx.CollectableRow) (EDIGroup, error) {
		var g EDIGroup
		err := r.Scan(&g.Partner, &g.Sent, &g.Accepted, &g.WithErrors, &g.Rejected, &g.Overdue, &g.Duplicates, &g.DuplicatesRefused)
		return g, err
	}); err != nil {
		return fmt.Errorf("interchanges: %w", err)
	}
	if err := tx.QueryRow(ctx, backlogSQL, end).Scan(&d.BacklogOutbound, &d.BacklogMDNInbox); err != nil {
		return fmt.Errorf("backlog: %w", err)
	}
	return nil
}

// collectWindow runs query over the window [start, end) and scans every row
// with scan.
func collectWindow[T any](ctx context.Context, tx pgx.Tx, query string, start, end time.Time, scan pgx.RowToFunc[T]) ([]T, error) {
	rows, err := tx.Query(ctx, query, start, end)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scan)
}

// readDuplicates adds the duplicates answered in [start, end) to
// perPartner.
func readDuplicates(ctx context.Context, tx pgx.Tx, start, end time.Time, perPartner map[string]int64) error {
	rows, err := tx.Query(ctx, duplicatesSQL, start, end)
	if err != nil {
		return err
	}
	var p string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&p, &n}, func() error { perPartner[p] = n; return nil })
	return err
}

// ErrReportNotFound reports a day with no stored report.
var ErrReportNotFound = errors.New("no report stored for the day")

// StoredReport is a row of the reports table.
type StoredReport struct {
	// Day is the report's local calendar day, YYYY-MM-DD.
	Day         string
	GeneratedAt time.Time
	Fence       int64
	Figures     []byte // JSON
	HTML, CSV   string
	// MailClaimedAt, MailClaimedFence and MailClaimedBy are set once the
	// mail was claimed; MailedAt once it was sent.
	MailClaimedAt    *time.Time
	MailClaimedFence *int64
	MailClaimedBy    string
	MailedAt         *time.Time
	MailError        string
}

// NewReport is a report to store.
type NewReport struct {
	Day       string // YYYY-MM-DD
	Figures   []byte // JSON
	HTML, CSV string
}

const reportColumns = `to_char(day, 'YYYY-MM-DD'), generated_at, fence, figures, html, csv,
       mail_claimed_at, mail_claimed_fence, mail_claimed_by, mailed_at, mail_error`

func scanReport(r pgx.Row) (StoredReport, error) {
	var s StoredReport
	err := r.Scan(&s.Day, &s.GeneratedAt, &s.Fence, &s.Figures, &s.HTML, &s.CSV,
		&s.MailClaimedAt, &s.MailClaimedFence, &s.MailClaimedBy, &s.MailedAt, &s.MailError)
	return s, err
}

// Report returns the stored report of day (YYYY-MM-DD), or
// ErrReportNotFound.
func (s *Store) Report(ctx context.Context, day string) (StoredReport, error) {
	r, err := scanReport(s.pool.QueryRow(ctx, `SELECT `+reportColumns+` FROM reports WHERE day = $1::date`, day))
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("report %s: %w", day, ErrReportNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("report %s: %w", day, err)
	}
	return r, nil
}

// SaveReport stores r through the fenced path unless the day already has
// a report, and returns the day's stored report (the one just written or
// the earlier one: a stored report is never replaced, so a repeated mail
// carries the same figures). It returns hub.ErrStaleFence when f is stale.
func (s *Store) SaveReport(ctx context.Context, f hub.Fence, r NewReport) (StoredReport, error) {
	var out StoredReport
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO reports (day, fence, figures, html, csv) VALUES ($1::date, $2, $3, $4, $5)
ON CONFLICT (day) DO NOTHING`, r.Day, f.Token, r.Figures, r.HTML, r.CSV); err != nil {
			return err
		}
		var err error
		out, err = scanReport(tx.QueryRow(ctx, `SELECT `+reportColumns+` FROM reports WHERE day = $1::date`, r.Day))
		return err
	})
	if err != nil {
		return out, fmt.Errorf("save report %s: %w", r.Day, err)
	}
	return out, nil
}

// ErrReportMailed reports a day whose report mail was already sent.
var ErrReportMailed = errors.New("report already mailed")

// ErrReportClaimed reports a day whose report mail is claimed by someone
// else whose claim still stands (a newer term, or an operator's command
// under the current term, younger than the takeover age).
var ErrReportClaimed = errors.New("report mail claimed by another sender")

// ClaimReportMail claims the mail of day's stored report for holder in
// term f, through the fenced path, before the mail leaves. The claim is
// taken when the report was not mailed and its mail is unclaimed, claimed
// by an older term (whose holder crashed or was deposed: the mail may
// leave twice, with the same Message-ID), claimed by holder itself in
// this term (a retry), or claimed under this term by someone else longer
// ago than takeover (an edihub report -send that died).
//
// It returns ErrReportMailed when the day was mailed, ErrReportClaimed
// when another claim stands, ErrReportNotFound without a stored report,
// and hub.ErrStaleFence when f is stale.
func (s *Store) ClaimReportMail(ctx context.Context, f hub.Fence, day, holder string, takeover time.Duration) error {
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		return claimReportMail(ctx, tx, day, f.Token, holder, takeover)
	})
	if err != nil {
		return fmt.Errorf("claim report mail %s: %w", day, err)
	}
	return nil
}

func claimReportMail(ctx context.Context, tx pgx.Tx, day string, token int64, holder string, takeover time.Duration) error {
	var (
		mailed  bool
		fence   *int64
		by      string
		expired bool
	)
	err := tx.QueryRow(ctx, `
SELECT mailed_at IS NOT NULL, mail_claimed_fence, mail_claimed_by,
       coalesce(mail_claimed_at < now() - $2 * interval '1 microsecond', true)
  FROM reports WHERE day = $1::date FOR UPDATE`, day, takeover.Microseconds()).Scan(&mailed, &fence, &by, &expired)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrReportNotFound
	case err != nil:
		return err
	case mailed:
		return ErrReportMailed
	case fence != nil && *fence > token:
		return ErrReportClaimed
	case fence != nil && *fence == token && by != holder && !expired:
		return ErrReportClaimed
	}
	_, err = tx.Exec(ctx, `
UPDATE reports SET mail_claimed_at = now(), mail_claimed_fence = $2, mail_claimed_by = $3 WHERE day = $1::date`,
		day, token, holder)
	return err
}

// MarkReportMailed records that day's report mail was sent under the
// claim of holder in term f. It returns hub.ErrStaleFence when f is stale and
// ErrReportClaimed when the claim is no longer holder's in f (a newer
// claim took over: that sender records its own mail).
func (s *Store) MarkReportMailed(ctx context.Context, f hub.Fence, day, holder string) error {
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		return markReportMailed(ctx, tx, day, f.Token, holder)
	})
	if err != nil {
		return fmt.Errorf("record report mail %s: %w", day, err)
	}
	return nil
}

func markReportMailed(ctx context.Context, tx pgx.Tx, day string, token int64, holder string) error {
	tag, err := tx.Exec(ctx, `
UPDATE reports SET mailed_at = now(), mail_error = ''
 WHERE day = $1::date AND mail_claimed_fence = $2 AND mail_claimed_by = $3 AND mailed_at IS NULL`, day, token, holder)
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrReportClaimed
	}
	return nil
}

// ReportMailFailed records why day's report mail failed (for operators;
// the claim stays, and its holder retries). It returns hub.ErrStaleFence when
// f is stale.
func (s *Store) ReportMailFailed(ctx context.Context, f hub.Fence, day, holder, reason string) error {
	err := s.fenced(ctx, f, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `
UPDATE reports SET mail_error = $4
 WHERE day = $1::date AND mail_claimed_fence = $2 AND mail_claimed_by = $3 AND mailed_at IS NULL`, day, f.Token, holder, reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("record report mail failure %s: %w", day, err)
	}
	return nil
}

// Operator commands (edihub report -send) hold no leadership term. They
// store and claim under the lease's current fencing token, read in the
// same transaction, and name themselves in mail_claimed_by, so the
// leader's worker (same token, other holder) leaves their claim alone
// until it is older than the takeover age, and the next term takes over.

// currentToken reads the lease's current token in tx, in share mode (as
// fenced does), or 0 when no term ever opened.
func currentToken(ctx context.Context, tx pgx.Tx, lease string) (int64, error) {
	var token int64
	err := tx.QueryRow(ctx, `SELECT token FROM leader_fence WHERE lease = $1 FOR SHARE`, lease).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	return token, err
}

// SaveReportManual is SaveReport for an operator command: the row is
// stamped with the lease's current token.
func (s *Store) SaveReportManual(ctx context.Context, lease string, r NewReport) (StoredReport, error) {
	var out StoredReport
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		token, err := currentToken(ctx, tx, lease)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `
INSERT INTO reports (day, fence, figures, html, csv) VALUES ($1::date, $2, $3, $4, $5)
ON CONFLICT (day) DO NOTHING`, r.Day, token, r.Figures, r.HTML, r.CSV); err != nil {
			return err
		}
		out, err = scanReport(tx.QueryRow(ctx, `SELECT `+reportColumns+` FROM reports WHERE day = $1::date`, r.Day))
		return err
	})
	if err != nil {
		return out, fmt.Errorf("save report %s: %w", r.Day, err)
	}
	return out, nil
}

// ClaimReportMailManual is ClaimReportMail for an operator command, under
// the lease's current token. It returns the token claimed under, for
// MarkReportMailedManual.
func (s *Store) ClaimReportMailManual(ctx context.Context, lease, day, by string, takeover time.Duration) (int64, error) {
	var token int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		if token, err = currentToken(ctx, tx, lease); err != nil {
			return err
		}
		return claimReportMail(ctx, tx, day, token, by, takeover)
	})
	if err != nil {
		return 0, fmt.Errorf("claim report mail %s: %w", day, err)
	}
	return token, nil
}

// MarkReportMailedManual records the mail sent under an operator's claim
// (token as ClaimReportMailManual returned). ErrReportClaimed: the claim
// was taken over meanwhile.
func (s *Store) MarkReportMailedManual(ctx context.Context, day string, token int64, by string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return markReportMailed(ctx, tx, day, token, by)
	})
	if err != nil {
		return fmt.Errorf("record report mail %s: %w", day, err)
	}
	return nil
}

// FirstTermOpened returns when the lease's first term opened, or
// ErrNoTerm: the hub did not run as a cluster before, so the report
// worker does not catch up days before it.
func (s *Store) FirstTermOpened(ctx context.Context, lease string) (time.Time, error) {
	var t *time.Time
	if err := s.pool.QueryRow(ctx, `SELECT min(opened_at) FROM leader_terms WHERE lease = $1`, lease).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("first term of %s: %w", lease, err)
	}
	if t == nil {
		return time.Time{}, fmt.Errorf("first term of %s: %w", lease, ErrNoTerm)
	}
	return *t, nil
}
