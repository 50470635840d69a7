package failover_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/pgtest"
	"github.com/edihub/edihub/test/cluster"
	"github.com/edihub/edihub/test/failover"
)

// Short lease timings for the end-to-end test (lease 8 s, renew deadline
// 4 s, retry period 1 s, worker stop 2 s: 4 + 1 + 2 < 8), so the takeover
// after the kill comes within seconds; claims of the killed replica's
// dispatchers come back after 10 s (the partner's timeout is 5 s).
var shortTimings = []string{
	"EDIHUB_LEASE_DURATION=8s",
	"EDIHUB_RENEW_DEADLINE=4s",
	"EDIHUB_RETRY_PERIOD=1s",
	"EDIHUB_WORKER_STOP_TIMEOUT=2s",
	"EDIHUB_DISPATCH_LEASE=10s",
	"EDIHUB_RETRY_BACKOFF=200ms",
	"EDIHUB_RETRY_BACKOFF_MAX=2s",
}

const (
	e2eDocuments = 60 // documents sent through the API
	e2eKillAfter = 20 // the leader is killed after this many and e2eHeld more
	e2eHeld      = 5  // documents whose MDNs are held at the proxy across the kill
	e2eToken     = "e2e-api-token"
	e2ePartner   = "PARTNER"
)

// TestAsyncMDNEndToEnd is issue 7's end-to-end test, once per leader
// backend: three replicas of the built binary (short lease timings) send a
// stream of documents, queued through the API of every replica in turn, to
// a partner station (a fourth edihub process with its own database) that
// answers each with a signed asynchronous MDN. The hub advertises one
// async MDN URL, a round-robin proxy in front of the three replicas, so the
// MDNs land on different replicas and go into the shared MDN inbox, where
// the leader's MDN poller applies them. The leader is killed (SIGKILL)
// after the first third of the stream, with messages still awaiting their
// MDN; the stream goes on through the survivors.
//
// Afterwards: every outbound message is delivered, once; every inbox MDN is
// processed (one per message) or an orphan with a reason; the partner
// received each Message-ID once and nothing else; MDNs arrived at more
// than one replica; MDNs stored while no replica led were applied by the
// successor; and every decided inbox row carries the fence of a term that
// was current when it committed (no row decided with a stale token).
func TestAsyncMDNEndToEnd(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b failover.Backend) {
		e := startE2E(t, b)
		leader, first := e.sc.leader(t)
		t.Logf("%s leads (term %d)", leader.Spec.Name, first.Token)

		ctx, cancel := within(t, 5*time.Minute)
		defer cancel()
		var killedAt time.Time
		var notFinalAtKill int
		for i := 0; i < e2eDocuments; i++ {
			if i == e2eKillAfter {
				// The first leader's poller has applied MDNs: wait for
				// one delivered message. Then hold the partner's MDNs at
				// the proxy, send a few documents, and once the partner
				// has them (their MDNs are on their way), kill the
				// leader mid-stream and let the MDNs through.
				if err := e.waitDelivered(ctx, 1); err != nil {
					t.Fatal(err)
				}
				e.proxy.Hold()
				for range e2eHeld {
					e.send(ctx, t, i)
					i++
				}
				if err := e.waitPartnerReceived(ctx, i); err != nil {
					e.proxy.Release()
					t.Fatal(err)
				}
				notFinalAtKill = e.countNotFinal(ctx, t)
				var err error
				killedAt, err = leader.Kill(ctx)
				e.proxy.Release()
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("SIGKILL %s after %d documents, %d messages awaiting their MDN", leader.Spec.Name, i, notFinalAtKill)
			}
			if i < e2eDocuments {
				e.send(ctx, t, i)
			}
			time.Sleep(150 * time.Millisecond) // stays: paces the documents so the kill falls amid real traffic
		}
		became, next, err := e.sc.cl.WaitNewLeader(ctx, killedAt, leader)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s leads (term %d), %v after the kill", next.Spec.Name, became.Token, became.Time.Sub(killedAt))
		if notFinalAtKill < e2eHeld {
			t.Errorf("%d messages awaited their MDN when the leader was killed, want at least the %d held: the kill was not mid-stream", notFinalAtKill, e2eHeld)
		}
		if err := e.waitSettled(ctx); err != nil {
			t.Fatal(err)
		}
		e.check(t, became.Token)
		e.sc.verify(t, nil)
	})
}

// e2e is one backend's run: the hub's replicas, the partner station, the
// proxy carrying the partner's MDNs, and what was queued.
type e2e struct {
	sc      *scenario
	proxy   *cluster.Balancer
	partner *postgres.Store
	queued  []queuedDoc
	next    int // the replica the next document is queued through
}

type queuedDoc struct {
	ID        int64  `json:"id"`
	MessageID string `json:"message_id"`
	via       string
}

func startE2E(t *testing.T, b failover.Backend) *e2e {
	t.Helper()
	bin := binary(t)
	dir := t.TempDir()
	hub, err := devpki.New("EDIHUB", devpki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	partner, err := devpki.New(e2ePartner, devpki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := cluster.StartBalancer("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	partnerHTTP, err := cluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	partnerOps, err := cluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{
		"hub.key":     hub.KeyPEM(),
		"hub.crt":     hub.CertPEM(),
		"partner.key": partner.KeyPEM(),
		"partner.crt": partner.CertPEM(),
		// The hub: its partner answers with signed async MDNs, sent to
		// the proxy in front of the replicas.
		"hub.yaml": fmt.Appendf(nil, `station: {as2_id: "EDIHUB", private_key: hub.key, certificate: hub.crt, async_mdn_url: "%s/as2"}
partners:
  - as2_id: %q
    url: http://%s/as2
    certificate: partner.crt
    sign: sha-256
    encrypt: aes256-cbc
    mdn: async
    mdn_signed: true
    timeout: 5s
    allow_private_mdn_targets: true # everything runs on 127.0.0.1
`, proxy.URL(), e2ePartner, partnerHTTP),
		// The partner station: it answers as the hub's request says
		// (Receipt-Delivery-Option), from its own outbox.
		"partner.yaml": fmt.Appendf(nil, `station: {as2_id: %q, private_key: partner.key, certificate: partner.crt}
partners:
  - as2_id: "EDIHUB"
    url: "%s/as2"
    certificate: hub.crt
    sign: sha-256
    encrypt: aes256-cbc
    mdn: sync
    mdn_signed: true
    timeout: 5s
    allow_private_mdn_targets: true # the hub's MDN URL is on 127.0.0.1
`, e2ePartner, proxy.URL()),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	partnerDB := pgtest.URL(t)
	var partnerLog lockedBuffer
	station, err := cluster.Start(cluster.Options{
		Binary: bin,
		Env: append([]string{
			"EDIHUB_DATABASE_URL=" + partnerDB,
			"EDIHUB_CONFIG=" + filepath.Join(dir, "partner.yaml"),
			"EDIHUB_LOG_FORMAT=json",
			"EDIHUB_SHUTDOWN_TIMEOUT=10s",
			"EDIHUB_LEADER_BACKEND=postgres",
			"EDIHUB_IDENTITY=partner",
		}, shortTimings...),
		Replicas: []cluster.ReplicaSpec{{Name: "partner", HTTPAddr: partnerHTTP, OpsAddr: partnerOps}},
		Output:   &partnerLog,
	})
	if err != nil {
		t.Fatalf("start the partner station: %v", err)
	}
	t.Cleanup(func() {
		if err := station.Stop(15 * time.Second); err != nil {
			t.Errorf("stop the partner station: %v", err)
		}
		if t.Failed() {
			t.Logf("partner station log:\n%s", partnerLog.tail(200))
		}
	})
	ctx, cancel := within(t, 2*time.Minute)
	defer cancel()
	if err := station.Replicas()[0].WaitReady(ctx); err != nil {
		t.Fatalf("partner station not ready: %v", err)
	}
	st, err := postgres.Open(ctx, partnerDB, postgres.Options{MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)

	sc := start(t, b, setup{
		config: filepath.Join(dir, "hub.yaml"),
		env:    append([]string{"EDIHUB_API_TOKEN=" + e2eToken}, shortTimings...),
	})
	var backends []string
	for _, r := range sc.cl.Replicas() {
		backends = append(backends, r.Spec.HTTPAddr)
	}
	proxy.SetBackends(backends...)
	return &e2e{sc: sc, proxy: proxy, partner: st}
}

var apiClient = &http.Client{Timeout: 10 * time.Second}

// send queues document i through the API of the next running replica.
func (e *e2e) send(ctx context.Context, t *testing.T, i int) {
	t.Helper()
	rs := e.sc.cl.Replicas()
	var r *failover.Replica
	for range rs {
		c := rs[e.next%len(rs)]
		e.next++
		if c.PID() != 0 {
			r = c
			break
		}
	}
	if r == nil {
		t.Fatal("no replica is running")
	}
	doc := fmt.Sprintf("ISA*00*          *00*          *ZZ*EDIHUB         *ZZ*PARTNER        *261201*0101*U*00401*%09d*0*T*>~\nIEA*0*%09d~\n", i+1, i+1)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.Spec.HTTPAddr+"/api/v1/messages?partner="+e2ePartner, strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+e2eToken)
	req.Header.Set("Content-Type", "application/EDI-X12")
	resp, err := apiClient.Do(req)
	if err != nil {
		t.Fatalf("document %d through %s: %v", i, r.Spec.Name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var q queuedDoc
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(body, &q) != nil || q.ID == 0 {
		t.Fatalf("document %d through %s: %s %s, want 202 with an id", i, r.Spec.Name, resp.Status, body)
	}
	q.via = r.Spec.Name
	e.queued = append(e.queued, q)
}

func (e *e2e) outbound(ctx context.Context) ([]hub.MessageInfo, error) {
	return e.sc.cl.Store.Messages(ctx, postgres.MessageQuery{Direction: "outbound", Limit: 10 * e2eDocuments})
}

func (e *e2e) inbox(ctx context.Context) ([]postgres.InboxMDNInfo, error) {
	return e.sc.cl.Store.InboxMDNs(ctx, postgres.InboxQuery{Limit: 100 * e2eDocuments})
}

func (e *e2e) countNotFinal(ctx context.Context, t *testing.T) int {
	t.Helper()
	ms, err := e.outbound(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if m.Status != "delivered" && m.Status != "failed" {
			n++
		}
	}
	return n
}

// waitPartnerReceived waits until the partner station has stored n
// inbound messages.
func (e *e2e) waitPartnerReceived(ctx context.Context, n int) error {
	return poll(ctx, func() (bool, string, error) {
		ms, err := e.partner.Messages(ctx, postgres.MessageQuery{Direction: "inbound", Limit: 10 * e2eDocuments})
		if err != nil {
			return false, "", err
		}
		return len(ms) >= n, fmt.Sprintf("partner has %d messages, want %d", len(ms), n), nil
	})
}

// waitDelivered waits until at least n outbound messages are delivered.
func (e *e2e) waitDelivered(ctx context.Context, n int) error {
	return poll(ctx, func() (bool, string, error) {
		ms, err := e.outbound(ctx)
		if err != nil {
			return false, "", err
		}
		got := 0
		for _, m := range ms {
			if m.Status == "delivered" {
				got++
			}
		}
		return got >= n, fmt.Sprintf("%d delivered, want %d", got, n), nil
	})
}

// waitSettled waits until every queued message is final and no inbox MDN
// is pending.
func (e *e2e) waitSettled(ctx context.Context) error {
	return poll(ctx, func() (bool, string, error) {
		ms, err := e.outbound(ctx)
		if err != nil {
			return false, "", err
		}
		final := 0
		for _, m := range ms {
			if m.Status == "delivered" || m.Status == "failed" {
				final++
			}
		}
		in, err := e.inbox(ctx)
		if err != nil {
			return false, "", err
		}
		pending := 0
		for _, m := range in {
			if m.State == postgres.InboxPending {
				pending++
			}
		}
		return final >= len(e.queued) && pending == 0,
			fmt.Sprintf("%d of %d messages final, %d inbox MDNs pending", final, len(e.queued), pending), nil
	})
}

// poll calls f every 250 ms until it reports done, ctx ends (an error with
// f's last state) or f fails.
func poll(ctx context.Context, f func() (bool, string, error)) error {
	var last string
	for {
		done, state, err := f()
		if err == nil && done {
			return nil
		}
		if err == nil {
			last = state
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last: %s", ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// check judges the settled run; successor is the token of the term that
// took over after the kill.
func (e *e2e) check(t *testing.T, successor int64) {
	t.Helper()
	ctx, cancel := within(t, time.Minute)
	defer cancel()
	if len(e.queued) != e2eDocuments {
		t.Fatalf("%d documents queued, want %d", len(e.queued), e2eDocuments)
	}

	// Every outbound message: queued once, delivered, async MDN asked for.
	ms, err := e.outbound(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[int64]hub.MessageInfo{}
	for _, m := range ms {
		byID[m.ID] = m
	}
	if len(ms) != e2eDocuments {
		t.Errorf("%d outbound messages, want %d (one per document queued)", len(ms), e2eDocuments)
	}
	sentIDs := map[string]bool{}
	for _, q := range e.queued {
		m, ok := byID[q.ID]
		switch {
		case !ok:
			t.Errorf("message %d (queued through %s): not found", q.ID, q.via)
			continue
		case m.Status != "delivered":
			t.Errorf("message %d (queued through %s): status %q (%s), want delivered", q.ID, q.via, m.Status, m.Error)
		case m.MDNMode != "async":
			t.Errorf("message %d: mdn_mode %q, want async", q.ID, m.MDNMode)
		}
		if sentIDs[m.MessageID] {
			t.Errorf("Message-ID %s used twice", m.MessageID)
		}
		sentIDs[m.MessageID] = true
	}

	// Every inbox MDN decided: one processed per message, orphans with a
	// reason; every decision under a fence that was current.
	in, err := e.inbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	terms, err := e.sc.cl.Store.Terms(ctx, failover.LeaseName)
	if err != nil {
		t.Fatal(err)
	}
	termOf := map[int64]hub.Term{}
	for _, tm := range terms {
		termOf[tm.Token] = tm
	}
	var successorOpened time.Time
	if tm, ok := termOf[successor]; ok {
		successorOpened = tm.OpenedAt
	} else {
		t.Errorf("the successor's term %d is not in leader_terms", successor)
	}
	processed := map[int64]int{} // message → processed inbox MDNs
	fences := map[int64]int{}    // token → rows it decided
	orphans, carried := 0, 0
	for _, m := range in {
		switch m.State {
		case postgres.InboxProcessed:
			if m.MessageRef == nil {
				t.Errorf("inbox MDN %d: processed without a message", m.ID)
				break
			}
			processed[*m.MessageRef]++
			if m.Result != "delivered" {
				t.Errorf("inbox MDN %d: result %q, want delivered", m.ID, m.Result)
			}
		case postgres.InboxOrphan:
			orphans++
			t.Logf("orphan inbox MDN %d (Original-Message-ID %s): %s", m.ID, m.OriginalMessageID, m.Reason)
			if m.Reason == "" {
				t.Errorf("inbox MDN %d: orphan without a reason", m.ID)
			}
		default:
			t.Errorf("inbox MDN %d: state %q, want processed or orphan", m.ID, m.State)
			continue
		}
		if m.Fence == nil || m.ProcessedAt == nil {
			t.Errorf("inbox MDN %d: %s without fence or processed_at", m.ID, m.State)
			continue
		}
		fences[*m.Fence]++
		if _, ok := termOf[*m.Fence]; !ok {
			t.Errorf("inbox MDN %d: decided with token %d, which no term opened", m.ID, *m.Fence)
		}
		// A fenced transaction commits before any newer term opens, and
		// processed_at is its start: a newer term opened at or before it
		// means a stale token was accepted.
		for _, tm := range terms {
			if tm.Token > *m.Fence && !m.ProcessedAt.Before(tm.OpenedAt) {
				t.Errorf("inbox MDN %d: decided at %s with token %d, but term %d had opened at %s: stale write accepted",
					m.ID, m.ProcessedAt.Format(time.RFC3339Nano), *m.Fence, tm.Token, tm.OpenedAt.Format(time.RFC3339Nano))
				break
			}
		}
		if *m.Fence >= successor && m.ReceivedAt.Before(successorOpened) {
			carried++
		}
	}
	for _, q := range e.queued {
		if n := processed[q.ID]; n != 1 {
			t.Errorf("message %d: %d processed inbox MDNs, want exactly 1", q.ID, n)
		}
	}
	t.Logf("inbox: %d MDNs, %d processed, %d orphans; rows decided per term %v; %d stored before term %d opened and applied by it or later",
		len(in), len(processed), orphans, fences, carried, successor)
	if len(fences) < 2 {
		t.Errorf("inbox MDNs decided by terms %v: want the killed leader's and a successor's", fences)
	}
	if carried == 0 {
		t.Errorf("no inbox MDN was stored before term %d opened and applied after: none was pending across the failover", successor)
	}

	// The MDNs came in through more than one replica.
	perReplica := map[string]int{}
	for _, line := range e.sc.cl.Recorder().Lines() {
		name, rest, _ := strings.Cut(line, " | ")
		if strings.Contains(rest, `"msg":"async MDN received"`) {
			perReplica[name]++
		}
	}
	t.Logf("async MDNs received per replica: %v; forwarded by the proxy: %v", perReplica, e.proxy.Served())
	if len(perReplica) < 2 {
		t.Errorf("async MDNs received by %v: want more than one replica", perReplica)
	}

	// The partner received each Message-ID once, and nothing else.
	got, err := e.partner.Messages(ctx, postgres.MessageQuery{Direction: "inbound", Limit: 10 * e2eDocuments})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, m := range got {
		seen[m.MessageID]++
		if !sentIDs[m.MessageID] {
			t.Errorf("partner received Message-ID %s, which the hub never sent", m.MessageID)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("partner received Message-ID %s %d times, want once", id, n)
		}
	}
	if len(got) != len(sentIDs) {
		t.Errorf("partner has %d inbound messages, want %d (one per message sent)", len(got), len(sentIDs))
	}
}

// lockedBuffer collects a process's log lines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// tail returns the last n lines.
func (l *lockedBuffer) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(l.b.String(), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
