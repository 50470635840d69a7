package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

// purgeBench measures the leader's purger: the rate at which it deletes
// o.purgeRows eligible rows (half finished outbox rows, half payloads of
// final messages, 40 days old) with its default batch and pause, and the
// p99 latency of concurrent receives while it runs, against the p99 of the
// same receives without it, measured in this run just before; then the
// rate of the purger alone on a fifth as many rows.
func purgeBench(ctx context.Context, out io.Writer, o options, store *postgres.Store, partner, st *identity) error {
	fmt.Fprintf(out, "Purge: %d eligible rows (%d finished outbox rows + %d payloads of final messages), default batch %d, pause at least %s and the batch time\n",
		o.purgeRows, o.purgeRows/2, o.purgeRows/2, outbox.DefaultPurgeBatch, outbox.DefaultPurgePause)
	t0 := time.Now()
	if err := seedEligible(ctx, o.databaseURL, o.purgeRows/2); err != nil {
		return fmt.Errorf("seed purge rows: %w", err)
	}
	fmt.Fprintf(out, "  %-40s %10s\n", "seeding took", time.Since(t0).Round(time.Second))

	h, err := newHandler(store, partner, st)
	if err != nil {
		return err
	}
	url, stop, err := serveOn(h)
	if err != nil {
		return err
	}
	defer stop()
	payload := bytes.Repeat([]byte("PURGEBENCH"), o.payload/10+1)[:o.payload]
	w, err := wrap(payload, partner, st, true)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.senders}}
	defer client.CloseIdleConnections()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	var seq atomic.Int64
	// receive sends messages from o.senders goroutines until done is
	// closed and returns the latencies.
	receive := func(done <-chan struct{}) ([]time.Duration, error) {
		var mu sync.Mutex
		var lat []time.Duration
		var firstErr error
		var wg sync.WaitGroup
		for range o.senders {
			wg.Go(func() {
				for {
					select {
					case <-done:
						return
					default:
					}
					req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(w.Body))
					if err != nil {
						panic(err)
					}
					req.Header = header(w, fmt.Sprintf("<purge-%s-%d@partner>", run, seq.Add(1)))
					t := time.Now()
					resp, err := client.Do(req)
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if err == nil && resp.StatusCode != http.StatusOK {
							err = fmt.Errorf("HTTP %d", resp.StatusCode)
						}
					}
					d := time.Since(t)
					mu.Lock()
					if err != nil && firstErr == nil {
						firstErr = err
					}
					lat = append(lat, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return lat, firstErr
	}
	p99 := func(lat []time.Duration) time.Duration {
		slices.Sort(lat)
		return lat[min(len(lat)-1, int(float64(len(lat))*0.99))]
	}

	// Without the purge.
	done := make(chan struct{})
	time.AfterFunc(o.duration, func() { close(done) })
	base, err := receive(done)
	if err != nil {
		return fmt.Errorf("receives without purge: %w", err)
	}

	// With the purge: a separate pool, like the leader replica's.
	leaderStore, err := postgres.Open(ctx, o.databaseURL, postgres.Options{MaxConns: 4})
	if err != nil {
		return err
	}
	defer leaderStore.Close()
	f := hub.Fence{Lease: "bench-purge", Token: time.Now().UnixNano()}
	if err := leaderStore.OpenTerm(ctx, f, "bench"); err != nil {
		return err
	}
	var during []time.Duration
	var rerr error
	counting, purgeTook, err := runPurger(ctx, leaderStore, f, func(done <-chan struct{}) { during, rerr = receive(done) })
	if err != nil {
		return err
	}
	if rerr != nil {
		return fmt.Errorf("receives during purge: %w", rerr)
	}
	deleted := counting.deleted.Load()
	a, b := p99(base), p99(during)
	fmt.Fprintf(out, "  %-40s %10d\n", "rows deleted", deleted)
	fmt.Fprintf(out, "  %-40s %10s  (%d batches)\n", "purge took", purgeTook.Round(10*time.Millisecond), counting.batches.Load())
	fmt.Fprintf(out, "  %-40s %10.0f  (pauses between batches included)\n", "purge rate rows/s, during receives", float64(deleted)/purgeTook.Seconds())
	for _, kind := range postgres.PurgeKinds {
		d := counting.took[kind]
		if len(d) == 0 {
			continue
		}
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		tenth := max(1, len(d)/10)
		avg := func(xs []time.Duration) time.Duration {
			var s time.Duration
			for _, x := range xs {
				s += x
			}
			return s / time.Duration(len(xs))
		}
		fmt.Fprintf(out, "  %-40s %10d  (%s in transactions; batch mean: first tenth %s, last tenth %s)\n", "  "+kind+" rows", counting.rows[kind],
			sum.Round(10*time.Millisecond), avg(d[:tenth]).Round(100*time.Microsecond), avg(d[len(d)-tenth:]).Round(100*time.Microsecond))
	}
	fmt.Fprintf(out, "  %-40s %10s  (%d receives, %d senders, %s)\n", "receive p99 without purge", a.Round(10*time.Microsecond), len(base), o.senders, o.duration)
	fmt.Fprintf(out, "  %-40s %10s  (%d receives)\n", "receive p99 during purge", b.Round(10*time.Microsecond), len(during))
	fmt.Fprintf(out, "  %-40s %10.2f\n", "p99 ratio (during / without)", float64(b)/float64(a))
	o.sum.add(figure{name: "receive p99 during the purge", value: b.Round(10 * time.Microsecond).String(),
		reference: "p99 without purge " + a.Round(10*time.Microsecond).String(), ratio: float64(b) / float64(a), ratioValid: true})

	// The purger alone, for its rate without receives competing for CPU.
	solo := max(1, o.purgeRows/5)
	if err := seedEligible(ctx, o.databaseURL, solo/2); err != nil {
		return fmt.Errorf("seed purge rows: %w", err)
	}
	alone, took, err := runPurger(ctx, leaderStore, f, nil)
	if err != nil {
		return err
	}
	aloneRate := float64(alone.deleted.Load()) / took.Seconds()
	fmt.Fprintf(out, "  %-40s %10.0f  (%d rows, no receives)\n", "purge rate rows/s, purger alone", aloneRate, alone.deleted.Load())
	duringRate := float64(deleted) / purgeTook.Seconds()
	o.sum.add(figure{name: "purge rows/s during receives", value: fmt.Sprintf("%.0f", duringRate),
		reference: fmt.Sprintf("purger alone %.0f rows/s", aloneRate), ratio: duringRate / aloneRate, ratioValid: true})
	fmt.Fprintln(out)
	return nil
}

// runPurger runs one purge to its end with the real Purger (default
// batch and pause) under fence f, calling alongside (when set) until it
// is over, and returns its counts and duration.
func runPurger(ctx context.Context, st *postgres.Store, f hub.Fence, alongside func(done <-chan struct{})) (*purgeCounter, time.Duration, error) {
	counting := &purgeCounter{PurgeStore: st, done: make(chan struct{})}
	p, err := outbox.NewPurger(outbox.PurgerOptions{Store: counting, Logger: zap.NewNop(), Registerer: prometheus.NewRegistry()})
	if err != nil {
		return nil, 0, err
	}
	pctx, cancel := context.WithCancel(withFence(ctx, f))
	defer cancel()
	perr := make(chan error, 1)
	start := time.Now()
	go func() { perr <- p.Run(pctx) }()
	var took time.Duration
	done := make(chan struct{})
	go func() {
		select {
		case <-counting.done:
		case <-pctx.Done():
		}
		took = time.Since(start)
		close(done)
	}()
	if alongside != nil {
		alongside(done)
	}
	<-done
	cancel()
	if err := <-perr; err != nil {
		return nil, 0, fmt.Errorf("purger: %w", err)
	}
	return counting, took, nil
}

// purgeCounter counts deleted rows and batches and closes done when the
// first run is over (the last kind's last batch).
type purgeCounter struct {
	outbox.PurgeStore
	deleted, batches atomic.Int64
	done             chan struct{}
	once             sync.Once
	mu               sync.Mutex
	took             map[string][]time.Duration // per kind, batches that deleted rows
	rows             map[string]int64
}

func (c *purgeCounter) PurgeBatch(ctx context.Context, f hub.Fence, kind string, age time.Duration, limit int) (int64, error) {
	t := time.Now()
	n, err := c.PurgeStore.PurgeBatch(ctx, f, kind, age, limit)
	if err == nil && n > 0 {
		c.mu.Lock()
		if c.took == nil {
			c.took, c.rows = map[string][]time.Duration{}, map[string]int64{}
		}
		c.took[kind] = append(c.took[kind], time.Since(t))
		c.rows[kind] += n
		c.mu.Unlock()
	}
	if err == nil {
		c.deleted.Add(n)
		c.batches.Add(1)
		if kind == postgres.PurgeKinds[len(postgres.PurgeKinds)-1] && n < int64(limit) {
			c.once.Do(func() { close(c.done) })
		}
	}
	return n, err
}

func withFence(ctx context.Context, f hub.Fence) context.Context {
	return leader.WithFence(ctx, f)
}

// seedEligible inserts n final outbound messages completed 40 days ago,
// each with a payload and a finished outbox row, in chunks of one
// statement each (INSERT ... SELECT generate_series). Their ids are
// below every message's, as if the hub had written them 41 days ago:
// message ids follow creation, and the purge of payloads walks them by
// message id up to the first message created after its cutoff (an id
// taken now would be above the receipts of the run's earlier parts).
func seedEligible(ctx context.Context, url string, n int) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	const chunk = 100_000
	for from := 1; from <= n; from += chunk {
		to := min(n, from+chunk-1)
		if _, err := conn.Exec(ctx, `
WITH m AS (
    INSERT INTO messages (id, direction, partner, as2_from, as2_to, message_id, status, payload_size,
                          created_at, updated_at, completed_at)
    OVERRIDING SYSTEM VALUE
    SELECT b.low - 1 - (g - $1), 'outbound', 'BENCH PARTNER', 'EDIHUB', 'BENCH PARTNER', '<old-' || $3 || '-' || g || '@edihub>', 'delivered', 4096,
           now() - interval '41 days', now() - interval '40 days', now() - interval '40 days'
      FROM generate_series($1::int, $2::int) g, (SELECT coalesce(min(id), 1) AS low FROM messages) b
    RETURNING id),
p AS (INSERT INTO payloads (message_id, data, created_at)
      SELECT id, decode(repeat('ab', 2048), 'hex'), now() - interval '41 days' FROM m)
INSERT INTO outbox (kind, message_id, partner, url, status, attempts, finished_at, created_at)
SELECT 'message', id, 'BENCH PARTNER', 'http://partner.invalid/as2', 'done', 1, now() - interval '40 days', now() - interval '41 days'
  FROM m`, from, to, run); err != nil {
			return err
		}
	}
	_, err = conn.Exec(ctx, `ANALYZE messages, payloads, outbox`)
	return err
}
