package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edihub/edihub/test/failover"
)

// Kind is a kind of fault.
type Kind string

// The fault kinds of issue 21.
const (
	KillLeader       Kind = "kill-leader"
	KillFollower     Kind = "kill-follower"
	FreezeLeader     Kind = "freeze-leader"
	CutLeaderAPI     Kind = "cut-leader-api"
	CutLeaderDB      Kind = "cut-leader-db"
	RestartAPIServer Kind = "restart-apiserver"
	DBFailover       Kind = "db-failover"
	SMTPDown         Kind = "smtp-down"
	RollingRestart   Kind = "rolling-restart"
)

// Kinds are the kinds the schedule draws from; SMTPDown is not among them:
// it comes once, at the report time, beside whatever fault runs then.
var Kinds = []Kind{KillLeader, KillFollower, FreezeLeader, CutLeaderAPI, CutLeaderDB, RestartAPIServer, DBFailover, RollingRestart}

// Outcome is one fault as it happened.
type Outcome struct {
	Kind   Kind
	Victim string
	// Start and End bound the fault: from its injection until the harness
	// had healed it (victim back, cut restored, successor leading).
	Start, End time.Time
	// Successor is the time from the fault to the (new) leader's workers
	// running ("became leader"); OldStopped to the old leader's workers
	// stopped ("lost leadership", "released", or its SIGKILL). Negative:
	// does not apply.
	Successor, OldStopped time.Duration
	// Receiving is, for a database failover, the time from the primary's
	// kill to the first document the hub answered 2xx again; for SMTP
	// down, from SMTP back to the report mail. Negative: does not apply.
	Receiving time.Duration
	// Serving: a replica and the database stayed up throughout, so the
	// partner's POSTs should have been answered.
	Serving bool
	// Posts and PostsOK count the partner's POSTs that arrived during the
	// fault and those answered 2xx (set by the checker).
	Posts, PostsOK int
	Err            error
}

func newOutcome(k Kind) *Outcome {
	return &Outcome{Kind: k, Start: time.Now(), Successor: -1, OldStopped: -1, Receiving: -1, Serving: true}
}

// inject runs one fault of kind k and heals it.
func (s *stack) inject(ctx context.Context, k Kind) *Outcome {
	out := newOutcome(k)
	var err error
	switch k {
	case KillLeader:
		err = s.killLeader(ctx, out)
	case KillFollower:
		err = s.killFollower(ctx, out)
	case FreezeLeader:
		err = s.freezeLeader(ctx, out)
	case CutLeaderAPI, CutLeaderDB:
		err = s.cutLeader(ctx, out, k == CutLeaderDB)
	case RestartAPIServer:
		err = s.restartAPIServer(ctx, out)
	case DBFailover:
		out.Serving = false
		err = s.dbFailover(ctx, out)
	case RollingRestart:
		err = s.rollingRestart(ctx, out)
	default:
		err = fmt.Errorf("unknown fault kind %q", k)
	}
	out.End = time.Now()
	out.Err = err
	return out
}

// leader waits until exactly one running replica says it leads and
// returns it with its term's token.
func (s *stack) leader(ctx context.Context) (*failover.Replica, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*s.o.lease()+30*time.Second)
	defer cancel()
	for {
		ls, _ := s.hub.Leaders(ctx)
		if len(ls) == 1 {
			if st, err := ls[0].Leader(ctx); err == nil && st.IsLeader {
				return ls[0], st.FencingToken, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("no single leader: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// settle waits until every replica runs and is ready and one leads.
func (s *stack) settle(ctx context.Context) error {
	for _, r := range s.hub.Replicas() {
		if r.PID() == 0 {
			if err := r.Start(); err != nil {
				return err
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := s.hub.WaitReady(wctx); err != nil {
		return err
	}
	_, _, err := s.leader(ctx)
	return err
}

// successor waits for a replica other than old to become leader after at
// and records the time in out.
func (s *stack) successor(ctx context.Context, out *Outcome, at time.Time, old *failover.Replica) error {
	wctx, cancel := context.WithTimeout(ctx, 4*s.o.lease()+time.Minute)
	defer cancel()
	ev, _, err := s.hub.WaitNewLeader(wctx, at, old)
	if err != nil {
		return err
	}
	out.Successor = ev.Time.Sub(at)
	return nil
}

// termEnd waits for old's term token to end after at and records it.
func (s *stack) termEnd(ctx context.Context, out *Outcome, at time.Time, old *failover.Replica, token int64) error {
	wctx, cancel := context.WithTimeout(ctx, 4*s.o.lease()+time.Minute)
	defer cancel()
	ev, err := s.hub.WaitTermEnd(wctx, at, old, token)
	if err != nil {
		return fmt.Errorf("%s did not log the end of term %d: %w", old.Spec.Name, token, err)
	}
	out.OldStopped = ev.Time.Sub(at)
	return nil
}

// restart starts r again and waits until it is ready.
func restart(ctx context.Context, r *failover.Replica) error {
	if err := r.Start(); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return r.WaitReady(wctx)
}

func (s *stack) killLeader(ctx context.Context, out *Outcome) error {
	l, _, err := s.leader(ctx)
	if err != nil {
		return err
	}
	out.Victim = l.Spec.Name
	at, err := l.Kill(ctx)
	if err != nil {
		return err
	}
	out.OldStopped = 0 // its workers died with it
	err = s.successor(ctx, out, at, l)
	return errors.Join(err, restart(ctx, l))
}

func (s *stack) killFollower(ctx context.Context, out *Outcome) error {
	l, _, err := s.leader(ctx)
	if err != nil {
		return err
	}
	for _, r := range s.hub.Replicas() {
		if r == l || r.PID() == 0 {
			continue
		}
		out.Victim = r.Spec.Name
		if _, err := r.Kill(ctx); err != nil {
			return err
		}
		time.Sleep(2 * time.Second) // as a restarting pod would be gone
		return restart(ctx, r)
	}
	return errors.New("no follower running")
}

func (s *stack) freezeLeader(ctx context.Context, out *Outcome) error {
	l, token, err := s.leader(ctx)
	if err != nil {
		return err
	}
	out.Victim = l.Spec.Name
	at, err := l.Freeze(ctx)
	if err != nil {
		return err
	}
	err = s.successor(ctx, out, at, l)
	// Past the lease, whatever happened, then wake it: it must find
	// itself deposed and stop its workers.
	if wait := time.Until(at.Add(s.o.lease() + 2*time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	if _, rerr := l.Resume(ctx); rerr != nil {
		return errors.Join(err, rerr)
	}
	return errors.Join(err, s.termEnd(ctx, out, at, l, token))
}

func (s *stack) cutLeader(ctx context.Context, out *Outcome, database bool) error {
	l, token, err := s.leader(ctx)
	if err != nil {
		return err
	}
	out.Victim = l.Spec.Name
	cut, heal := l.Cut, l.Restore
	if database {
		cut, heal = l.CutDatabase, l.RestoreDatabase
	}
	at := cut()
	err = errors.Join(s.successor(ctx, out, at, l), s.termEnd(ctx, out, at, l, token))
	heal()
	return err
}

func (s *stack) restartAPIServer(ctx context.Context, out *Outcome) error {
	_, _, err := s.leader(ctx)
	if err != nil {
		return err
	}
	out.Victim = "kube-apiserver"
	if err := s.cp.StopAPIServer(); err != nil {
		return err
	}
	time.Sleep(s.o.lease() / 4)
	if err := s.cp.StartAPIServer(ctx); err != nil {
		return err
	}
	// Whoever leads now (the same replica, or another after a step
	// down): the time until a leader's workers run again.
	_, _, err = s.leader(ctx)
	out.Successor = time.Since(out.Start)
	return err
}

func (s *stack) rollingRestart(ctx context.Context, out *Outcome) error {
	out.Victim = "all"
	for _, r := range s.hub.Replicas() {
		l, token, err := s.leader(ctx)
		if err != nil {
			return err
		}
		at, err := r.Terminate(ctx)
		if err != nil {
			return err
		}
		if r == l {
			// The graceful handoff: released, then a successor.
			if err := errors.Join(s.termEnd(ctx, out, at, l, token), s.successor(ctx, out, at, l)); err != nil {
				return err
			}
		}
		if err := waitExit(ctx, r, time.Minute); err != nil {
			return err
		}
		if err := restart(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// waitExit waits up to d for r's process to exit (its exit status is not
// judged: a SIGTERMed replica exits 0 or by the signal).
func waitExit(ctx context.Context, r *failover.Replica, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	_ = r.Wait(wctx)
	if err := wctx.Err(); err != nil {
		return fmt.Errorf("%s did not exit on SIGTERM: %w", r.Spec.Name, err)
	}
	return nil
}
