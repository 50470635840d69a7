package failover_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/edihub/edihub/test/failover"
)

// bound is how long any step may take before the scenario fails instead of
// hanging; the figures themselves are logged, not asserted.
const bound = 2 * time.Minute

var backends = []failover.Backend{failover.Kubernetes, failover.Postgres}

func within(t *testing.T, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(t.Context(), d)
}

// leader waits for the cluster's first leader and its first accepted beat.
func (sc *scenario) leader(t *testing.T) (*failover.Replica, failover.Event) {
	t.Helper()
	ctx, cancel := within(t, bound)
	defer cancel()
	ev, r, _ := sc.takeover(t, ctx, time.Time{})
	return r, ev
}

// takeover waits for a new leader after since, other than the excluded
// replicas, and its term's first accepted heartbeat; it fails the test
// when there is none.
func (sc *scenario) takeover(t *testing.T, ctx context.Context, since time.Time, exclude ...*failover.Replica) (failover.Event, *failover.Replica, failover.Beat) {
	t.Helper()
	tk, err := sc.cl.WaitTakeover(ctx, since, exclude...)
	if err != nil {
		t.Fatal(err)
	}
	return tk.Became, tk.Leader, tk.Beat
}

// settled waits a few retry periods (would the old leader lead again, or
// write?), then checks that old runs no workers and next is the only
// leader.
func (sc *scenario) settled(t *testing.T, old, next *failover.Replica) {
	t.Helper()
	time.Sleep(3 * time.Second) // stays: real replicas run a few renewals so a late write of the old leader would show
	noWorkers(t, old)
	sc.onlyLeader(t, next)
}

// onlyLeader checks that want, and no other replica, says it leads.
func (sc *scenario) onlyLeader(t *testing.T, want *failover.Replica) {
	t.Helper()
	ctx, cancel := within(t, 10*time.Second)
	defer cancel()
	leaders, err := sc.cl.Leaders(ctx)
	if err != nil {
		t.Errorf("asking the replicas: %v", err)
	}
	if len(leaders) != 1 || leaders[0] != want {
		var names []string
		for _, r := range leaders {
			names = append(names, r.Spec.Name)
		}
		t.Errorf("replicas leading = %v, want only %s", names, want.Spec.Name)
	}
}

// noWorkers checks that the replica runs no leader-gated worker and says
// it does not lead.
func noWorkers(t *testing.T, r *failover.Replica) {
	t.Helper()
	ctx, cancel := within(t, 10*time.Second)
	defer cancel()
	if v, err := r.Metric(ctx, `edihub_worker_running{worker="heartbeat"}`); err != nil || v != 0 {
		t.Errorf("%s: edihub_worker_running{worker=\"heartbeat\"} = %v (%v), want 0", r.Spec.Name, v, err)
	}
	if st, err := r.Leader(ctx); err != nil || st.IsLeader {
		t.Errorf("%s: /leader is_leader = %v (%v), want false", r.Spec.Name, st.IsLeader, err)
	}
}

// verify reads the history and checks it: no stale, interleaved or
// unknown accepted write, terms in token order, and no overlapping terms
// except those allow accepts.
func (sc *scenario) verify(t *testing.T, allow func(a, b failover.Term) bool) failover.History {
	t.Helper()
	ctx, cancel := within(t, 30*time.Second)
	defer cancel()
	h, err := sc.cl.History(ctx)
	if err != nil {
		t.Fatalf("read history: %v", err)
	}
	t.Logf("history: %d terms, %d accepted writes\n%s", len(h.Terms), len(h.Beats), h.Summary())
	v := failover.Check(h)
	if err := v.Err(); err != nil {
		t.Error(err)
	}
	for _, p := range v.Overlapping {
		if allow == nil || !allow(p[0], p[1]) {
			t.Errorf("overlapping terms: %s and %s", p[0], p[1])
		}
	}
	if len(h.Beats) == 0 {
		t.Error("no accepted write at all: the scenario proved nothing")
	}
	return h
}

func forEachBackend(t *testing.T, fn func(t *testing.T, b failover.Backend)) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// TestStartup is scenario a: three replicas start; exactly one leads, with
// no transition before it (the delay after the first is ready, expected
// within one retry period, is logged), and nothing changes over two
// minutes.
func TestStartup(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b failover.Backend) {
		sc := start(t, b, setup{})
		l, became := sc.leader(t)
		var first time.Time
		for _, e := range sc.cl.Recorder().Events() {
			if e.Msg == failover.MsgStarted && (first.IsZero() || e.Time.Before(first)) {
				first = e.Time
			}
		}
		took := became.Time.Sub(first)
		// The figure depends on the machine's load; it is logged, not
		// asserted. What must hold: on a fresh cluster nobody holds the
		// lease, so the first leader takes it without a transition before
		// it (no lease waited out, no leadership lost or handed over).
		t.Logf("first replica started %s; %s became leader (token %d) %v later (retry period %v)",
			first.Format("15:04:05.000"), l.Spec.Name, became.Token, took, failover.RetryPeriod)
		for _, e := range sc.cl.Recorder().Events() {
			if e.Time.After(became.Time) {
				continue
			}
			switch {
			case e.Msg == failover.MsgBecameLeader && (e.Replica != l.Spec.Name || e.Token != became.Token),
				e.Msg == failover.MsgLost, e.Msg == failover.MsgReleased, e.Msg == failover.MsgSteppedDown:
				t.Errorf("before the first leader %s (token %d): %s %q token %d %s; want no transition on a fresh cluster",
					l.Spec.Name, became.Token, e.Replica, e.Msg, e.Token, e.Reason)
			}
		}

		observe := 2 * time.Minute
		end := time.Now().Add(observe)
		for time.Now().Before(end) {
			sc.onlyLeader(t, l)
			time.Sleep(2 * time.Second) // stays: samples the real cluster over the observation window
		}
		for _, e := range sc.cl.Recorder().Events() {
			switch {
			case e.Msg == failover.MsgBecameLeader && e.Token != became.Token,
				e.Msg == failover.MsgLost, e.Msg == failover.MsgReleased, e.Msg == failover.MsgSteppedDown:
				t.Errorf("transition during %v of steady state: %s %q token %d %s", observe, e.Replica, e.Msg, e.Token, e.Reason)
			}
		}
		ctx, cancel := within(t, 10*time.Second)
		defer cancel()
		for _, r := range sc.cl.Replicas() {
			want := 0.0
			if r == l {
				want = 1
			}
			if v, err := r.Metric(ctx, "edihub_leader_transitions_total"); err != nil || v != want {
				t.Errorf("%s: edihub_leader_transitions_total = %v (%v), want %v", r.Spec.Name, v, err, want)
			}
		}
		h := sc.verify(t, nil)
		if len(h.Terms) != 1 {
			t.Errorf("%d terms opened, want 1", len(h.Terms))
		}
		if n := len(h.Beats); n < int(observe/time.Second)*9/10 {
			t.Errorf("%d writes accepted over %v, want about one a second", n, observe)
		}
	})
}

// TestCrash is scenario b: the leader is killed (SIGKILL); another replica
// leads. Failover time: SIGKILL → the successor's first accepted heartbeat
// (its worker running and writing), database clock on this host.
func TestCrash(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b failover.Backend) {
		sc := start(t, b, setup{})
		l, _ := sc.leader(t)
		time.Sleep(3 * time.Second) // stays, real time: followers see a few renewals
		ctx, cancel := within(t, bound)
		defer cancel()
		killed, err := l.Kill(ctx)
		if err != nil {
			t.Fatal(err)
		}
		became, next, beat := sc.takeover(t, ctx, killed, l)
		t.Logf("crash failover (%s): SIGKILL of %s → %s's first heartbeat %v (its \"became leader\" line %v)",
			b, l.Spec.Name, next.Spec.Name, beat.At.Sub(killed), became.Time.Sub(killed))
		sc.onlyLeader(t, next)
		sc.verify(t, nil)
	})
}

// TestGracefulHandoff is scenario c: the leader gets SIGTERM; it stops its
// workers, releases the lease, exits cleanly, and a successor leads.
// Handoff time: SIGTERM → the successor's first accepted heartbeat.
func TestGracefulHandoff(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b failover.Backend) {
		sc := start(t, b, setup{})
		l, first := sc.leader(t)
		time.Sleep(3 * time.Second) // stays: real renewals and heartbeats before the fault
		ctx, cancel := within(t, bound)
		defer cancel()
		termed, err := l.Terminate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		became, next, beat := sc.takeover(t, ctx, termed, l)
		if err := l.Wait(ctx); err != nil {
			t.Errorf("%s exit after SIGTERM: %v, want status 0", l.Spec.Name, err)
		}
		released, err := sc.cl.WaitTermEnd(ctx, termed, l, first.Token)
		switch {
		case err != nil:
			t.Errorf("%s logged no end of its term: %v", l.Spec.Name, err)
		case released.Msg != failover.MsgReleased:
			t.Errorf("%s: %q (%s), want %q", l.Spec.Name, released.Msg, released.Reason, failover.MsgReleased)
		case released.Time.After(became.Time):
			t.Errorf("%s released at %s, after %s became leader at %s", l.Spec.Name, released.Time, next.Spec.Name, became.Time)
		}
		t.Logf("graceful handoff (%s): SIGTERM of %s → released %v → %s's first heartbeat %v",
			b, l.Spec.Name, released.Time.Sub(termed), next.Spec.Name, beat.At.Sub(termed))
		sc.onlyLeader(t, next)
		sc.verify(t, nil)
	})
}

// TestFrozenLeader is scenario d: the leader is frozen (SIGSTOP) for 45 s,
// longer than the lease, and resumed. A successor leads meanwhile; no write
// of the old term is accepted after the successor's term opened; the old
// leader stops its workers and follows.
func TestFrozenLeader(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b failover.Backend) {
		sc := start(t, b, setup{})
		l, old := sc.leader(t)
		time.Sleep(3 * time.Second) // stays: real renewals and heartbeats before the fault
		ctx, cancel := within(t, bound)
		defer cancel()
		frozen, err := l.Freeze(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tk, err := sc.cl.WaitTakeover(ctx, frozen, l)
		if err != nil {
			_, _ = l.Resume(ctx)
			t.Fatal(err)
		}
		became, next, beat := tk.Became, tk.Leader, tk.Beat
		t.Logf("%s frozen; %s leads (token %d) %v later (first heartbeat)", l.Spec.Name, next.Spec.Name, became.Token, beat.At.Sub(frozen))
		time.Sleep(time.Until(frozen.Add(45 * time.Second))) // stays: the freeze lasts past the real lease duration on purpose
		resumed, err := l.Resume(ctx)
		if err != nil {
			t.Fatal(err)
		}
		end, err := sc.cl.WaitTermEnd(ctx, resumed, l, old.Token)
		if err != nil {
			t.Fatalf("%s did not end its old term after resuming: %v", l.Spec.Name, err)
		}
		t.Logf("%s resumed; %q (%s) %v later", l.Spec.Name, end.Msg, end.Reason, end.Time.Sub(resumed))
		sc.settled(t, l, next)
		mctx, mcancel := within(t, 10*time.Second)
		rejected, err := l.Metric(mctx, "edihub_fencing_rejections_total")
		mcancel()
		if err != nil {
			t.Error(err)
		}
		t.Logf("%s: edihub_fencing_rejections_total = %v (writes it attempted after resuming and the fence refused)", l.Spec.Name, rejected)

		// The old leader believed it led while frozen: its term overlaps
		// its successor's by design. The fence must have refused it.
		h := sc.verify(t, func(a, b failover.Term) bool {
			return (a.Token == old.Token || b.Token == old.Token) && (a.Token == became.Token || b.Token == became.Token)
		})
		var successor failover.Term
		for _, term := range h.Terms {
			if term.Token == became.Token {
				successor = term
			}
		}
		for _, beat := range h.Beats {
			if beat.Token == old.Token && (beat.At.After(successor.OpenedAt) || !beat.At.Before(resumed)) {
				t.Errorf("write of the frozen leader's term accepted at %s (successor opened %s, resumed %s)", beat.At, successor.OpenedAt, resumed)
			}
		}
	})
}

// TestPartitionedLeader is scenario e: the leader alone is cut off from
// the API server. It steps down within renew deadline + retry period of the
// cut, its workers stop, and a successor leads.
func TestPartitionedLeader(t *testing.T) {
	t.Parallel()
	sc := start(t, failover.Kubernetes, setup{})
	l, old := sc.leader(t)
	time.Sleep(3 * time.Second) // stays: real renewals and heartbeats before the fault
	ctx, cancel := within(t, bound)
	defer cancel()
	cut := l.Cut()
	defer l.Restore()
	lost, err := sc.cl.WaitTermEnd(ctx, cut, l, old.Token)
	if err != nil {
		t.Fatalf("%s did not step down after the cut: %v", l.Spec.Name, err)
	}
	stepped := lost.Time.Sub(cut)
	t.Logf("partition: %s's workers stopped %v after the cut (%q: %s)", l.Spec.Name, stepped, lost.Msg, lost.Reason)
	if limit := failover.RenewDeadline + failover.RetryPeriod; stepped > limit {
		t.Errorf("%s stepped down %v after the cut, want within renew deadline + retry period (%v)", l.Spec.Name, stepped, limit)
	}
	noWorkers(t, l)
	_, next, beat := sc.takeover(t, ctx, cut, l)
	t.Logf("partition: %s leads, first heartbeat %v after the cut", next.Spec.Name, beat.At.Sub(cut))
	l.Restore()
	sc.settled(t, l, next)
	sc.verify(t, nil)
}

// TestAPIServerDown is scenario f: the API server stops for 60 s. The
// leader steps down and nobody runs workers, while AS2/API and /readyz keep
// answering on every replica; when the API server is back, a leader is
// back within a few seconds.
func TestAPIServerDown(t *testing.T) {
	t.Parallel()
	sc := start(t, failover.Kubernetes, setup{})
	l, old := sc.leader(t)
	time.Sleep(3 * time.Second) // stays: real renewals and heartbeats before the fault
	ctx, cancel := within(t, 3*time.Minute)
	defer cancel()
	stopped := time.Now()
	if err := sc.cp.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	outage := 60 * time.Second
	quiet := stopped.Add(failover.RenewDeadline + failover.RetryPeriod + failover.WorkerStopTimeout)
	checkedQuiet := false
	for time.Since(stopped) < outage {
		for _, r := range sc.cl.Replicas() {
			for _, probe := range []struct{ listener, path string }{{"as2", "/"}, {"ops", "/readyz"}} {
				if _, err := r.Get(ctx, probe.listener, probe.path); err != nil {
					t.Errorf("API server down %v: %v", time.Since(stopped).Round(time.Second), err)
				}
			}
		}
		if !checkedQuiet && time.Now().After(quiet) {
			checkedQuiet = true
			for _, r := range sc.cl.Replicas() {
				noWorkers(t, r)
			}
		}
		time.Sleep(time.Second) // stays: samples the real cluster while the API server is down
	}
	lost, err := sc.cl.WaitTermEnd(ctx, stopped, l, old.Token)
	if err != nil {
		t.Fatalf("%s did not step down while the API server was down: %v", l.Spec.Name, err)
	}
	t.Logf("API server down: %s stepped down %v after the stop (%s)", l.Spec.Name, lost.Time.Sub(stopped), lost.Reason)
	// Replicas may take the lease while StartAPIServer still waits for
	// the API server's own readiness: count from the restart.
	restarted := time.Now()
	if err := sc.cp.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	_, next, beat := sc.takeover(t, ctx, lost.Time)
	t.Logf("API server restarted (ready %v later); %s leads, first heartbeat %v after the restart", ready.Sub(restarted), next.Spec.Name, beat.At.Sub(restarted))
	if d := beat.At.Sub(restarted); d > failover.LeaseDuration {
		t.Errorf("leader back %v after the API server, want a few seconds (well under the lease duration %v)", d, failover.LeaseDuration)
	}
	h := sc.verify(t, nil)
	for _, b := range h.Beats {
		if b.At.After(lost.Time) && b.At.Before(restarted) {
			t.Errorf("write accepted at %s while nobody should lead (term %d of %s)", b.At, b.Token, b.Holder)
		}
	}
	sc.onlyLeader(t, next)
}

// TestPostgresRestart is scenario g: PostgreSQL restarts under a running
// leader. Fenced writes fail while it is down and resume after; no stale
// write is accepted.
func TestPostgresRestart(t *testing.T) {
	t.Parallel()
	srv, url := dedicatedDatabase(t)
	sc := start(t, failover.Kubernetes, setup{databaseURL: url})
	l, _ := sc.leader(t)
	time.Sleep(3 * time.Second) // stays: real renewals and heartbeats before the fault
	ctx, cancel := within(t, bound)
	defer cancel()
	down := time.Now()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	failing, err := sc.cl.WaitEvent(ctx, down, func(e failover.Event) bool {
		return e.Replica == l.Spec.Name && e.Msg == failover.MsgBeatFailing
	})
	if err != nil {
		t.Fatalf("%s logged no failing write while PostgreSQL was down: %v", l.Spec.Name, err)
	}
	t.Logf("PostgreSQL down; %s's fenced write failed %v later", l.Spec.Name, failing.Time.Sub(down))
	time.Sleep(time.Until(down.Add(10 * time.Second))) // stays: PostgreSQL stays down for a real outage of 10 s
	// Writes may resume before Start returns: the server accepts
	// connections before Start has seen it ready (a replica became leader
	// in that gap once, and the wait for an event after Start's return
	// missed it). So the restart's start bounds the window in which no
	// write may be accepted, and opens the one in which one must be.
	restart := time.Now()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	up := restart
	recovered, err := sc.cl.WaitEvent(ctx, up, func(e failover.Event) bool {
		return e.Msg == failover.MsgBeatRecovered || e.Msg == failover.MsgBecameLeader
	})
	if err != nil {
		t.Fatalf("no fenced write accepted after PostgreSQL came back: %v", err)
	}
	t.Logf("PostgreSQL up; %s: %q %v later", recovered.Replica, recovered.Msg, recovered.Time.Sub(up))
	time.Sleep(3 * time.Second) // stays: real writes after recovery before the history is verified
	h := sc.verify(t, nil)
	after := slices.IndexFunc(h.Beats, func(b failover.Beat) bool { return b.At.After(up) })
	if after < 0 {
		t.Error("no write accepted after PostgreSQL came back")
	}
	for _, b := range h.Beats {
		if b.At.After(down) && b.At.Before(up) {
			t.Errorf("write accepted at %s while PostgreSQL was down", b.At)
		}
	}
}

// TestLeaderCutFromPostgres is scenario h (issue 10, item 1): the leader
// alone is cut off from PostgreSQL, not from the API server. It cannot
// confirm its term within the renew deadline, steps down and releases the
// Lease; a replica that reaches the database takes over; the cut-off
// replica does not take the Lease again while the cut lasts. Target:
// leader-gated work runs again within lease duration + renew deadline of
// the cut.
func TestLeaderCutFromPostgres(t *testing.T) {
	t.Parallel()
	sc := start(t, failover.Kubernetes, setup{proxyDatabase: true})
	l, old := sc.leader(t)
	time.Sleep(3 * time.Second) // stays: real renewals and heartbeats before the fault
	ctx, cancel := within(t, bound)
	defer cancel()
	cut := l.CutDatabase()
	defer l.RestoreDatabase()
	end, err := sc.cl.WaitTermEnd(ctx, cut, l, old.Token)
	if err != nil {
		t.Fatalf("%s kept leading while cut from PostgreSQL: %v", l.Spec.Name, err)
	}
	if end.Msg != failover.MsgReleased {
		t.Errorf("%s: %q (%s), want %q: it still reaches the API server and must give the Lease up", l.Spec.Name, end.Msg, end.Reason, failover.MsgReleased)
	}
	_, next, beat := sc.takeover(t, ctx, cut, l)
	t.Logf("database cut: %s %q %v after the cut (%s); %s leads, first heartbeat %v after the cut (target ≤ lease duration + renew deadline = %v)",
		l.Spec.Name, end.Msg, end.Time.Sub(cut), end.Reason, next.Spec.Name, beat.At.Sub(cut), failover.LeaseDuration+failover.RenewDeadline)
	time.Sleep(3 * failover.RetryPeriod) // stays, real time: would it take the Lease back?
	// Not noWorkers: /metrics fails on a replica cut from the database
	// (edihub_outbox_due reads it), so ask /leader.
	if st, err := l.Leader(ctx); err != nil || st.IsLeader {
		t.Errorf("%s: /leader is_leader = %v (%v) while cut from PostgreSQL, want false", l.Spec.Name, st.IsLeader, err)
	}
	for _, e := range sc.cl.Recorder().Events() {
		if e.Replica == l.Spec.Name && e.Msg == failover.MsgBecameLeader && e.Time.After(cut) {
			t.Errorf("%s became leader again (token %d) while cut from PostgreSQL", l.Spec.Name, e.Token)
		}
	}
	l.RestoreDatabase()
	sc.settled(t, l, next)
	sc.verify(t, nil)
}

// TestFrozenInFencedTransaction is scenario i (issue 10, item 2): the
// leader is frozen (SIGSTOP) inside a fenced transaction, which holds the
// fence row's share lock. The database ends the idle transaction after the
// worker stop timeout, so the successor's term opens about when the Lease
// expires, not when the old leader resumes; the frozen transaction never
// commits. Target: the successor's term is delayed by at most a few
// seconds beyond the lease.
func TestFrozenInFencedTransaction(t *testing.T) {
	t.Parallel()
	sc := start(t, failover.Kubernetes, setup{proxyDatabase: true})
	l, old := sc.leader(t)
	time.Sleep(3 * time.Second) // stays: real renewals and heartbeats before the fault
	ctx, cancel := within(t, bound)
	defer cancel()
	frozen, err := sc.cl.FreezeInFencedTransaction(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	// Stay frozen until well past the lease and the renew deadline of the
	// successor's first attempt: before issue 10 its term could not open
	// until the old leader resumed.
	wctx, wcancel := context.WithTimeout(ctx, failover.LeaseDuration+failover.RenewDeadline+20*time.Second)
	tk, err := sc.cl.WaitTakeover(wctx, frozen, l)
	wcancel()
	if err != nil {
		_, _ = l.Resume(ctx)
		t.Fatalf("no successor's heartbeat while %s was frozen inside a fenced transaction: %v", l.Spec.Name, err)
	}
	became, next, beat := tk.Became, tk.Leader, tk.Beat
	t.Logf("%s frozen inside a fenced transaction; %s leads, first heartbeat %v after the SIGSTOP (lease %v; target: a few seconds beyond it)",
		l.Spec.Name, next.Spec.Name, beat.At.Sub(frozen), failover.LeaseDuration)
	resumed, err := l.Resume(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sc.cl.WaitTermEnd(ctx, resumed, l, old.Token); err != nil {
		t.Fatalf("%s did not end its old term after resuming: %v", l.Spec.Name, err)
	}
	sc.settled(t, l, next)
	h := sc.verify(t, func(a, b failover.Term) bool {
		return (a.Token == old.Token || b.Token == old.Token) && (a.Token == became.Token || b.Token == became.Token)
	})
	for _, b := range h.Beats {
		if b.Token == old.Token && !b.At.Before(frozen) {
			t.Errorf("write of the frozen term accepted at %s, after the SIGSTOP at %s", b.At, frozen)
		}
	}
}
