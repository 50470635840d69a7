// Package chaos is edihub's proof under fire (issue 21): the whole hub
// under steady AS2 traffic both ways while a seeded schedule of faults
// comes at it, then checkers over the recorded history, in the manner of
// Jepsen.
//
// Run starts real parts only: a local Kubernetes control plane
// (test/controlplane), PostgreSQL as a primary with a synchronous
// streaming standby behind one address (ha.go), three edihub replicas
// behind a round-robin front door (test/failover, test/cluster), a partner
// station (a second edihub with a database of its own) that sends to the
// hub and answers the hub's documents with asynchronous MDNs, and an SMTP
// server for the end-of-day report. Faults (faults.go) are SIGKILL of the
// leader and of a follower, SIGSTOP of the leader past its lease, the
// leader cut from the API server or from PostgreSQL alone, an API server
// restart, a PostgreSQL primary failover, SMTP down at report time and a
// rolling restart with SIGTERM. The checkers (check.go) judge what the
// databases, the front doors and the mail server recorded.
//
// make chaos (cmd/chaos) runs it with flags; TestChaosShort runs the
// short mode in make test.
package chaos

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Mode is how long and how hard a run is.
type Mode string

// The modes.
const (
	// Short runs each fault kind once, in a seeded order, with short lease
	// timings (lease 8 s): a few minutes.
	Short Mode = "short"
	// Long draws faults from the seeded schedule until Duration is up,
	// with edihub's production timings (lease 30 s).
	Long Mode = "long"
)

// Options configure Run.
type Options struct {
	// Binary is the edihub binary (failover.BuildBinary).
	Binary string
	Mode   Mode
	// Duration bounds the fault schedule of a long run.
	Duration time.Duration
	// Seed orders the faults and picks their victims and pauses.
	Seed uint64
	// Rate is how many documents each side sends per second.
	Rate float64
	// Async replicates the database asynchronously: a run that shows
	// what breaks (the checker must report lost documents).
	Async bool
	// MultiHost gives the replicas a libpq multi-host URL of the two
	// database nodes with target_session_attrs=read-write instead of one
	// address repointed at a promotion.
	MultiHost bool
	// Faults, if set, runs only these kinds, once each, in this order.
	Faults []Kind
	// Logf receives progress lines.
	Logf func(format string, args ...any)
	// NoReport leaves out the end-of-day report and the SMTP outage at its
	// time (and their checker), for a run about something else that
	// should not wait for the report time.
	NoReport bool
	// KeepDir keeps the run's directory (logs, data) instead of deleting
	// it at the end.
	KeepDir bool
}

func (o *Options) defaults() error {
	if o.Binary == "" {
		return fmt.Errorf("chaos: Options.Binary is empty")
	}
	if o.Mode == "" {
		o.Mode = Short
	}
	if o.Rate <= 0 {
		o.Rate = 2
	}
	if o.Mode == Long && o.Duration <= 0 {
		o.Duration = 30 * time.Minute
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return nil
}

// timings are the replicas' lease and retry settings of a mode.
func (o *Options) timings() []string {
	if o.Mode == Long {
		// Production's lease, renew deadline, retry period; retries of
		// sends kept short so the run settles within minutes.
		return []string{"EDIHUB_RETRY_BACKOFF=500ms", "EDIHUB_RETRY_BACKOFF_MAX=5s", "EDIHUB_DISPATCH_LEASE=20s"}
	}
	return []string{
		"EDIHUB_LEASE_DURATION=8s",
		"EDIHUB_RENEW_DEADLINE=4s",
		"EDIHUB_RETRY_PERIOD=1s",
		"EDIHUB_WORKER_STOP_TIMEOUT=2s",
		"EDIHUB_DISPATCH_LEASE=10s",
		"EDIHUB_RETRY_BACKOFF=200ms",
		"EDIHUB_RETRY_BACKOFF_MAX=2s",
	}
}

// lease is the lease duration of the mode's timings.
func (o *Options) lease() time.Duration {
	if o.Mode == Long {
		return 30 * time.Second
	}
	return 8 * time.Second
}

func (o *Options) rng() *rand.Rand { return rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15)) }
