// Command report measures edihub's failover figures against real parts and
// prints them next to their targets (make failover-report): three built
// edihub replicas with production timings, a real kube-apiserver (each
// replica behind its own TCP proxy) or the Postgres lease row, and a real
// PostgreSQL. One cluster per backend is reused across trials; a killed or
// stopped replica is started again before the next trial.
//
// "Workers running" is the successor's first accepted heartbeat (its
// leader-gated worker's first fenced write), by the database clock on this
// host; the signal times are taken on the same host.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgserver"
	"github.com/edihub/edihub/test/controlplane"
	"github.com/edihub/edihub/test/failover"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "failover-report:", err)
		os.Exit(1)
	}
}

// Targets (issue 3).
const (
	crashMax     = 33 * time.Second
	crashP50     = 31 * time.Second
	gracefulMax  = time.Second
	partitionMax = 12 * time.Second
	// Issue 10: a leader cut from PostgreSQL alone is replaced within
	// lease duration + renew deadline; a leader frozen inside a fenced
	// transaction delays its successor a few seconds beyond the lease.
	dbCutMax    = failover.LeaseDuration + failover.RenewDeadline
	frozenTxMax = failover.LeaseDuration + 5*time.Second
	// step bounds every wait of a trial, so a broken build fails instead
	// of hanging.
	step = 2 * time.Minute
)

type options struct {
	trials, partitions int
	dbCuts, frozenTx   int
	backends           []failover.Backend
	logDir             string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o options
	fs := flag.NewFlagSet("failover-report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.trials, "trials", 10, "crash and graceful trials per backend (at least 10 for the targets)")
	fs.IntVar(&o.partitions, "partition-trials", 3, "partition trials per backend")
	fs.IntVar(&o.dbCuts, "database-cut-trials", 2, "trials of a leader cut from PostgreSQL alone (Kubernetes backend)")
	fs.IntVar(&o.frozenTx, "frozen-tx-trials", 2, "trials of a leader frozen inside a fenced transaction, per backend")
	backends := fs.String("backends", "kubernetes,postgres", "comma-separated leader backends to measure")
	fs.StringVar(&o.logDir, "log-dir", "", "directory to keep the replicas' logs in (one file per backend); default: discarded")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, b := range strings.Split(*backends, ",") {
		switch failover.Backend(b) {
		case failover.Kubernetes, failover.Postgres:
			o.backends = append(o.backends, failover.Backend(b))
		default:
			return fmt.Errorf("-backends: unknown backend %q (kubernetes, postgres)", b)
		}
	}
	if o.trials < 1 || o.partitions < 0 || o.dbCuts < 0 || o.frozenTx < 0 {
		return errors.New("-trials must be at least 1 and the other trial counts not negative")
	}
	logf := func(format string, a ...any) {
		fmt.Fprintf(stderr, time.Now().Format("15:04:05")+" "+format+"\n", a...)
	}

	dir, err := os.MkdirTemp("", "edihub-failover-report-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logf("building edihub")
	bin, err := failover.BuildBinary(ctx, dir)
	if err != nil {
		return err
	}
	// Its own directory: pgserver hands it to the postgres user when run
	// as root, which dir (private to us) would not let it reach.
	pgDir, err := os.MkdirTemp("", "edihub-failover-report-pg-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(pgDir)
	pg, err := pgserver.New(pgserver.Options{Dir: pgDir, Settings: map[string]string{"fsync": "off", "synchronous_commit": "off"}})
	if err != nil {
		return err
	}
	if err := pg.Start(ctx); err != nil {
		return err
	}
	defer pg.Stop()

	// The backends run side by side, each on its own cluster and
	// database; the first error stops the others.
	results := make([]result, len(o.backends))
	g, gctx := errgroup.WithContext(ctx)
	for i, b := range o.backends {
		g.Go(func() error {
			blogf := func(format string, a ...any) { logf(string(b)+": "+format, a...) }
			r, err := measureBackend(gctx, b, bin, pg, dir, o, blogf)
			if err != nil {
				return fmt.Errorf("%s: %w", b, err)
			}
			results[i] = r
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	missed := false
	for _, r := range results {
		missed = r.print(stdout, o) || missed
	}
	if missed {
		return errors.New("targets missed (see the tables)")
	}
	return nil
}

// measureBackend prepares the database (and control plane) of one backend
// and runs its trials.
func measureBackend(ctx context.Context, b failover.Backend, bin string, pg *pgserver.Server, dir string, o options, logf func(string, ...any)) (result, error) {
	bdir := filepath.Join(dir, string(b))
	if err := os.MkdirAll(bdir, 0o755); err != nil {
		return result{}, err
	}
	dbURL, err := createDatabase(ctx, pg, "edihub_"+string(b))
	if err != nil {
		return result{}, err
	}
	// On Kubernetes each replica reaches PostgreSQL through a proxy of its
	// own too, for the database-cut and frozen-transaction trials.
	fo := failover.Options{Binary: bin, Backend: b, DatabaseURL: dbURL, Dir: bdir, ProxyDatabase: b == failover.Kubernetes}
	if o.logDir != "" {
		if err := os.MkdirAll(o.logDir, 0o755); err != nil {
			return result{}, err
		}
		f, err := os.Create(filepath.Join(o.logDir, string(b)+".log"))
		if err != nil {
			return result{}, err
		}
		defer f.Close()
		fo.Output = f
	}
	if b == failover.Kubernetes {
		logf("starting kube-apiserver and etcd")
		cpDir := filepath.Join(bdir, "controlplane")
		if err := os.MkdirAll(cpDir, 0o700); err != nil {
			return result{}, err
		}
		cp, err := controlplane.Start(ctx, cpDir, controlplane.Options{})
		if err != nil {
			return result{}, err
		}
		defer cp.Close()
		fo.Kubeconfig, fo.Namespace, fo.APIServer = cp.EdihubKubeconfig, cp.Namespace, strings.TrimPrefix(cp.URL, "https://")
	}
	return measure(ctx, fo, o, logf)
}

func createDatabase(ctx context.Context, pg *pgserver.Server, name string) (string, error) {
	c, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return "", err
	}
	_, err = c.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	c.Close(ctx)
	if err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	url := pg.URL(name)
	st, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 2})
	if err != nil {
		return "", err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return "", err
	}
	return url, nil
}

// result is one backend's measurements.
type result struct {
	backend                    failover.Backend
	crash, graceful, partition []time.Duration
	dbCut, frozenTx            []time.Duration
	// frozenPairs are the (frozen term, successor) token pairs of the
	// frozen-transaction trials: the frozen leader believed it led until
	// it resumed, so those terms overlap by design (the fence refused it).
	frozenPairs   [][2]int64
	terms, writes int
	verdict       failover.Verdict
}

// measure runs the trials on one cluster.
func measure(ctx context.Context, fo failover.Options, o options, logf func(string, ...any)) (res result, err error) {
	res.backend = fo.Backend
	cl, err := failover.Start(ctx, fo)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := cl.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	wctx, cancel := context.WithTimeout(ctx, step)
	defer cancel()
	if err := cl.WaitReady(wctx); err != nil {
		return res, err
	}
	tk, err := cl.WaitTakeover(wctx, time.Time{})
	if err != nil {
		return res, err
	}
	cur, token := tk.Leader, tk.Became.Token
	logf("%s leads (token %d)", cur.Spec.Name, token)

	// takeover waits for a new leader after since and its first write.
	takeover := func(ctx context.Context, since time.Time, old *failover.Replica) (*failover.Replica, int64, time.Time, error) {
		tk, err := cl.WaitTakeover(ctx, since, old)
		return tk.Leader, tk.Became.Token, tk.Beat.At, err
	}
	restart := func(ctx context.Context, r *failover.Replica) error {
		if err := r.Wait(ctx); err != nil && ctx.Err() != nil {
			return err
		}
		if err := r.Start(); err != nil {
			return err
		}
		return r.WaitReady(ctx)
	}
	// settle lets followers see a few renewals of the current term, and
	// lets the next signal fall anywhere within the leader's renewal
	// cycle (one retry period), so the trials cover every phase.
	settle := func() bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(3*time.Second + rand.N(failover.RetryPeriod)):
			return true
		}
	}

	// trials runs n trials of kind, each after settle and within step.
	trials := func(kind string, n int, fn func(ctx context.Context, i int) error) error {
		for i := 1; i <= n; i++ {
			if !settle() {
				return ctx.Err()
			}
			tctx, cancel := context.WithTimeout(ctx, step)
			err := fn(tctx, i)
			cancel()
			if err != nil {
				return fmt.Errorf("%s trial %d: %w", kind, i, err)
			}
		}
		return nil
	}
	// A crash (SIGKILL) and a graceful handoff (SIGTERM, after which the
	// old leader must exit with status 0) are measured the same way.
	for _, k := range []struct {
		kind, signal string
		stop         func(*failover.Replica, context.Context) (time.Time, error)
		exitsClean   bool
		figures      *[]time.Duration
	}{
		{"crash", "SIGKILL", (*failover.Replica).Kill, false, &res.crash},
		{"graceful", "SIGTERM", (*failover.Replica).Terminate, true, &res.graceful},
	} {
		if err := trials(k.kind, o.trials, func(ctx context.Context, i int) error {
			stopped, err := k.stop(cur, ctx)
			if err != nil {
				return err
			}
			next, tok, first, err := takeover(ctx, stopped, cur)
			if err != nil {
				return err
			}
			d := first.Sub(stopped)
			*k.figures = append(*k.figures, d)
			logf("%s %d/%d: %s %s → %s's workers running after %v", k.kind, i, o.trials, k.signal, cur.Spec.Name, next.Spec.Name, d.Round(time.Millisecond))
			if k.exitsClean {
				if err := cur.Wait(ctx); err != nil {
					return fmt.Errorf("%s after %s: %w", cur.Spec.Name, k.signal, err)
				}
			}
			if err := restart(ctx, cur); err != nil {
				return err
			}
			cur, token = next, tok
			return nil
		}); err != nil {
			return res, err
		}
	}
	if err := trials("partition", o.partitions, func(ctx context.Context, i int) error {
		cut := cur.Cut()
		defer cur.Restore()
		lost, err := cl.WaitTermEnd(ctx, cut, cur, token)
		if err != nil {
			return fmt.Errorf("%s did not step down: %w", cur.Spec.Name, err)
		}
		d := lost.Time.Sub(cut)
		res.partition = append(res.partition, d)
		next, tok, first, err := takeover(ctx, cut, cur)
		if err != nil {
			return err
		}
		logf("partition %d/%d: cut %s → its workers stopped after %v; %s's workers running after %v", i, o.partitions, cur.Spec.Name, d.Round(time.Millisecond), next.Spec.Name, first.Sub(cut).Round(time.Millisecond))
		cur.Restore()
		cur, token = next, tok
		return nil
	}); err != nil {
		return res, err
	}

	dbCuts := 0
	if fo.Backend == failover.Kubernetes {
		dbCuts = o.dbCuts
	}
	if err := trials("database cut", dbCuts, func(ctx context.Context, i int) error {
		cut := cur.CutDatabase()
		defer cur.RestoreDatabase()
		next, tok, first, err := takeover(ctx, cut, cur)
		if err != nil {
			return err
		}
		d := first.Sub(cut)
		res.dbCut = append(res.dbCut, d)
		logf("database cut %d/%d: cut %s from PostgreSQL → %s's workers running after %v", i, o.dbCuts, cur.Spec.Name, next.Spec.Name, d.Round(time.Millisecond))
		cur.RestoreDatabase()
		cur, token = next, tok
		return nil
	}); err != nil {
		return res, err
	}
	if err := trials("frozen transaction", o.frozenTx, func(ctx context.Context, i int) error {
		frozen, err := cl.FreezeInFencedTransaction(ctx, cur)
		if err != nil {
			return err
		}
		defer func() { _, _ = cur.Resume(context.WithoutCancel(ctx)) }()
		next, tok, first, err := takeover(ctx, frozen, cur)
		if err != nil {
			return err
		}
		d := first.Sub(frozen)
		res.frozenTx = append(res.frozenTx, d)
		logf("frozen transaction %d/%d: SIGSTOP %s inside a fenced transaction → %s's workers running after %v", i, o.frozenTx, cur.Spec.Name, next.Spec.Name, d.Round(time.Millisecond))
		resumed, err := cur.Resume(ctx)
		if err != nil {
			return err
		}
		if _, err := cl.WaitTermEnd(ctx, resumed, cur, token); err != nil {
			return fmt.Errorf("%s did not end its term after resuming: %w", cur.Spec.Name, err)
		}
		res.frozenPairs = append(res.frozenPairs, [2]int64{token, tok})
		cur, token = next, tok
		return nil
	}); err != nil {
		return res, err
	}

	hctx, hcancel := context.WithTimeout(ctx, time.Minute)
	defer hcancel()
	h, err := cl.History(hctx)
	if err != nil {
		return res, err
	}
	res.terms, res.writes, res.verdict = len(h.Terms), len(h.Beats), failover.Check(h)
	var overlapping [][2]failover.Term
	for _, p := range res.verdict.Overlapping {
		if !slices.ContainsFunc(res.frozenPairs, func(f [2]int64) bool {
			return (p[0].Token == f[0] && p[1].Token == f[1]) || (p[0].Token == f[1] && p[1].Token == f[0])
		}) {
			overlapping = append(overlapping, p)
		}
	}
	res.verdict.Overlapping = overlapping
	if err := res.verdict.Err(); err != nil {
		logf("history: %v", err)
	}
	if err := res.verdict.OverlapErr(); err != nil {
		logf("history: %v", err)
	}
	return res, nil
}

// print writes the backend's table and reports whether a target was missed.
func (r result) print(w io.Writer, o options) (missed bool) {
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		missed = true
		return "MISSED"
	}
	crash, graceful, partition := failover.StatsOf(r.crash), failover.StatsOf(r.graceful), failover.StatsOf(r.partition)
	stale := len(r.verdict.Stale) + len(r.verdict.Interleaved) + len(r.verdict.Unknown)
	overlapping := len(r.verdict.Overlapping)
	fmt.Fprintf(w, "\n### %s backend\n\n", r.backend)
	fmt.Fprintf(w, "3 replicas; lease %v, renew deadline %v, retry period %v; workers running = the successor's first accepted fenced write\n\n",
		failover.LeaseDuration, failover.RenewDeadline, failover.RetryPeriod)
	fmt.Fprintln(w, "| figure | target | measured (min / p50 / max) | |")
	fmt.Fprintln(w, "|---|---|---|---|")
	fmt.Fprintf(w, "| crash failover (SIGKILL → successor's workers running), %d trials | max ≤ 33 s, p50 ≤ 31 s | %s | %s |\n",
		crash.N, span(crash), mark(crash.N >= 10 && crash.Max <= crashMax && crash.P50 <= crashP50))
	fmt.Fprintf(w, "| graceful handoff (SIGTERM → successor's workers running), %d trials | max ≤ 1 s | %s | %s |\n",
		graceful.N, span(graceful), mark(graceful.N >= 10 && graceful.Max <= gracefulMax))
	fmt.Fprintf(w, "| partitioned leader's workers stopped after the cut, %d trials | ≤ 12 s | %s | %s |\n",
		partition.N, span(partition), mark(partition.N > 0 && partition.Max <= partitionMax))
	if r.backend == failover.Kubernetes && o.dbCuts > 0 {
		dbCut := failover.StatsOf(r.dbCut)
		fmt.Fprintf(w, "| leader cut from PostgreSQL alone (cut → successor's workers running), %d trials | ≤ %.0f s (lease + renew deadline) | %s | %s |\n",
			dbCut.N, dbCutMax.Seconds(), span(dbCut), mark(dbCut.N > 0 && dbCut.Max <= dbCutMax))
	}
	if o.frozenTx > 0 {
		frozen := failover.StatsOf(r.frozenTx)
		fmt.Fprintf(w, "| leader frozen inside a fenced transaction (SIGSTOP → successor's workers running), %d trials | ≤ %.0f s (lease + 5 s) | %s | %s |\n",
			frozen.N, frozenTxMax.Seconds(), span(frozen), mark(frozen.N > 0 && frozen.Max <= frozenTxMax))
	}
	fmt.Fprintf(w, "| accepted stale writes, overlapping terms | 0, 0 | %d, %d (%d terms, %d accepted writes checked) | %s |\n",
		stale, overlapping, r.terms, r.writes, mark(stale == 0 && overlapping == 0))
	return missed
}

func span(s failover.Stats) string {
	if s.N == 0 {
		return "no trials"
	}
	f := func(d time.Duration) string {
		if d < time.Second {
			return fmt.Sprintf("%d ms", d.Milliseconds())
		}
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return f(s.Min) + " / " + f(s.P50) + " / " + f(s.Max)
}
