package main

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgfill"
)

// consoleBench measures the ops console's reads (pgfill's Queries: the
// message list with its filters, a trace, the MDN inbox, the partners'
// health, the hub figures) on a database of o.consoleMessages messages
// written by pgfill in a database of its own on the same server: the fill
// time, then each query's median and 95th percentile over -console-runs
// runs, after ten to warm up (PostgreSQL's caches, and its switch to a
// generic plan after five executions of a statement when it deems that
// no worse). The same reads are shown to use
// indexes by TestConsoleQueriesUseIndexes (internal/postgres).
func consoleBench(ctx context.Context, out io.Writer, o options) error {
	dbURL, drop, err := scratchDatabase(ctx, o.databaseURL, "edihub_bench_console")
	if err != nil {
		return err
	}
	defer drop()
	st, err := postgres.Open(ctx, dbURL, postgres.Options{MaxConns: 4})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "Console queries: %d messages written by pgfill (%d partners, %d days, attempts, events, MDNs, async MDNs, outbox)\n",
		o.consoleMessages, pgfill.Partners, pgfill.Days)
	d, err := pgfill.Fill(ctx, dbURL, pgfill.Options{Messages: o.consoleMessages})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  %-40s %10s\n", "fill took (indexes and vacuum included)", d.Duration.Round(100*time.Millisecond))
	if o.consoleRuns < 1 {
		return fmt.Errorf("-console-runs %d: want at least 1", o.consoleRuns)
	}
	fmt.Fprintf(out, "  %-40s %10s %10s  (%d runs each, one at a time)\n", "query", "p50", "p95", o.consoleRuns)
	// The floor every query pays: a round trip on the same pool.
	floor := pgfill.Query{Name: "ping (the round trip, reference)", Run: func(ctx context.Context, st *postgres.Store) error {
		return st.Ping(ctx)
	}}
	var worst, floorP95 time.Duration
	worstName := ""
	for _, q := range append([]pgfill.Query{floor}, d.Queries()...) {
		const warmUp = 10
		lat := make([]time.Duration, 0, o.consoleRuns)
		for i := range warmUp + o.consoleRuns {
			t := time.Now()
			if err := q.Run(ctx, st); err != nil {
				return fmt.Errorf("%s: %w", q.Name, err)
			}
			if i >= warmUp {
				lat = append(lat, time.Since(t))
			}
		}
		slices.Sort(lat)
		p95 := lat[len(lat)*95/100]
		fmt.Fprintf(out, "  %-40s %10s %10s\n", q.Name, lat[len(lat)/2].Round(10*time.Microsecond), p95.Round(10*time.Microsecond))
		switch {
		case floorP95 == 0:
			floorP95 = p95
		case p95 > worst:
			worst, worstName = p95, q.Name
		}
	}
	o.sum.add(figure{name: "console query p95, slowest (" + worstName + ")", value: worst.Round(10 * time.Microsecond).String(),
		reference: "ping p95 " + floorP95.Round(10*time.Microsecond).String(), ratio: float64(worst) / float64(floorP95), ratioValid: true})
	fmt.Fprintln(out)
	return nil
}

// scratchDatabase creates database name on the server of serverURL (its
// role must be allowed to) and returns its URL and a function that drops
// it.
func scratchDatabase(ctx context.Context, serverURL, name string) (string, func(), error) {
	conn, err := pgx.Connect(ctx, serverURL)
	if err != nil {
		return "", nil, err
	}
	defer conn.Close(ctx)
	db := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)"); err != nil {
		return "", nil, err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return "", nil, fmt.Errorf("create the console database (the role of -database-url must be allowed to): %w", err)
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		return "", nil, err
	}
	u.Path = "/" + name
	drop := func() {
		c, err := pgx.Connect(context.Background(), serverURL)
		if err != nil {
			return
		}
		defer c.Close(context.Background())
		_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
	}
	return u.String(), drop, nil
}
