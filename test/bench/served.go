package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/test/cluster"
)

// servedBench measures the served binary (issue 22, point 4): edihub is
// built and run as "edihub serve" against the bench's PostgreSQL (a
// database of its own), and test/loadgen, built too and in a process of
// its own, posts openssl-built signed + encrypted messages asking for a
// signed sync MDN from o.senders senders. Next to loadgen's throughput
// and CPU per message of edihub and of PostgreSQL, the bench measures in
// the same run the RSA-2048 private-key speed (the bound, as the
// in-process throughput run does) and the CPU one such operation takes in
// this process, so edihub's CPU per message is compared with its RSA
// work per message (two operations: decryption and the MDN signature);
// and it counts the statements (pg_stat_statements, when loaded) and
// transactions (pg_stat_database, read after edihub stopped, since
// backends report them lazily) per message stored.
func servedBench(ctx context.Context, out io.Writer, o options, partner, st *identity) error {
	dir, err := writeKeys(partner, st)
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bins, err := buildServed(ctx, dir)
	if err != nil {
		return err
	}
	dbURL, err := servedDatabase(ctx, o.databaseURL)
	if err != nil {
		return err
	}
	cfg := filepath.Join(dir, "edihub.yaml")
	if err := os.WriteFile(cfg, []byte(`station: {as2_id: "`+stationID+`", private_key: station.key, certificate: station.crt}
partners:
  - as2_id: "`+partnerID+`"
    url: http://127.0.0.1:1/as2
    certificate: partner.crt
    sign: sha-256
    encrypt: aes256-cbc
    mdn: sync
    mdn_signed: true
    replay_window: 0s
`), 0o600); err != nil {
		return err
	}
	httpAddr, err := cluster.FreeAddr()
	if err != nil {
		return err
	}
	opsAddr, err := cluster.FreeAddr()
	if err != nil {
		return err
	}
	c, err := cluster.Start(cluster.Options{
		Binary: bins.edihub,
		Env: []string{
			"EDIHUB_DATABASE_URL=" + dbURL, "EDIHUB_CONFIG=" + cfg, "EDIHUB_MIGRATE=true",
			"EDIHUB_LEADER_BACKEND=postgres", "EDIHUB_IDENTITY=bench-1", "EDIHUB_OPS_PPROF=" + strconv.FormatBool(o.servedProfile != ""),
		},
		Replicas: []cluster.ReplicaSpec{{Name: "edihub", HTTPAddr: httpAddr, OpsAddr: opsAddr}},
	})
	if err != nil {
		return err
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		return c.Stop(20 * time.Second)
	}
	defer stop()
	rep := c.Replicas()[0]
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := rep.WaitReady(rctx); err != nil {
		return fmt.Errorf("edihub serve: %w", err)
	}

	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer db.Close(context.Background())
	haveStatements := db.QueryRow(ctx, `SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'`).Scan(new(int)) == nil
	if !haveStatements {
		_, err := db.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`)
		haveStatements = err == nil
	}
	if haveStatements {
		// pg_stat_statements answers only when the library is preloaded.
		haveStatements = db.QueryRow(ctx, `SELECT count(*) FROM pg_stat_statements`).Scan(new(int64)) == nil
	}

	// The RSA reference, before and after the load; the faster is the
	// bound (others' load only ever slows it).
	rsaBefore, err := measureRSA(st, o.pgDataDir)
	if err != nil {
		return err
	}
	stmts0 := statementCalls(ctx, db, haveStatements)
	msgs0, xacts0, err := servedCounts(ctx, o.databaseURL, dbURL)
	if err != nil {
		return err
	}
	pids := []string{strconv.Itoa(rep.PID())}
	if pm := postmasterPID(o.pgDataDir); pm != "" {
		pids = append(pids, pm)
	}
	const warmup = 3 * time.Second
	lg := exec.CommandContext(ctx, bins.loadgen, "-url", "http://"+httpAddr+"/as2", "-from", partnerID, "-to", stationID,
		"-key", filepath.Join(dir, "partner.key"), "-cert", filepath.Join(dir, "partner.crt"), "-recipient", filepath.Join(dir, "station.crt"),
		"-senders", strconv.Itoa(o.senders), "-size", strconv.Itoa(o.payload), "-duration", o.servedDuration.String(), "-warmup", warmup.String(),
		"-pids", strings.Join(pids, ","))
	var lgOut, lgErr bytes.Buffer
	lg.Stdout, lg.Stderr = &lgOut, &lgErr
	load0 := loadAverage()
	if err := lg.Start(); err != nil {
		return err
	}
	profErr := make(chan error, 1)
	if o.servedProfile != "" {
		go func() {
			// openssl builds the messages first (about a second), then
			// the warm-up: the profile covers the middle of the window.
			time.Sleep(warmup + 3*time.Second)
			profErr <- fetchProfile(ctx, "http://"+opsAddr+"/debug/pprof/profile?seconds="+strconv.Itoa(max(1, int(o.servedDuration.Seconds())-4)), o.servedProfile)
		}()
	} else {
		profErr <- nil
	}
	if err := lg.Wait(); err != nil {
		return fmt.Errorf("loadgen: %w: %s", err, strings.TrimSpace(lgErr.String()))
	}
	if err := <-profErr; err != nil {
		return fmt.Errorf("CPU profile of edihub serve: %w", err)
	}
	load1 := loadAverage()
	statements, top := statementsBetween(stmts0, statementCalls(ctx, db, haveStatements))
	msgs1, _, err := servedCounts(ctx, o.databaseURL, dbURL)
	if err != nil {
		return err
	}
	if err := stop(); err != nil {
		return fmt.Errorf("stop edihub serve: %w", err)
	}
	_, xacts1, err := servedCounts(ctx, o.databaseURL, dbURL)
	if err != nil {
		return err
	}
	rsaAfter, err := measureRSA(st, o.pgDataDir)
	if err != nil {
		return err
	}

	lr, err := parseLoadgen(lgOut.String(), pids)
	if err != nil {
		return fmt.Errorf("%w; loadgen said:\n%s", err, lgOut.String())
	}
	ops := max(rsaBefore.opsPerSecond, rsaAfter.opsPerSecond)
	bound := ops / 2
	// The CPU one private-key operation takes is measured in this process
	// (GOMAXPROCS goroutines on an otherwise idle process); the lower of
	// the two measurements is the reference, the stricter one.
	perOp := min(rsaBefore.cpuPerOp, rsaAfter.cpuPerOp)
	rsaPerMsg := 2 * perOp
	stored := msgs1 - msgs0

	fmt.Fprintf(out, "Served receive (edihub serve, test/loadgen in its own process, openssl-built messages): %d B payload, signed SHA-256, encrypted AES-256-CBC/RSA-2048, signed sync MDN, %d senders, %s\n",
		o.payload, o.senders, o.servedDuration)
	fmt.Fprintf(out, "  %-44s %10.1f  (%d answered 200 in the window)\n", "messages/s", lr.rate, lr.sent)
	fmt.Fprintf(out, "  %-44s %10s\n", "latency", lr.latency)
	fmt.Fprintf(out, "  %-44s %10.1f  (the faster of before %.0f, after %.0f; others used %.2f, %.2f cores)\n",
		"RSA-2048 private-key ops/s (decrypt+sign)", ops, rsaBefore.opsPerSecond, rsaAfter.opsPerSecond, rsaBefore.others, rsaAfter.others)
	fmt.Fprintf(out, "  %-44s %10.1f\n", "crypto bound (ops/s / 2) messages/s", bound)
	fmt.Fprintf(out, "  %-44s %9.0f%%  (target >= 70%%)\n", "throughput / crypto bound", 100*lr.rate/bound)
	fmt.Fprintf(out, "  %-44s %10s  (before %s, after %s)\n", "CPU per RSA-2048 private-key operation", perOp.Round(time.Microsecond),
		rsaBefore.cpuPerOp.Round(time.Microsecond), rsaAfter.cpuPerOp.Round(time.Microsecond))
	fmt.Fprintf(out, "  %-44s %10s  (%.2f × its RSA work of %s; target <= 1.15)\n", "edihub CPU per message", lr.cpu[pids[0]].Round(time.Microsecond),
		float64(lr.cpu[pids[0]])/float64(rsaPerMsg), rsaPerMsg.Round(time.Microsecond))
	if len(pids) > 1 {
		fmt.Fprintf(out, "  %-44s %10s  (target <= 0.2 ms)\n", "PostgreSQL CPU per message", lr.cpu[pids[1]].Round(time.Microsecond))
	}
	fmt.Fprintf(out, "  %-44s %10s\n", "machine CPU per message", lr.machine.Round(time.Microsecond))
	fmt.Fprintf(out, "  %-44s %10d\n", "inbound messages stored during the load", stored)
	if stored > 0 {
		fmt.Fprintf(out, "  %-44s %10.2f  (pg_stat_database, edihub's background work included)\n", "transactions per message", float64(xacts1-xacts0)/float64(stored))
	}
	if haveStatements && stored > 0 {
		fmt.Fprintf(out, "  %-44s %10.2f  (pg_stat_statements; the most frequent:)\n", "statements per message", float64(statements)/float64(stored))
		for _, s := range top {
			fmt.Fprintf(out, "      %6.2f  %s\n", float64(s.calls)/float64(stored), s.query)
		}
	}
	fmt.Fprintf(out, "  load average before %s, after %s\n", load0, load1)
	if o.servedProfile != "" {
		fmt.Fprintf(out, "  CPU profile of edihub serve: %s (go tool pprof -top %s %s)\n", o.servedProfile, bins.edihub, o.servedProfile)
		if top, err := exec.CommandContext(ctx, "go", "tool", "pprof", "-top", "-nodecount=25", bins.edihub, o.servedProfile).Output(); err == nil {
			for _, l := range strings.Split(strings.TrimSpace(string(top)), "\n") {
				fmt.Fprintln(out, "    "+l)
			}
		}
	}
	fmt.Fprintln(out)

	o.sum.add(ratioAtLeast("served receive msg/s (edihub serve + loadgen)", fmt.Sprintf("%.0f", lr.rate),
		fmt.Sprintf("RSA bound %.0f msg/s", bound), lr.rate/bound, 0.70, true))
	o.sum.add(ratioAtMost("served: edihub CPU per message", lr.cpu[pids[0]].Round(time.Microsecond).String(),
		"its RSA work "+rsaPerMsg.Round(time.Microsecond).String(), float64(lr.cpu[pids[0]])/float64(rsaPerMsg), 1.15))
	if len(pids) > 1 {
		pg := lr.cpu[pids[1]]
		const limit = 200 * time.Microsecond
		o.sum.add(below("served: PostgreSQL CPU per message", pg.Round(time.Microsecond).String(), "0.2 ms",
			float64(pg)/float64(limit), pg <= limit, "≤ 0.2 ms"))
	}
	if haveStatements && stored > 0 {
		o.sum.add(figure{name: "served: statements per message", value: fmt.Sprintf("%.2f", float64(statements)/float64(stored)),
			reference: "pg_stat_statements"})
	}
	return nil
}

// statementCalls returns the calls so far of each statement of the
// current database (pg_stat_statements), by normalised text; nil when the
// extension is not there.
func statementCalls(ctx context.Context, db *pgx.Conn, have bool) map[string]int64 {
	if !have {
		return nil
	}
	rows, err := db.Query(ctx, `SELECT regexp_replace(left(query, 110), '\s+', ' ', 'g'), sum(calls)::bigint FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) GROUP BY 1`)
	if err != nil {
		return nil
	}
	calls := map[string]int64{}
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			return nil
		}
		calls[q] = n
	}
	return calls
}

type statementCount struct {
	query string
	calls int64
}

// statementsBetween returns the calls between two statementCalls, in
// all and of the ten most called statements.
func statementsBetween(before, after map[string]int64) (int64, []statementCount) {
	var total int64
	var all []statementCount
	for q, n := range after {
		if d := n - before[q]; d > 0 {
			total += d
			all = append(all, statementCount{q, d})
		}
	}
	slices.SortFunc(all, func(a, b statementCount) int { return int(b.calls - a.calls) })
	return total, all[:min(len(all), 10)]
}

// servedCounts returns the inbound messages stored in the database at
// dbURL and its committed and rolled back transactions so far, read
// through the server's default database (adminURL).
func servedCounts(ctx context.Context, adminURL, dbURL string) (messages, xacts int64, err error) {
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, err
	}
	defer db.Close(context.Background())
	if err := db.QueryRow(ctx, `SELECT count(*) FROM messages WHERE direction = 'inbound'`).Scan(&messages); err != nil {
		return 0, 0, err
	}
	if err := db.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&xacts); err != nil {
		return 0, 0, err
	}
	return messages, xacts, nil
}

// servedDatabase creates a fresh database beside the one at base for the
// served edihub and returns its URL.
func servedDatabase(ctx context.Context, base string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	name := "edihub_served_" + strconv.FormatInt(time.Now().UnixNano(), 36)
	c, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", err
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create the served edihub's database: %w", err)
	}
	u.Path = "/" + name
	return u.String(), nil
}

type servedBinaries struct{ edihub, loadgen string }

// buildServed builds edihub and loadgen into dir.
func buildServed(ctx context.Context, dir string) (servedBinaries, error) {
	b := servedBinaries{edihub: filepath.Join(dir, "edihub"), loadgen: filepath.Join(dir, "loadgen")}
	for bin, pkg := range map[string]string{b.edihub: "./cmd/edihub", b.loadgen: "./test/loadgen"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, pkg)
		if out, err := cmd.CombinedOutput(); err != nil {
			return b, fmt.Errorf("go build %s: %w: %s", pkg, err, out)
		}
	}
	return b, nil
}

// postmasterPID returns the throwaway server's postmaster PID, or "".
func postmasterPID(pgDataDir string) string {
	if pgDataDir == "" {
		return ""
	}
	b, err := os.ReadFile(filepath.Join(pgDataDir, "postmaster.pid"))
	if err != nil {
		return ""
	}
	pm, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(pm)
}

// rsaFigures is one RSA measurement: private-key operations per second
// on GOMAXPROCS goroutines, the CPU this process spent per operation, and
// the cores others used meanwhile.
type rsaFigures struct {
	opsPerSecond float64
	cpuPerOp     time.Duration
	others       float64
}

func measureRSA(st *identity, pgDataDir string) (rsaFigures, error) {
	const d = 3 * time.Second
	self0 := procTicks("self")
	ops, others, err := rsaOpsPerSecond(st.key, d, pgDataDir)
	if err != nil {
		return rsaFigures{}, err
	}
	ticks := procTicks("self") - self0
	n := ops * d.Seconds() // ops counted over about d
	return rsaFigures{opsPerSecond: ops, others: others,
		cpuPerOp: time.Duration(float64(ticks) / 100 / max(n, 1) * float64(time.Second))}, nil
}

// loadgenResult is what servedBench reads of loadgen's report.
type loadgenResult struct {
	sent    int
	rate    float64
	latency string
	// cpu is the CPU per message of each process given to -pids.
	cpu     map[string]time.Duration
	machine time.Duration
}

var (
	lgRate    = regexp.MustCompile(`(?m)^\d+ senders, [^:]+: (\d+) messages answered 200, ([\d.]+) msg/s$`)
	lgLatency = regexp.MustCompile(`(?m)^latency (.*)$`)
	lgCPU     = regexp.MustCompile(`(?m)^CPU of (\d+) \([^)]*\): ([\d.]+) ms per message$`)
	lgMachine = regexp.MustCompile(`(?m)^CPU of the machine: ([\d.]+) ms per message`)
	lgBad     = regexp.MustCompile(`(?m)^  (failed \(.*|disposition "(?:[^p]|p[^r]).*)$`)
)

// parseLoadgen reads loadgen's report; failures or dispositions other
// than processed are an error.
func parseLoadgen(s string, pids []string) (loadgenResult, error) {
	var r loadgenResult
	m := lgRate.FindStringSubmatch(s)
	if m == nil {
		return r, fmt.Errorf("no throughput in loadgen's report")
	}
	r.sent, _ = strconv.Atoi(m[1])
	r.rate, _ = strconv.ParseFloat(m[2], 64)
	if bad := lgBad.FindString(s); bad != "" {
		return r, fmt.Errorf("loadgen: %s", strings.TrimSpace(bad))
	}
	if m := lgLatency.FindStringSubmatch(s); m != nil {
		r.latency = m[1]
	}
	ms := func(v string) time.Duration {
		f, _ := strconv.ParseFloat(v, 64)
		return time.Duration(f * float64(time.Millisecond))
	}
	r.cpu = map[string]time.Duration{}
	for _, m := range lgCPU.FindAllStringSubmatch(s, -1) {
		r.cpu[m[1]] = ms(m[2])
	}
	for _, p := range pids {
		if _, ok := r.cpu[p]; !ok {
			return r, fmt.Errorf("no CPU figure for process %s in loadgen's report", p)
		}
	}
	if m := lgMachine.FindStringSubmatch(s); m != nil {
		r.machine = ms(m[1])
	}
	return r, nil
}

// fetchProfile saves the CPU profile at url into path.
func fetchProfile(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// loadAverage returns /proc/loadavg's three figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
