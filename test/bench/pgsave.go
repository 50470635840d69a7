package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
)

// pgSaveBench measures what one inbound save costs PostgreSQL, apart from
// everything else the served run does (issue 22, point 4): saves of the
// served run's message (4 KiB payload of loadgen's filler, a signed sync
// MDN built by internal/mdn with the station key) through SaveInbound,
// one after the other on one connection to a fresh database, in
// o.pgSaveRounds rounds of o.pgSaves after a warm-up. Per save: the CPU
// of the backend serving that connection (/proc/<pid>/schedstat, in
// nanoseconds), the CPU of PostgreSQL's other processes meanwhile (WAL
// writer, autovacuum, ...; throwaway server only), the wall time, and
// pg_stat_statements' mean execution time of each statement. The
// backend's figure is the save's own cost: it moves less with other load
// on the machine than the served run's, though still with it.
//
// o.pgSaveVariants ("name=SQL", each run on a fresh database of its own
// after the migrations) measure variants of the schema against the same
// saves: the rounds of the schema as migrated and of each variant
// alternate, so that the machine's load, which moves from second to
// second on a shared machine, weighs on all of them alike, and each
// variant's figure is also given as the median of its per-round ratios
// to the migrated schema's. docs/performance.md ("PostgreSQL") has the
// variants measured for migration 00018.
//
// EDIHUB_BENCH_PGSAVE_PERF=FILE records the migrated schema's backend
// with perf (cpu-clock, call graphs) during the rounds.
func pgSaveBench(ctx context.Context, out io.Writer, o options, st *identity) error {
	msg, err := pgSaveMessage(st)
	if err != nil {
		return err
	}
	runs := []*pgSaveRun{{name: "as migrated", savers: 1}}
	savers := o.pgSaveSavers
	if vs := o.pgSaveVariantSavers; vs > 1 && len(o.pgSaveVariants) > 0 && !slices.Contains(savers, vs) {
		savers = append(slices.Clone(savers), vs)
	}
	for _, n := range savers {
		if n > 1 {
			runs = append(runs, &pgSaveRun{name: fmt.Sprintf("as migrated, %d savers", n), savers: n})
		}
	}
	for _, v := range o.pgSaveVariants {
		name, sql, ok := strings.Cut(v, "=")
		if !ok {
			return fmt.Errorf("-pgsave-variant %q: want name=SQL", v)
		}
		runs = append(runs, &pgSaveRun{name: name, setup: sql, savers: max(1, o.pgSaveVariantSavers)})
	}
	for i, r := range runs {
		dbURL, drop, err := scratchDatabase(ctx, o.databaseURL, "edihub_bench_pgsave_"+strconv.Itoa(i))
		if err != nil {
			return err
		}
		defer drop()
		err = r.open(ctx, dbURL, msg, max(200, o.pgSaves/10))
		defer r.close()
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
	}
	fmt.Fprintf(out, "Inbound save in PostgreSQL alone (SaveInbound of the served run's message: %d B payload, signed sync MDN of %d B; one connection, %d saves per round)\n",
		len(msg.Payload), len(msg.MDN.Body), o.pgSaves)
	if f := os.Getenv("EDIHUB_BENCH_PGSAVE_PERF"); f != "" {
		// perf record of the migrated schema's backend into that file,
		// for where its time goes (perf report -i FILE --children).
		cmd := exec.Command("perf", "record", "-e", "cpu-clock", "-g", "-o", f, "-p", strconv.Itoa(runs[0].pid))
		if err := cmd.Start(); err != nil {
			return err
		}
		time.Sleep(500 * time.Millisecond)
		defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	}
	fmt.Fprintf(out, "  %-6s %-28s %12s %13s %10s\n", "round", "schema", "backend CPU", "other PG CPU", "wall")
	for round := range o.pgSaveRounds {
		for i := range runs {
			// Each round in another order: none always goes first.
			r := runs[(i+round)%len(runs)]
			last := round == o.pgSaveRounds-1
			s, err := r.round(ctx, o.pgDataDir, o.pgSaves, last)
			if err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			fmt.Fprintf(out, "  %-6d %-28s %12s %13s %10s\n", round+1, r.name, s.backend.Round(time.Microsecond), s.others, s.wall.Round(time.Microsecond))
		}
	}
	for i, r := range runs {
		med, lo, hi := medianOf(r.backend)
		fmt.Fprintf(out, "  %s: backend CPU per save, median of %d rounds %s (min %s, max %s)", r.name, len(r.backend),
			med.Round(time.Microsecond), lo.Round(time.Microsecond), hi.Round(time.Microsecond))
		if base := pgSaveBase(runs, r); i > 0 {
			ratios := make([]float64, len(r.backend))
			for j := range ratios {
				ratios[j] = float64(r.backend[j]) / float64(base.backend[j])
			}
			slices.Sort(ratios)
			fmt.Fprintf(out, "; %.2f × %s's (median of the rounds' ratios)", ratios[len(ratios)/2], base.name)
		}
		if flushes, receipts := r.flushes(); r.savers > 1 && flushes > 0 {
			fmt.Fprintf(out, "; %.1f receipts per flush (%d savers)", receipts/flushes, r.savers)
		}
		fmt.Fprintln(out)
		for _, s := range r.top {
			if s.calls*100 < int64(o.pgSaves) {
				continue // the bench's own queries
			}
			fmt.Fprintf(out, "    %6.2f %8s  %s\n", float64(s.calls)/float64(o.pgSaves), (s.exec / time.Duration(s.calls)).Round(time.Microsecond), s.query)
		}
	}
	fmt.Fprintln(out)
	// No target of its own: the 0.2 ms is the served run's, which adds
	// the other processes and the contention of 16 connections.
	med, _, _ := medianOf(runs[0].backend)
	o.sum.add(figure{name: "PostgreSQL backend CPU per inbound save, alone", value: med.Round(time.Microsecond).String(),
		reference: "part of the served figure"})
	for _, r := range runs[1:] {
		if flushes, receipts := r.flushes(); r.setup == "" && r.savers > 1 && flushes > 0 {
			m, _, _ := medianOf(r.backend)
			o.sum.add(figure{name: fmt.Sprintf("PostgreSQL backend CPU per inbound save, %.1f per flush", receipts/flushes),
				value: m.Round(time.Microsecond).String(), reference: "alone: " + med.Round(time.Microsecond).String(),
				ratio: float64(m) / float64(med), ratioValid: true})
		}
	}
	return nil
}

// pgSaveRun is one schema of pgSaveBench: its database, the store saving
// into it and the backend serving the store.
type pgSaveRun struct {
	name, setup string
	// savers save concurrently: the group commit of receipts writes
	// their saves in batches.
	savers int
	store  *postgres.Store
	// reg gathers the store's metrics (receipts per flush).
	reg *prometheus.Registry
	// flushes0 and receipts0: the store's flush counts after the warm-up.
	flushes0, receipts0 float64
	db                  *pgx.Conn // a second connection, for the statistics
	msg                 postgres.InboundMessage
	pid                 int
	seq                 int
	stats               bool // pg_stat_statements answers
	backend             []time.Duration
	top                 []statementCount
}

// open migrates the empty database at dbURL, runs r.setup and warms up.
func (r *pgSaveRun) open(ctx context.Context, dbURL string, msg *postgres.InboundMessage, warmup int) error {
	var err error
	if r.store, err = postgres.Open(ctx, dbURL, postgres.Options{MaxConns: 1}); err != nil {
		return err
	}
	r.reg = prometheus.NewRegistry()
	if err := r.reg.Register(r.store.Collector()); err != nil {
		return err
	}
	if _, err := r.store.Migrate(ctx); err != nil {
		return err
	}
	if r.db, err = pgx.Connect(ctx, dbURL); err != nil {
		return err
	}
	if r.setup != "" {
		if _, err := r.db.Exec(ctx, r.setup); err != nil {
			return fmt.Errorf("variant's SQL: %w", err)
		}
	}
	if _, err := r.db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err == nil {
		r.stats = r.db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_statements`).Scan(new(int64)) == nil
	}
	r.msg = *msg
	// The warm-up fills the caches and prepares the statement.
	if err := r.save(ctx, warmup); err != nil {
		return err
	}
	r.flushes0, r.receipts0 = r.flushes()
	// The store's one connection: the other "edihub" session of this
	// database is none (r.db has no application_name).
	err = r.db.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = 'edihub' AND datname = current_database()`).Scan(&r.pid)
	if err != nil {
		return fmt.Errorf("the saving backend: %w", err)
	}
	return nil
}

func (r *pgSaveRun) close() {
	if r.db != nil {
		_ = r.db.Close(context.Background())
	}
	if r.store != nil {
		r.store.Close()
	}
}

// save makes n saves, r.savers at a time.
func (r *pgSaveRun) save(ctx context.Context, n int) error {
	var g errgroup.Group
	seq := r.seq
	r.seq += n
	for i := range r.savers {
		g.Go(func() error {
			msg := r.msg
			for j := i; j < n; j += r.savers {
				msg.MessageID = "<pgsave-" + strconv.Itoa(seq+j+1) + "@bench>"
				id, err := r.store.SaveInbound(ctx, &msg)
				if err != nil {
					return fmt.Errorf("save %d: %w", seq+j+1, err)
				}
				if id <= 0 {
					return errors.New("save: no id")
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// flushes returns the flushes of the group commit of receipts since the
// warm-up, and the receipts they wrote.
func (r *pgSaveRun) flushes() (flushes, receipts float64) {
	mfs, err := r.reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() == "edihub_receipt_flush_receipts" && len(mf.GetMetric()) == 1 {
			h := mf.GetMetric()[0].GetHistogram()
			return float64(h.GetSampleCount()) - r.flushes0, h.GetSampleSum() - r.receipts0
		}
	}
	return 0, 0
}

// pgSaveRound is one round's figures per save.
type pgSaveRound struct {
	backend, wall time.Duration
	others        string
}

func (r *pgSaveRun) round(ctx context.Context, pgDataDir string, n int, last bool) (pgSaveRound, error) {
	var stmts0 map[string]statementCount
	if last {
		stmts0 = statementCalls(ctx, r.db, r.stats)
	}
	pid := strconv.Itoa(r.pid)
	b0, o0 := schedNS(pid), pgOthersNS(pgDataDir, pid)
	t0 := time.Now()
	if err := r.save(ctx, n); err != nil {
		return pgSaveRound{}, err
	}
	wall := time.Since(t0)
	b1, o1 := schedNS(pid), pgOthersNS(pgDataDir, pid)
	s := pgSaveRound{backend: time.Duration((b1 - b0) / int64(n)), wall: wall / time.Duration(n), others: "–"}
	if pgDataDir != "" {
		s.others = time.Duration((o1 - o0) / int64(n)).Round(time.Microsecond).String()
	}
	r.backend = append(r.backend, s.backend)
	if last {
		_, r.top = statementsBetween(stmts0, statementCalls(ctx, r.db, r.stats))
		r.top = r.top[:min(len(r.top), 3)]
	}
	return s, nil
}

// medianOf returns the median, the least and the greatest of ds.
func medianOf(ds []time.Duration) (med, lo, hi time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[0], s[len(s)-1]
}

// pgSaveMessage is the message the served run stores: loadgen's payload
// and a signed MDN for it.
func pgSaveMessage(st *identity) (*postgres.InboundMessage, error) {
	payload := make([]byte, 4096)
	filler := []byte("LOADGEN DOCUMENT 000000 ")
	for i := range payload {
		payload[i] = filler[i%len(filler)]
	}
	const mic = "m7zF3j8bvWl8D0zGmKmcxAF5VOTvsiBq3PLX6a8nBRk=, sha-256"
	disp := mdn.Processed()
	hdr, body, err := mdn.Build(mdn.Report{
		ReportingUA: "edihub", OriginalRecipient: stationID, FinalRecipient: stationID,
		OriginalMessageID: "<loadgen-0-1@bench>", Disposition: disp, MIC: mic,
	}, mdn.BuildOptions{Sign: true, Key: st.key, Cert: st.cert})
	if err != nil {
		return nil, err
	}
	hdr.Set("AS2-Version", "1.2")
	hdr.Set("AS2-From", stationID)
	hdr.Set("AS2-To", `"`+partnerID+`"`)
	hdr.Set("Message-ID", "<edihub-0123456789abcdef@EDIHUB>")
	hdr.Set("Date", time.Now().UTC().Format(time.RFC1123Z))
	hdr.Set("Subject", "Message Disposition Notification")
	hdr.Set("EDIINT-Features", "multiple-attachments, CEM, AS2-Restart")
	return &postgres.InboundMessage{
		Partner: partnerID, AS2From: partnerID, AS2To: stationID,
		Status: postgres.InboundProcessed, Disposition: disp.String(),
		MIC: mic, MICAlg: "sha-256", Signed: true, Encrypted: true,
		ContentType: "application/edi-x12", PayloadSize: int64(len(payload)), Payload: payload,
		MDNMode: "sync", MDNSigned: true,
		MDN: &postgres.StoredMDN{Header: hdr, Body: body, Disposition: disp.String(), MIC: mic, Signed: true},
	}, nil
}

// schedNS returns the CPU time of process pid in nanoseconds
// (/proc/<pid>/schedstat), 0 when unreadable.
func schedNS(pid string) int64 {
	b, err := os.ReadFile("/proc/" + pid + "/schedstat")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	n, _ := strconv.ParseInt(f, 10, 64)
	return n
}

// pgOthersNS returns the CPU time in nanoseconds of the throwaway
// server's postmaster and its children but skip.
func pgOthersNS(pgDataDir, skip string) int64 {
	pm := postmasterPID(pgDataDir)
	if pm == "" {
		return 0
	}
	n := schedNS(pm)
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if d.Name() == skip {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat")); err == nil {
			if f := statFields(st); len(f) > 1 && f[1] == pm {
				n += schedNS(d.Name())
			}
		}
	}
	return n
}

// pgSaveBase is the run r is compared with: the migrated schema's run of
// as many savers, else the first (one saver).
func pgSaveBase(runs []*pgSaveRun, r *pgSaveRun) *pgSaveRun {
	for _, b := range runs {
		if b.setup == "" && b.savers == r.savers && b != r {
			return b
		}
	}
	return runs[0]
}
