package failover_test

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/openssltest"
	"github.com/edihub/edihub/internal/testenv/pgtest"
	"github.com/edihub/edihub/test/cluster"
	"github.com/edihub/edihub/test/failover"
)

const (
	livePartner = "LIVE PARTNER"
	liveToken   = "partners-e2e-token"
	// liveBound is how soon every replica must serve a partner change.
	liveBound = 2 * time.Second
	// liveWait bounds every wait of the test: past it the step fails
	// with what it saw last instead of hanging.
	liveWait = 10 * time.Second
)

// TestPartnersChangeLive is issue 19's end-to-end test: three replicas of
// the built binary (Postgres leader backend) on one PostgreSQL, started
// with a station that has no partner. A partner is created through the
// REST API of one replica, its certificate changed, then deleted; for
// each change the test measures, on every replica separately, the time
// from the API's answer until that replica accepts (or refuses) an AS2
// message signed by the partner, built with openssl and encrypted to the
// station. Each figure must stay under 2 s. Before every change the same
// message is answered the other way, so the test fails when a replica
// does not apply the change. Along the way: a stale If-Match changes
// nothing, GET /partners shows every replica serving the newest revision,
// and a fourth replica started after the change serves it at once. Every
// replica answers /readyz with 200 throughout.
//
// Not parallel: the 2 s figures are asserted, so the test runs alone
// rather than beside the package's other multi-replica scenarios.
func TestPartnersChangeLive(t *testing.T) {
	bin := binary(t)
	dir := t.TempDir()
	station := liveIdentity(t, dir, "station", "EDIHUB")
	oldKey := liveIdentity(t, dir, "partner-old", livePartner)
	newKey := liveIdentity(t, dir, "partner-new", livePartner)
	otherKey := liveIdentity(t, dir, "partner-other", livePartner)
	// The station has no partner: every partner comes through the API.
	cfg := filepath.Join(dir, "edihub.yaml")
	if err := os.WriteFile(cfg, []byte(`station: {as2_id: "EDIHUB", private_key: station.key, certificate: station.crt}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.URL(t)
	sc := start(t, failover.Postgres, setup{databaseURL: dbURL, config: cfg, env: []string{"EDIHUB_API_TOKEN=" + liveToken}})
	var reps []*cluster.Replica
	for _, r := range sc.cl.Replicas() {
		reps = append(reps, r.Replica)
	}
	c := newLiveClient(t, station.Cert, sc.cl.Recorder())
	ready := watchReady(t, reps...)

	// Messages from the partner: signed with the first key, the second
	// key, encrypted to the station. Each attempt posts one of them under
	// a Message-ID of its own.
	oldMsg := buildLiveMessage(t, oldKey, station)
	newMsg := buildLiveMessage(t, newKey, station)

	ctx, cancel := within(t, 5*time.Minute)
	defer cancel()
	r1 := reps[0].Spec.HTTPAddr

	// Before the create, every replica refuses the partner.
	for _, r := range reps {
		c.expect(ctx, t, r, oldMsg, "before the partner is created", refused(mdn.UnknownTradingRelationship))
	}

	// 1. Create the partner through the API of replica-1.
	entry := func(cert *openssltest.Identity) []byte {
		b, err := json.Marshal(map[string]any{
			"as2_id": livePartner, "url": "http://127.0.0.1:1/as2",
			"certificate": string(openssltest.ReadFile(t, cert.CertPath)),
			"sign":        "sha-256", "encrypt": "aes256-cbc", "mdn": "sync", "mdn_signed": true,
			"require_signed": true, "require_encrypted": true,
			// Every attempt posts the same signed content under a new
			// Message-ID: not a replay here.
			"replay_window": "0s",
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	res := c.api(ctx, t, r1, http.MethodPost, "/partners", entry(oldKey), nil)
	created := time.Now()
	if res.status != http.StatusCreated || res.header.Get("ETag") != `"1"` {
		t.Fatalf("POST /api/v1/partners = %d ETag %s %s, want 201 with ETag \"1\"", res.status, res.header.Get("ETag"), res.body)
	}
	for i, d := range c.measure(ctx, t, reps, created, oldMsg, "accept the created partner's message", accepted) {
		t.Logf("%s served the new partner after %s", reps[i].Spec.Name, d)
	}

	// 2. Change its certificate to a new key pair. Before the change the
	// new key's message is refused; after it, accepted, and the old
	// key's refused.
	for _, r := range reps {
		c.expect(ctx, t, r, newMsg, "before the certificate change", badSignature)
	}
	path := "/partners/" + url.PathEscape(livePartner)
	if res := c.api(ctx, t, r1, http.MethodPut, path, entry(newKey), nil); res.status != http.StatusPreconditionRequired {
		t.Errorf("PUT %s without If-Match = %d %s, want 428", path, res.status, res.body)
	}
	res = c.api(ctx, t, r1, http.MethodPut, path, entry(newKey), http.Header{"If-Match": {`"1"`}})
	changed := time.Now()
	if res.status != http.StatusOK || res.header.Get("ETag") != `"2"` {
		t.Fatalf("PUT %s If-Match \"1\" = %d ETag %s %s, want 200 with ETag \"2\"", path, res.status, res.header.Get("ETag"), res.body)
	}
	for i, d := range c.measure(ctx, t, reps, changed, newMsg, "accept the new key's message", accepted) {
		t.Logf("%s served the new certificate after %s", reps[i].Spec.Name, d)
	}
	for _, r := range reps {
		c.expect(ctx, t, r, oldMsg, "after the certificate change", badSignature)
	}

	// A PUT made against version 1 (stale now) is refused and changes
	// nothing: version 2 with the new certificate stays, and so does the
	// set's revision.
	before := c.list(ctx, t, r1)
	if res := c.api(ctx, t, reps[1].Spec.HTTPAddr, http.MethodPut, path, entry(otherKey), http.Header{"If-Match": {`"1"`}}); res.status != http.StatusPreconditionFailed {
		t.Errorf("PUT %s with stale If-Match \"1\" = %d %s, want 412", path, res.status, res.body)
	}
	res = c.api(ctx, t, r1, http.MethodGet, path, nil, nil)
	var got struct {
		Version int64          `json:"version"`
		Spec    map[string]any `json:"spec"`
	}
	if res.status != http.StatusOK || json.Unmarshal(res.body, &got) != nil {
		t.Fatalf("GET %s = %d %s, want 200 with the partner", path, res.status, res.body)
	}
	newPEM := string(openssltest.ReadFile(t, newKey.CertPath))
	if got.Version != 2 || res.header.Get("ETag") != `"2"` || strings.TrimSpace(fmt.Sprint(got.Spec["certificate"])) != strings.TrimSpace(newPEM) {
		t.Errorf("GET %s after the stale PUT = version %d ETag %s, certificate new: %v; want version 2, ETag \"2\", the new certificate",
			path, got.Version, res.header.Get("ETag"), strings.TrimSpace(fmt.Sprint(got.Spec["certificate"])) == strings.TrimSpace(newPEM))
	}
	if after := c.list(ctx, t, r1); after.Revision != before.Revision {
		t.Errorf("partner set revision after the stale PUT = %d, want %d (unchanged)", after.Revision, before.Revision)
	}
	for _, r := range reps {
		c.expect(ctx, t, r, newMsg, "after the stale PUT", accepted)
	}

	// 3. Every replica's GET /partners lists the three replicas serving
	// the newest revision, none behind.
	for _, r := range reps {
		c.waitAllServing(ctx, t, r, reps)
	}

	// 4. A fourth replica started after the change serves it at once:
	// its served revision is the newest, and its first message is
	// accepted (the old key's refused).
	r4 := startFourth(t, bin, dbURL, cfg, sc.cl.Recorder())
	readyAt := time.Now()
	ready.add(r4)
	want := c.list(ctx, t, r1).Revision
	if l := c.list(ctx, t, r4.Spec.HTTPAddr); l.ServedRevision != want || l.Revision != want {
		t.Errorf("replica-4 GET /partners at ready: served_revision %d, revision %d; want both %d", l.ServedRevision, l.Revision, want)
	}
	c.expect(ctx, t, r4, newMsg, "on its first message", accepted)
	t.Logf("replica-4 accepted its first message %s after it was ready", time.Since(readyAt))
	c.expect(ctx, t, r4, oldMsg, "on its first message with the old key", badSignature)
	reps = append(reps, r4)

	// 5. Delete the partner: every replica refuses its messages again.
	res = c.api(ctx, t, reps[2].Spec.HTTPAddr, http.MethodDelete, path, nil, http.Header{"If-Match": {`"2"`}})
	deleted := time.Now()
	if res.status != http.StatusOK {
		t.Fatalf("DELETE %s If-Match \"2\" = %d %s, want 200", path, res.status, res.body)
	}
	for i, d := range c.measure(ctx, t, reps, deleted, newMsg, "refuse the deleted partner's message", refused(mdn.UnknownTradingRelationship)) {
		t.Logf("%s refused the deleted partner after %s", reps[i].Spec.Name, d)
	}
	if res := c.api(ctx, t, r1, http.MethodGet, path, nil, nil); res.status != http.StatusNotFound {
		t.Errorf("GET %s after the delete = %d %s, want 404", path, res.status, res.body)
	}
	for _, r := range reps {
		c.waitAllServing(ctx, t, r, reps)
	}

	ready.check(t, reps...)
}

// liveIdentity makes a key pair with devpki and writes it to dir as
// name.key and name.crt, for the replicas and for openssl.
func liveIdentity(t *testing.T, dir, name, cn string) *openssltest.Identity {
	t.Helper()
	id, err := devpki.New(cn, devpki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o := &openssltest.Identity{Name: name, KeyPath: filepath.Join(dir, name+".key"), CertPath: filepath.Join(dir, name+".crt"), Key: id.Key, Cert: id.Cert}
	if err := id.WriteFiles(o.KeyPath, o.CertPath); err != nil {
		t.Fatal(err)
	}
	return o
}

// liveMessage is an AS2 message from the partner, built once by openssl.
type liveMessage struct {
	signer string
	header http.Header // its MIME fields that travel as HTTP fields
	body   []byte
}

func buildLiveMessage(t *testing.T, signer, station *openssltest.Identity) liveMessage {
	t.Helper()
	m := openssltest.Build(t, openssltest.Spec{Sign: "sha256", Enc: "aes256", Signer: signer, Recipient: station,
		Payload: "ISA*00*          *00*          *ZZ*LIVE PARTNER   *ZZ*EDIHUB         *261201*0101*U*00401*000000001*0*T*>~\nIEA*0*000000001~\n"})
	return liveMessage{signer: signer.Name, header: m.Header, body: m.Body}
}

// outcome judges a replica's MDN.
type outcome struct {
	want  string
	match func(mdn.Disposition) bool
	// logged, when set, is what the replica must log with the message's
	// Message-ID: the cause an MDN does not tell.
	logged string
}

// accepted: processed, no modifier (a warning would hide a replay or a
// duplicate).
var accepted = outcome{want: "processed", match: func(d mdn.Disposition) bool {
	return d.Type == mdn.TypeProcessed && d.Modifier == ""
}}

// refused: processed/Error: description.
func refused(description string) outcome {
	return outcome{want: "processed/Error: " + description, match: func(d mdn.Disposition) bool {
		return d.Kind() == "error" && d.Description() == description
	}}
}

// badSignature: a message whose signature does not verify with the
// partner's certificate. Under encryption the MDN says decryption-failed
// whatever failed after the decryption (no decryption oracle, see
// as2.Unwrap); the replica logs the cause.
var badSignature = outcome{
	want:   "processed/Error: decryption-failed, logged as authentication-failed",
	match:  refused(as2.DispositionDecryptionFailed).match,
	logged: "authentication-failed: verify: cms: signature verification error",
}

// liveClient posts AS2 messages and API requests to the replicas.
type liveClient struct {
	http    *http.Client
	station []*x509.Certificate // verifies the MDNs
	logs    *failover.Recorder  // the replicas' log lines
	seq     atomic.Int64
}

func newLiveClient(t *testing.T, station *x509.Certificate, logs *failover.Recorder) *liveClient {
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &liveClient{http: &http.Client{Transport: tr, Timeout: 5 * time.Second}, station: []*x509.Certificate{station}, logs: logs}
}

// send posts m to the replica under a fresh Message-ID, asking for a
// signed synchronous MDN, and returns the MDN's disposition; the MDN must
// be signed by the station and answer this Message-ID.
func (c *liveClient) send(ctx context.Context, r *cluster.Replica, m liveMessage) (string, mdn.Disposition, error) {
	id := fmt.Sprintf("<live-%d-%d@partner.test>", time.Now().UnixNano(), c.seq.Add(1))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.Spec.HTTPAddr+"/as2", bytes.NewReader(m.body))
	if err != nil {
		return id, mdn.Disposition{}, err
	}
	for k, v := range m.header {
		req.Header[k] = v
	}
	from, err := as2.FormatAS2Name(livePartner)
	if err != nil {
		return id, mdn.Disposition{}, err
	}
	req.Header.Set("AS2-Version", "1.2")
	req.Header.Set("AS2-From", from)
	req.Header.Set("AS2-To", "EDIHUB")
	req.Header.Set("Message-ID", id)
	req.Header.Set("Disposition-Notification-To", "mdn@partner.test")
	req.Header.Set("Disposition-Notification-Options", "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256")
	resp, err := c.http.Do(req)
	if err != nil {
		return id, mdn.Disposition{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return id, mdn.Disposition{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return id, mdn.Disposition{}, fmt.Errorf("HTTP %d %q, want 200 with an MDN", resp.StatusCode, body)
	}
	got, err := mdn.Parse(resp.Header, body, mdn.ParseOptions{PartnerCerts: c.station, RequireSigned: true})
	if err != nil {
		return id, mdn.Disposition{}, fmt.Errorf("MDN: %w", err)
	}
	if got.OriginalMessageID != id {
		return id, mdn.Disposition{}, fmt.Errorf("MDN for Original-Message-ID %s, want %s", got.OriginalMessageID, id)
	}
	return id, got.Disposition, nil
}

// expect posts m once to r and fails the test unless the MDN is want.
func (c *liveClient) expect(ctx context.Context, t *testing.T, r *cluster.Replica, m liveMessage, when string, want outcome) {
	t.Helper()
	id, d, err := c.send(ctx, r, m)
	switch {
	case err != nil:
		t.Errorf("%s: message signed by %s %s: %v, want an MDN %s", r.Spec.Name, m.signer, when, err, want.want)
		return
	case !want.match(d):
		t.Errorf("%s: message signed by %s %s: MDN %q, want %s", r.Spec.Name, m.signer, when, d, want.want)
		return
	case want.logged == "":
		return
	}
	// The MDN hides the cause; the replica's log names it.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = poll(ctx, func() (bool, string, error) {
		for _, line := range c.logs.Lines() {
			if strings.HasPrefix(line, r.Spec.Name+" | ") && strings.Contains(line, id) && strings.Contains(line, want.logged) {
				return true, "", nil
			}
		}
		return false, "no such line", nil
	})
	if err != nil {
		t.Errorf("%s: message signed by %s %s: no log line of %s with %q: %v", r.Spec.Name, m.signer, when, id, want.logged, err)
	}
}

// measure posts m to every replica at once, each in a loop, until its MDN
// is want, and returns per replica the time from since until then. A
// replica slower than liveBound fails the test; one that never gets there
// within liveWait fails it with the last answer it gave.
func (c *liveClient) measure(ctx context.Context, t *testing.T, reps []*cluster.Replica, since time.Time, m liveMessage, what string, want outcome) []time.Duration {
	t.Helper()
	ctx, cancel := context.WithDeadline(ctx, since.Add(liveWait))
	defer cancel()
	took := make([]time.Duration, len(reps))
	last := make([]string, len(reps))
	var wg sync.WaitGroup
	for i, r := range reps {
		wg.Go(func() {
			for attempt := 1; ; attempt++ {
				_, d, err := c.send(ctx, r, m)
				if err == nil && want.match(d) {
					took[i] = time.Since(since)
					return
				}
				if ctx.Err() != nil {
					return // keep the last answer, not the deadline's
				}
				if err != nil {
					last[i] = fmt.Sprintf("attempt %d: %v", attempt, err)
				} else {
					last[i] = fmt.Sprintf("attempt %d: MDN %q", attempt, d)
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	for i, r := range reps {
		switch {
		case took[i] == 0:
			t.Fatalf("%s did not %s within %s (want %s); last: %s", r.Spec.Name, what, liveWait, want.want, last[i])
		case took[i] >= liveBound:
			t.Errorf("%s took %s to %s, want under %s", r.Spec.Name, took[i], what, liveBound)
		}
	}
	return took
}

// apiResult is an answer of the REST API.
type apiResult struct {
	status int
	header http.Header
	body   []byte
}

// api calls the REST API (/api/v1) of the replica at addr.
func (c *liveClient) api(ctx context.Context, t *testing.T, addr, method, path string, body []byte, h http.Header) apiResult {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+"/api/v1"+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+liveToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, addr, err)
	}
	return apiResult{status: resp.StatusCode, header: resp.Header, body: b}
}

// partnerList is the part of GET /api/v1/partners the test reads.
type partnerList struct {
	Revision       int64 `json:"revision"`
	ServedRevision int64 `json:"served_revision"`
	Replicas       []struct {
		Identity string `json:"identity"`
		Revision int64  `json:"revision"`
		Behind   bool   `json:"behind"`
	} `json:"replicas"`
	Partners []struct {
		AS2ID   string `json:"as2_id"`
		Version int64  `json:"version"`
	} `json:"partners"`
}

func (c *liveClient) list(ctx context.Context, t *testing.T, addr string) partnerList {
	t.Helper()
	res := c.api(ctx, t, addr, http.MethodGet, "/partners", nil, nil)
	var l partnerList
	if res.status != http.StatusOK {
		t.Fatalf("GET /api/v1/partners on %s = %d %s, want 200", addr, res.status, res.body)
	}
	if err := json.Unmarshal(res.body, &l); err != nil {
		t.Fatalf("GET /api/v1/partners on %s: %v in %s", addr, err, res.body)
	}
	return l
}

// waitAllServing polls r's GET /partners (up to 5 s) until it lists the
// current process of every replica in want at the set's revision, none
// behind, and r itself serves that revision.
func (c *liveClient) waitAllServing(ctx context.Context, t *testing.T, r *cluster.Replica, want []*cluster.Replica) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var ids []string
	for _, w := range want {
		ids = append(ids, c.logs.IdentityOf(w.Spec.Name))
	}
	err := poll(ctx, func() (bool, string, error) {
		l := c.list(ctx, t, r.Spec.HTTPAddr)
		serving := map[string]int64{}
		var behind []string
		for _, rr := range l.Replicas {
			serving[rr.Identity] = rr.Revision
			if rr.Behind {
				behind = append(behind, rr.Identity)
			}
		}
		ok := l.ServedRevision == l.Revision && len(behind) == 0
		for _, id := range ids {
			if rev, listed := serving[id]; id == "" || !listed || rev != l.Revision {
				ok = false
			}
		}
		return ok, fmt.Sprintf("revision %d, served_revision %d, replicas %+v, behind %v", l.Revision, l.ServedRevision, l.Replicas, behind), nil
	})
	if err != nil {
		t.Errorf("%s GET /api/v1/partners does not show %q serving the newest revision, none behind: %v", r.Spec.Name, ids, err)
	}
}

// startFourth starts replica-4 from the same binary, database and
// configuration as the cluster, its log lines going to the cluster's
// recorder (printed with the others when the test fails), and waits
// until it is ready.
func startFourth(t *testing.T, bin, dbURL, cfg string, logs *failover.Recorder) *cluster.Replica {
	t.Helper()
	httpAddr, err := cluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	opsAddr, err := cluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	c, err := cluster.Start(cluster.Options{
		Binary: bin,
		Env: []string{
			"EDIHUB_LEADER_BACKEND=" + string(failover.Postgres),
			"EDIHUB_CONFIG=" + cfg,
			"EDIHUB_LOG_FORMAT=json",
			"EDIHUB_SHUTDOWN_TIMEOUT=10s",
			"EDIHUB_LEASE_NAME=" + failover.LeaseName,
			"EDIHUB_DATABASE_URL=" + dbURL,
			"EDIHUB_API_TOKEN=" + liveToken,
		},
		Replicas: []cluster.ReplicaSpec{{Name: "replica-4", HTTPAddr: httpAddr, OpsAddr: opsAddr, Env: []string{"EDIHUB_IDENTITY=replica-4"}}},
		Output:   logs,
	})
	if err != nil {
		t.Fatalf("start replica-4: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(15 * time.Second); err != nil {
			t.Errorf("stop replica-4: %v", err)
		}
	})
	r := c.Replicas()[0]
	ctx, cancel := within(t, time.Minute)
	defer cancel()
	if err := r.WaitReady(ctx); err != nil {
		t.Fatalf("replica-4 not ready: %v", err)
	}
	return r
}

// readyWatch polls every replica's /readyz every 50 ms and records each
// answer that is not 200.
type readyWatch struct {
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	client  *http.Client
	started time.Time

	mu     sync.Mutex
	probes map[string]int // replica → probes answered
	fails  []string
}

func watchReady(t *testing.T, reps ...*cluster.Replica) *readyWatch {
	tr := &http.Transport{}
	w := &readyWatch{client: &http.Client{Transport: tr, Timeout: time.Second}, started: time.Now(), probes: map[string]int{}}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	// Registered after the replicas' cleanup, so it runs before it: the
	// replicas' shutdown is not counted.
	t.Cleanup(func() {
		w.stop()
		tr.CloseIdleConnections()
	})
	for _, r := range reps {
		w.add(r)
	}
	return w
}

// add polls r from now on.
func (w *readyWatch) add(r *cluster.Replica) {
	w.wg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			status, err := w.probe(r)
			if w.ctx.Err() != nil {
				return
			}
			w.mu.Lock()
			w.probes[r.Spec.Name]++
			if err != nil || status != http.StatusOK {
				w.fails = append(w.fails, fmt.Sprintf("%s %s: /readyz %d %v", time.Now().Format("15:04:05.000"), r.Spec.Name, status, err))
			}
			w.mu.Unlock()
			select {
			case <-w.ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
}

func (w *readyWatch) probe(r *cluster.Replica) (int, error) {
	req, err := http.NewRequestWithContext(w.ctx, http.MethodGet, "http://"+r.Spec.OpsAddr+"/readyz", nil)
	if err != nil {
		return 0, err
	}
	resp, err := w.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (w *readyWatch) stop() {
	w.cancel()
	w.wg.Wait()
}

// check stops the watch and fails the test for every answer that was not
// 200, and for a replica never probed.
func (w *readyWatch) check(t *testing.T, reps ...*cluster.Replica) {
	t.Helper()
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	t.Logf("/readyz probed for %s: %v", time.Since(w.started).Round(time.Millisecond), w.probes)
	for _, r := range reps {
		if w.probes[r.Spec.Name] == 0 {
			t.Errorf("%s: /readyz never probed", r.Spec.Name)
		}
	}
	if len(w.fails) > 0 {
		t.Errorf("%d /readyz answers were not 200, want none:\n%s", len(w.fails), strings.Join(w.fails, "\n"))
	}
}
