package console_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/console"
	"github.com/edihub/edihub/internal/leader"
)

// seedHub writes what the database knows of a hub of three replicas:
// the term and heartbeats of the leader, the replicas' partner revisions,
// work in the outbox and async MDNs in the inbox.
func (e *env) seedHub(at time.Time) {
	e.t.Helper()
	e.exec(`INSERT INTO leader_fence (lease, token, holder, opened_at) VALUES ($1, 7, 'edihub-0-7f3a', $2)`, lease, at.Add(-4*time.Hour))
	e.exec(`INSERT INTO leader_terms (lease, token, holder, opened_at) VALUES ($1, 7, 'edihub-0-7f3a', $2)`, lease, at.Add(-4*time.Hour))
	e.exec(`INSERT INTO leader_heartbeats (lease, token, holder, beat_at) VALUES ($1, 7, 'edihub-0-7f3a', $2)`, lease, at.Add(-2*time.Second))
	rev, err := e.st.PartnerRevision(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range []struct {
		id  string
		rev int64
	}{{"edihub-0-7f3a", rev}, {"edihub-1-c2d9", rev}, {"edihub-2-91be", rev - 1}} {
		e.exec(`INSERT INTO partner_replicas (identity, revision, applied_at, seen_at) VALUES ($1, $2, $3, now())`, r.id, r.rev, at.Add(-time.Hour))
	}
	e.exec(`INSERT INTO mdn_inbox (content_type, body, original_message_id, state, reason, received_at, processed_at)
VALUES ('multipart/report', 'x', '<gone@edihub>', 'orphan', 'no such message', $1, $1),
       ('multipart/report', 'x', '<lost@edihub>', 'orphan', 'no such message', $1, $1),
       ('multipart/report', 'x', '<out-5@edihub>', 'pending', '', $1, NULL)`, at.Add(-time.Minute))
}

// TestHubPage: the hub page shows the leader with its term and token,
// this replica's workers, the replicas with the one behind, the queues
// and today's figures; the day report opens in a sandboxed frame under
// its own policy.
func TestHubPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.addUser("vera", auth.RoleViewer)
	now := time.Now()
	e.seedHub(now)
	e.seed(msg{Direction: "outbound", Partner: "GLOBEX", MessageID: "<out-5@edihub>", Status: "retrying", Payload: "x", Attempts: 2, LastStatus: 502, Created: now})
	e.seed(msg{Direction: "inbound", Partner: "ACME CORP", MessageID: "<in-5@acme>", Status: "processed", Payload: "x", Created: now})

	tb := tab(t)
	e.login(t, tb, "vera")
	run(t, tb, "open the hub", chromedp.Navigate(e.page("/hub")), chromedp.WaitVisible(chromedp.CSS("#replicas")))
	for sel, want := range map[string][]string{
		"#leader":         {"edihub-0-7f3a", "fencing token 7"},
		"#this-replica":   {"edihub-0-7f3a", "yes", "token 7"},
		"#workers":        {"heartbeat", "mdn-poller", "purger", "report", "running"},
		"#replicas":       {"edihub-1-c2d9", "edihub-2-91be", "behind revision 2", "leader", "this one"},
		"#outbox":         {"message"},
		"#inbox":          {"Pending", "1", "Orphans", "2"},
		"#today":          {"1\nreceived", "1\nqueued or retrying"},
		"#today-partners": {"ACME CORP", "GLOBEX"},
	} {
		got := text(t, tb, sel)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s shows %q, want %q in it", sel, got, w)
			}
		}
	}
	checkPage(t, tb, "#autorefresh", `a[href="/console/reports/today"]`)

	run(t, tb, "open today's report", submit(`a[href="/console/reports/today"]`), chromedp.WaitVisible(chromedp.CSS("iframe.report")))
	// The frame is the mail's HTML, under its own policy.
	status := fetchStatus(t, tb, http.MethodGet, "/console/reports/today/report.html")
	csp := eval[string](t, tb, `fetch("/console/reports/today/report.html").then(r => r.headers.get("Content-Security-Policy"))`)
	if status != http.StatusOK || !strings.Contains(csp, "sandbox") || !strings.Contains(csp, "style-src 'unsafe-inline'") || strings.Contains(csp, "script-src") {
		t.Errorf("report.html: %d with policy %q, want 200 in a sandbox with inline styles and no script", status, csp)
	}
	inFrame := eval[string](t, tb, `new Promise(res => { const f = document.querySelector("iframe.report"); const ok = () => res(f.getAttribute("sandbox") === "" ? "sandboxed" : "not sandboxed"); if (f.contentWindow && document.readyState === "complete") ok(); else f.addEventListener("load", ok); })`)
	if inFrame != "sandboxed" {
		t.Errorf("the report frame is %s", inFrame)
	}
	checkPage(t, tb, `a[href="/console/hub"]`, "#csv")
}

// TestHubPageShowsLeaderElsewhere: a replica that follows shows the
// leader's workers as the leader recorded them (the console of every
// replica records its elector's status; here one console records first
// as the leader, then, after a handover, as a follower), flags them when
// the leader has stopped recording, and says so when it recorded none.
func TestHubPageShowsLeaderElsewhere(t *testing.T) {
	t.Parallel()
	var status atomic.Pointer[leader.Status]
	lead := leader.Status{
		Identity: "edihub-1-c2d9", IsLeader: true, Holder: "edihub-1-c2d9", FencingToken: 8, Backend: "postgres", LeaseName: lease,
		Workers: map[string]leader.WorkerStatus{
			"heartbeat": {Running: true, LastSuccess: time.Now().Add(-time.Second)},
			"report":    {Running: true, Stuck: true, StuckAfter: 600, Restarts: 3},
		},
	}
	status.Store(&lead)
	e := newEnv(t, func(o *console.Options, _ string) {
		o.Leader = func() leader.Status { return *status.Load() }
		o.Version = "v9.9.9-test"
	})
	e.addUser("vera", auth.RoleViewer)
	e.seedHub(time.Now())
	e.waitRecorded("edihub-1-c2d9", true)
	// The lease moves on: this console's replica is a follower now.
	status.Store(&leader.Status{Identity: "edihub-0-7f3a", Holder: "edihub-1-c2d9", Backend: "postgres", LeaseName: lease,
		Workers: map[string]leader.WorkerStatus{"heartbeat": {}, "report": {}}})
	e.waitRecorded("edihub-0-7f3a", false)

	tb := tab(t)
	e.login(t, tb, "vera")
	look := func(sel string, want ...string) {
		t.Helper()
		run(t, tb, "open the hub", chromedp.Navigate(e.page("/hub")), chromedp.WaitVisible(chromedp.CSS("#replicas")))
		got := text(t, tb, sel)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s shows %q, want %q in it", sel, got, w)
			}
		}
	}
	look("#workers-source", "edihub-1-c2d9", "as it recorded them")
	look("#workers", "heartbeat", "running", "report", "stuck", "3")
	look("#replicas", "v9.9.9-test")
	if got := text(t, tb, "#workers-source"); strings.Contains(got, "not recorded lately") {
		t.Errorf("#workers-source shows %q for a fresh record", got)
	}

	e.exec(`UPDATE replica_status SET seen_at = now() - interval '1 minute' WHERE identity = 'edihub-1-c2d9'`)
	look("#workers-source", "edihub-1-c2d9", "not recorded lately")
	look("#workers", "heartbeat", "report")

	e.exec(`DELETE FROM replica_status WHERE identity = 'edihub-1-c2d9'`)
	look("#workers-source", "The leader, edihub-1-c2d9, has not recorded its workers")
	if n := eval[int](t, tb, `document.querySelectorAll("#workers").length`); n != 0 {
		t.Errorf("%d worker tables without a record of the leader, want none", n)
	}
}

// waitRecorded waits until the console recorded identity's status with
// isLeader.
func (e *env) waitRecorded(identity string, isLeader bool) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var got bool
		err := e.db.QueryRow(e.ctx, `SELECT is_leader FROM replica_status WHERE identity = $1`, identity).Scan(&got)
		if err == nil && got == isLeader {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("replica_status of %s: is_leader %v (%v), want %v within 30 s", identity, got, err, isLeader)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
