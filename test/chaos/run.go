package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Result is a finished run: the faults as they happened, the checkers'
// verdict and the traffic.
type Result struct {
	Options  Options
	Began    time.Time
	Took     time.Duration
	Outcomes []*Outcome
	Verdict  Verdict
	// Documents queued by each side, and API calls retried.
	HubQueued, PartnerQueued, APIRetries int
	// Settled is false when the run ended before every message was final.
	Settled bool
}

// Run starts the stack, puts it under load, injects the schedule's faults,
// lets it settle and checks the history. Everything it started is stopped
// before it returns, also on error or when ctx ends. The error reports a
// run that could not be carried out; broken invariants are in
// Result.Verdict.Failures.
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	res := &Result{Options: o, Began: time.Now()}
	defer func() { res.Took = time.Since(res.Began) }()
	o.Logf("starting the stack (control plane, PostgreSQL primary + %s standby, partner station, three replicas)", replication(o.Async))
	s, err := start(ctx, o)
	if err != nil {
		return res, fmt.Errorf("start: %w", err)
	}
	defer func() {
		if err != nil {
			o.Logf("hub logs (last 60 lines):\n%s", lastLines(s.hub.Recorder().Lines(), 60))
			o.Logf("partner log (last 30 lines):\n%s", s.partnerLog.tail(30))
		}
		s.close()
	}()
	o.Logf("stack up in %s; yesterday's report is due at %s UTC", time.Since(res.Began).Round(time.Second), s.reportAt.Format("15:04"))
	ld := newLoad(o.Rate)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopLoad()
	wg.Go(func() { ld.run(loadCtx, s.lb.URL(), "http://"+s.partner.Replicas()[0].Spec.HTTPAddr) })
	smtpOut := make(chan *Outcome, 1)
	faultCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	if o.NoReport {
		smtpOut <- nil
	} else {
		wg.Go(func() { smtpOut <- s.smtpOutage(faultCtx, s.smtpDown()) })
	}

	res.Outcomes, err = s.schedule(ctx)
	if err != nil {
		return res, err
	}
	o.Logf("schedule done; waiting for the report mail")
	select {
	case out := <-smtpOut:
		if out != nil {
			o.Logf("%s", out)
			res.Outcomes = append(res.Outcomes, out)
		}
	case <-ctx.Done():
		return res, ctx.Err()
	}
	stopLoad()
	res.HubQueued, res.PartnerQueued, res.APIRetries = ld.counts()
	if err = s.settle(ctx); err != nil {
		return res, fmt.Errorf("after the faults: %w", err)
	}
	o.Logf("load stopped (%d documents hub → partner, %d partner → hub); waiting for every message to be final", res.HubQueued, res.PartnerQueued)
	res.Settled = s.drain(ctx) == nil
	if res.Verdict, err = s.check(ctx, res.Outcomes, ld.accepted()); err != nil {
		return res, fmt.Errorf("check: %w", err)
	}
	return res, nil
}

func replication(async bool) string {
	if async {
		return "asynchronous"
	}
	return "synchronous"
}

// smtpDown is how long past the report time SMTP stays down.
func (s *stack) smtpDown() time.Duration {
	if s.o.Mode == Long {
		return time.Minute
	}
	return 20 * time.Second
}

// schedule injects the faults: in the short mode (or Options.Faults)
// each kind once in a seeded order; in the long mode kinds drawn by the
// seed until Duration is up. Between two faults the stack settles (every
// replica up, one leader) and traffic runs a seeded pause.
func (s *stack) schedule(ctx context.Context) ([]*Outcome, error) {
	rng := s.o.rng()
	kinds := s.o.Faults
	if len(kinds) == 0 && s.o.Mode == Short {
		kinds = append([]Kind(nil), Kinds...)
		rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	}
	pause := func() time.Duration { return 3*time.Second + time.Duration(rng.Int64N(int64(4*time.Second))) }
	if s.o.Mode == Long {
		pause = func() time.Duration { return 10*time.Second + time.Duration(rng.Int64N(int64(20*time.Second))) }
	}
	deadline := time.Now().Add(s.o.Duration)
	var outs []*Outcome
	for i := 0; ; i++ {
		var k Kind
		switch {
		case len(kinds) > 0 && i < len(kinds):
			k = kinds[i]
		case len(kinds) == 0 && time.Now().Before(deadline):
			k = Kinds[rng.IntN(len(Kinds))]
		default:
			return outs, nil
		}
		if err := s.settle(ctx); err != nil {
			return outs, fmt.Errorf("before fault %d (%s): %w", i+1, k, err)
		}
		select {
		case <-time.After(pause()):
		case <-ctx.Done():
			return outs, ctx.Err()
		}
		s.o.Logf("fault %d: %s", i+1, k)
		out := s.inject(ctx, k)
		s.o.Logf("%s", out)
		outs = append(outs, out)
		if out.Err != nil && ctx.Err() != nil {
			return outs, ctx.Err()
		}
	}
}

func (o *Outcome) String() string {
	ms := func(d time.Duration) string {
		if d < 0 {
			return "-"
		}
		return d.Round(time.Millisecond).String()
	}
	s := fmt.Sprintf("  %s of %s: successor leading %s, old leader's workers stopped %s, receiving/mail back %s, window %s",
		o.Kind, o.Victim, ms(o.Successor), ms(o.OldStopped), ms(o.Receiving), o.End.Sub(o.Start).Round(time.Millisecond))
	if o.Err != nil {
		s += fmt.Sprintf(" — ERROR: %v", o.Err)
	}
	return s
}

// drain waits until every message of both stations is final and no MDN
// is pending, for at most three minutes.
func (s *stack) drain(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		var hub, partner, pending int
		err := errors.Join(
			s.hubDB.QueryRow(ctx, `SELECT count(*) FROM messages WHERE direction = 'outbound' AND status NOT IN ('delivered', 'failed')`).Scan(&hub),
			s.hubDB.QueryRow(ctx, `SELECT count(*) FROM mdn_inbox WHERE state = 'pending'`).Scan(&pending),
			s.partnerDB.QueryRow(ctx, `SELECT count(*) FROM messages WHERE direction = 'outbound' AND status NOT IN ('delivered', 'failed')`).Scan(&partner),
		)
		if err == nil && hub+partner+pending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			s.o.Logf("not settled: %d hub messages, %d partner messages not final, %d MDNs pending (%v)", hub, partner, pending, err)
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func lastLines(ls []string, n int) string {
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	out := ""
	for _, l := range ls {
		out += l + "\n"
	}
	return out
}
