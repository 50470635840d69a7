// Command chaos is make chaos: the whole hub under load and a seeded
// schedule of faults, then the checkers' counts and the failover table
// (test/chaos). It exits 1 when an invariant broke.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/edihub/edihub/test/chaos"
	"github.com/edihub/edihub/test/failover"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	var o chaos.Options
	long := flag.Bool("long", false, "long mode: faults drawn from the seeded schedule for -duration with production lease timings (lease 30 s); default: the short mode, each fault kind once with a lease of 8 s (a few minutes)")
	flag.DurationVar(&o.Duration, "duration", 30*time.Minute, "how long the long mode injects faults")
	flag.Uint64Var(&o.Seed, "seed", 1, "seed of the fault schedule (order, pauses, draws)")
	flag.Float64Var(&o.Rate, "rate", 2, "documents per second each way (hub → partner, partner → hub)")
	flag.BoolVar(&o.Async, "async", false, "replicate PostgreSQL asynchronously: shows what breaks (the checker reports lost documents; exit 1 expected)")
	flag.BoolVar(&o.MultiHost, "multihost", false, "give the replicas a libpq multi-host URL of both database nodes with target_session_attrs=read-write, instead of one address repointed at a promotion")
	faults := flag.String("faults", "", "comma-separated fault kinds to run once each, in order (default: the schedule); kinds: "+kinds())
	flag.BoolVar(&o.KeepDir, "keep", false, "keep the run's directory (logs, data)")
	flag.Parse()
	if *long {
		o.Mode = chaos.Long
	}
	if *faults != "" {
		for _, k := range strings.Split(*faults, ",") {
			o.Faults = append(o.Faults, chaos.Kind(strings.TrimSpace(k)))
		}
	}
	o.Logf = func(f string, a ...any) {
		fmt.Printf("%s chaos | "+f+"\n", append([]any{time.Now().Format("15:04:05")}, a...)...)
	}
	dir, err := os.MkdirTemp("", "edihub-chaos-bin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	o.Logf("building edihub")
	if o.Binary, err = failover.BuildBinary(ctx, dir); err != nil {
		return err
	}
	res, err := chaos.Run(ctx, o)
	if res != nil && (err == nil || len(res.Outcomes) > 0) {
		res.Print(os.Stdout)
	}
	if err != nil {
		return err
	}
	if fs := res.Verdict.Failures(); len(fs) > 0 {
		return errors.New("broken invariants: " + strings.Join(fs, "; "))
	}
	return nil
}

func kinds() string {
	var ks []string
	for _, k := range append(chaos.Kinds, chaos.SMTPDown) {
		ks = append(ks, string(k))
	}
	return strings.Join(ks, ", ")
}
