package chaos_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/test/chaos"
	"github.com/edihub/edihub/test/failover"
)

// bin is edihub, built once for the package's tests.
var bin = failover.SharedBinary{Prefix: "edihub-chaos-bin-"}

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, testenv.After(bin.Remove), testenv.CheckLeaks()))
}

// binary builds edihub once per test binary.
func binary(t *testing.T) string { return bin.Path(t) }

// run runs the chaos harness with o and logs its tables.
func run(t *testing.T, o chaos.Options) *chaos.Result {
	t.Helper()
	o.Binary = binary(t)
	o.Logf = t.Logf
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	res, err := chaos.Run(ctx, o)
	if res != nil {
		var b strings.Builder
		res.Print(&b)
		t.Log(b.String())
	}
	if err != nil {
		t.Fatalf("chaos run: %v", err)
	}
	return res
}

// TestChaosShort is make chaos's short mode (issue 21): the whole hub
// under traffic both ways while each fault kind comes once, in the order
// of seed 1, with a synchronous standby. Every invariant must hold: no
// acknowledged document lost or stored twice, across the database
// failover too; one final state per outbound message; each async MDN
// applied once; one report mail equal to a recount despite SMTP down at
// report time; no stale or interleaved fenced write, the token never
// backwards. Every fault must also have healed (its successor found, its
// victim back). Times and availability are logged, not judged.
func TestChaosShort(t *testing.T) {
	res := run(t, chaos.Options{Mode: chaos.Short, Seed: 1, Rate: 2})
	for _, f := range res.Verdict.Failures() {
		t.Errorf("broken invariant: %s", f)
	}
	seen := map[chaos.Kind]bool{}
	for _, o := range res.Outcomes {
		seen[o.Kind] = true
		if o.Err != nil {
			t.Errorf("fault %s of %s did not heal: %v", o.Kind, o.Victim, o.Err)
		}
	}
	for _, k := range append(chaos.Kinds, chaos.SMTPDown) {
		if !seen[k] {
			t.Errorf("fault kind %s never ran", k)
		}
	}
	if !res.Settled {
		t.Error("the run did not settle: messages were not final three minutes after the load stopped")
	}
	if res.Verdict.Acknowledged == 0 || res.Verdict.Delivered == 0 {
		t.Errorf("no traffic: %d acknowledged partner documents, %d delivered hub documents", res.Verdict.Acknowledged, res.Verdict.Delivered)
	}
}

// TestChaosAsyncReplicationLoses is the expected failure of issue 21: the
// same database failover with the standby replicating asynchronously. The
// harness cuts the replication link for three seconds of traffic before it
// kills the primary, so the primary acknowledges documents (the partner
// gets its positive MDN, the hub's API its 202) that the standby never
// received; the promoted standby does not have them, and the checker must
// say so. With a synchronous standby (TestChaosShort) the same fault loses
// nothing: the primary's commits wait for the standby.
func TestChaosAsyncReplicationLoses(t *testing.T) {
	res := run(t, chaos.Options{Mode: chaos.Short, Seed: 1, Rate: 2, Async: true, NoReport: true, Faults: []chaos.Kind{chaos.DBFailover}})
	v := res.Verdict
	if v.Lost == 0 && v.SubmittedLost == 0 {
		t.Errorf("asynchronous replication across a failover: checker found %d acknowledged partner documents and %d accepted hub documents lost, want some (the harness or the checker is blind)", v.Lost, v.SubmittedLost)
	}
	t.Logf("expected failure: %d acknowledged partner documents and %d accepted hub documents lost", v.Lost, v.SubmittedLost)
}

// TestChaosMultiHostFailover: the replicas reach PostgreSQL through a libpq
// multi-host URL of both nodes with target_session_attrs=read-write (no
// address repointed): two database failovers, the primary moving to the
// other node and back, and the leader cut from both nodes, under traffic
// both ways. Nothing acknowledged is lost, every message ends final, the
// fence holds, and receiving comes back after each promotion.
func TestChaosMultiHostFailover(t *testing.T) {
	res := run(t, chaos.Options{Mode: chaos.Short, Seed: 3, Rate: 2, MultiHost: true, NoReport: true,
		Faults: []chaos.Kind{chaos.DBFailover, chaos.CutLeaderDB, chaos.DBFailover}})
	for _, f := range res.Verdict.Failures() {
		t.Errorf("broken invariant: %s", f)
	}
	failovers := 0
	for _, o := range res.Outcomes {
		if o.Err != nil {
			t.Errorf("fault %s of %s did not heal: %v", o.Kind, o.Victim, o.Err)
		}
		if o.Kind == chaos.DBFailover {
			failovers++
			if o.Receiving < 0 {
				t.Errorf("receiving never came back after a promotion")
			}
		}
	}
	if failovers != 2 {
		t.Errorf("%d database failovers ran, want 2", failovers)
	}
	if !res.Settled || res.Verdict.Acknowledged == 0 || res.Verdict.Delivered == 0 {
		t.Errorf("settled %v, %d acknowledged partner documents, %d delivered hub documents", res.Settled, res.Verdict.Acknowledged, res.Verdict.Delivered)
	}
}
