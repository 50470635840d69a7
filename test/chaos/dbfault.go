package chaos

import (
	"context"
	"fmt"
	"time"
)

// dbFailover is the database's fault: the replication link is cut (the
// standby lags) while traffic goes on, then the primary is killed, the
// standby promoted and the replicas' address repointed. With synchronous
// replication the primary's commits wait for the standby during the lag,
// so no partner gets an MDN for a document the standby does not have;
// with asynchronous replication they do not wait, and the failover loses
// them (Options.Async: the checker must say so).
func (s *stack) dbFailover(ctx context.Context, out *Outcome) error {
	out.Victim = "postgres primary"
	if s.standbyDone != nil {
		// The standby of the last failover: wait until it streams.
		select {
		case err := <-s.standbyDone:
			s.standbyDone = nil
			if err != nil {
				return fmt.Errorf("standby after the last failover: %w", err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.db.CutReplication()
	time.Sleep(3 * time.Second)
	killed := time.Now()
	promoted, done, err := s.db.Failover(ctx)
	if err != nil {
		return err
	}
	s.standbyDone = done
	s.o.Logf("  primary killed, standby promoted after %s", promoted.Sub(killed).Round(time.Millisecond))
	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for out.Receiving < 0 || out.Successor < 0 {
		if out.Receiving < 0 {
			for _, p := range s.hubFront.Posts() {
				if !p.MDN && p.OK() && p.At.After(killed) {
					out.Receiving = p.At.Add(p.Took).Sub(killed)
					break
				}
			}
		}
		if out.Successor < 0 {
			var at *time.Time
			err := s.hubDB.QueryRow(wctx, `SELECT min(beat_at) FROM leader_heartbeats WHERE beat_at > $1`, promoted).Scan(&at)
			if err == nil && at != nil {
				out.Successor = at.Sub(killed)
			}
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("after the promotion: receiving back %v, leader writing %v: %w", out.Receiving >= 0, out.Successor >= 0, wctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return nil
}

// smtpOutage takes the mail server down from shortly before the report
// time until after it, then waits for the report mail.
func (s *stack) smtpOutage(ctx context.Context, down time.Duration) *Outcome {
	select {
	case <-time.After(time.Until(s.reportAt.Add(-10 * time.Second))):
	case <-ctx.Done():
		return nil
	}
	out := newOutcome(SMTPDown)
	out.Victim = "smtp"
	s.mail.Down()
	select {
	case <-time.After(time.Until(s.reportAt.Add(down))):
	case <-ctx.Done():
	}
	if out.Err = s.mail.Up(); out.Err != nil {
		return out
	}
	up := time.Now()
	out.End = up
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		if ms := s.mail.Mails(); len(ms) > 0 {
			out.Receiving = ms[0].At.Sub(up)
			return out
		}
		select {
		case <-wctx.Done():
			out.Err = fmt.Errorf("no report mail within 5 minutes of SMTP coming back: %w", wctx.Err())
			return out
		case <-time.After(500 * time.Millisecond):
		}
	}
}
