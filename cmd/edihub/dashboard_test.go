package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

const dashboardFile = "../../deploy/k8s/monitoring/grafana-dashboard.json"

// dashboard is the part of the Grafana dashboard this test reads.
type dashboard struct {
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// TestDashboardAgainstPrometheus runs three replicas of the built binary
// (one installation, namespace "edihub") and a partner station (namespace
// "partner-hub") that exchange documents, a dead partner that makes the
// outbox retry and fail, a webhook receiver, and a real Prometheus (Debian's prometheus
// package, installed by scripts/deps.sh) scraping all four. Every query of
// the dashboard, with the dashboard's variables set to the installation,
// must return data: a wrong metric name or label would leave a panel
// silently empty.
func TestDashboardAgainstPrometheus(t *testing.T) {
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not found (%v): run scripts/deps.sh, or install Debian's prometheus package", err)
	}
	var dash dashboard
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}

	// Two stations, each the other's partner; the hub also has a partner
	// nobody listens for.
	dir := t.TempDir()
	pki := map[string]string{}
	for _, name := range []string{"HUB", "PARTNER"} {
		id, err := devpki.New(name, devpki.Options{})
		if err != nil {
			t.Fatal(err)
		}
		key, crt := filepath.Join(dir, name+".key"), filepath.Join(dir, name+".crt")
		if err := id.WriteFiles(key, crt); err != nil {
			t.Fatal(err)
		}
		pki[name+".key"], pki[name+".crt"] = key, crt
	}
	hubAS2 := []string{hubFreeAddr(t), hubFreeAddr(t), hubFreeAddr(t)}
	partnerAS2 := hubFreeAddr(t)
	writeFile := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	hubCfg := writeFile("hub.yaml", fmt.Sprintf(`station: {as2_id: HUB, private_key: %q, certificate: %q, async_mdn_url: "http://%s/as2"}
partners:
  - {as2_id: PARTNER, url: "http://%s/as2", certificate: %q, sign: sha-256, encrypt: aes256-cbc, mdn: async, mdn_signed: true, allow_private_mdn_targets: true, edi_ack_due: 1h}
  - {as2_id: GONE, url: "http://%s/as2", certificate: %q, max_attempts: 2, retry_window: 1ms}
`, pki["HUB.key"], pki["HUB.crt"], hubAS2[0], partnerAS2, pki["PARTNER.crt"], hubFreeAddr(t), pki["PARTNER.crt"]))
	partnerCfg := writeFile("partner.yaml", fmt.Sprintf(`station: {as2_id: PARTNER, private_key: %q, certificate: %q}
partners:
  - {as2_id: HUB, url: "http://%s/as2", certificate: %q, sign: sha-256, encrypt: aes256-cbc, mdn: sync, mdn_signed: true, allow_private_mdn_targets: true, edi_acks: true}
`, pki["PARTNER.key"], pki["PARTNER.crt"], hubAS2[1], pki["HUB.crt"]))

	// The hub's events go to a webhook (a real listener answering 200), so
	// the webhook panel has deliveries to show.
	var webhookPosts atomic.Int64
	webhook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		webhookPosts.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(webhook.Close)
	webhookSecret := writeFile("webhook-secret", "dashboard-webhook-secret\n")

	const token = "dashboard-token"
	common := []string{"EDIHUB_API_TOKEN=" + token, "EDIHUB_MIGRATE=true", "EDIHUB_RETRY_BACKOFF=200ms",
		"EDIHUB_RETRY_BACKOFF_MAX=1s", "GOMEMLIMIT=512MiB", "EDIHUB_LEADER_BACKEND=postgres"}
	hubDB := pgtest.URL(t)
	var hub []*replicaProc
	for i, addr := range hubAS2 {
		// A short retention and purge interval make the leader's purger
		// delete (at least the heartbeats older than the retention) while
		// the test runs; the message rows stay (audit retention).
		hub = append(hub, startReplica(t, append([]string{"EDIHUB_DATABASE_URL=" + hubDB, "EDIHUB_CONFIG=" + hubCfg,
			"EDIHUB_HTTP_ADDR=" + addr, fmt.Sprintf("EDIHUB_IDENTITY=edihub-%d", i),
			"EDIHUB_WEBHOOK_URL=" + webhook.URL + "/edihub-events", "EDIHUB_WEBHOOK_SECRET_FILE=" + webhookSecret,
			"EDIHUB_RETENTION=10s", "EDIHUB_PURGE_INTERVAL=2s"}, common...)...))
	}
	partner := startReplica(t, append([]string{"EDIHUB_DATABASE_URL=" + pgtest.URL(t), "EDIHUB_CONFIG=" + partnerCfg,
		"EDIHUB_HTTP_ADDR=" + partnerAS2, "EDIHUB_IDENTITY=partner-0"}, common...)...)

	// Prometheus scrapes the hub's replicas as the ServiceMonitor would
	// (job edihub-ops, namespace and pod labels) and the partner station as
	// another installation.
	promAddr := hubFreeAddr(t)
	var targets strings.Builder
	for i, r := range hub {
		fmt.Fprintf(&targets, "      - targets: [%q]\n        labels: {namespace: edihub, pod: edihub-%d}\n", strings.TrimPrefix(r.ops, "http://"), i)
	}
	fmt.Fprintf(&targets, "      - targets: [%q]\n        labels: {namespace: partner-hub, pod: partner-0}\n", strings.TrimPrefix(partner.ops, "http://"))
	promCfg := writeFile("prometheus.yml", "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n  - job_name: edihub-ops\n    static_configs:\n"+targets.String())
	var promLog bytes.Buffer
	prom := exec.Command(promBin, "--config.file="+promCfg, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr, "--log.level=warn")
	prom.Stdout, prom.Stderr = &promLog, &promLog
	if err := prom.Start(); err != nil {
		t.Fatal(err)
	}
	promDone := make(chan error, 1)
	go func() { promDone <- prom.Wait() }()
	t.Cleanup(func() {
		_ = prom.Process.Kill()
		<-promDone
		if t.Failed() {
			t.Logf("prometheus log:\n%s", promLog.String())
		}
	})

	api := "http://" + promAddr + "/api/v1/query?query="
	query := func(q string) (int, string, error) {
		resp, err := http.Get(api + url.QueryEscape(q))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var r struct {
			Status string
			Error  string
			Data   struct {
				Result []struct {
					Value [2]any
				}
			}
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return 0, string(b), err
		}
		if r.Status != "success" {
			return 0, string(b), fmt.Errorf("%s", r.Error)
		}
		// A quantile of no observations is NaN: a series, but an empty
		// panel. Count only series with a number.
		n := 0
		for _, s := range r.Data.Result {
			if v, ok := s.Value[1].(string); ok && v != "NaN" {
				n++
			}
		}
		return n, string(b), nil
	}

	// Traffic starts once Prometheus scrapes all four: a counter that
	// first appears with its final value has no increase, and a histogram
	// observed only before the first scrape has no rate, so every
	// increase, rate and quantile panel would be 0 or NaN.
	upDeadline := time.Now().Add(60 * time.Second)
	for {
		n, body, err := query(`up{job="edihub-ops"} == 1`)
		if err == nil && n == len(hub)+1 {
			break
		}
		if time.Now().After(upDeadline) {
			t.Fatalf("prometheus does not scrape all four targets: %v %s", err, body)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Traffic: documents both ways (async MDNs to the hub), one to the dead
	// partner (retried, then failed).
	send := func(r *replicaProc, partner string, doc string) string {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, r.as2+"/api/v1/messages?partner="+url.QueryEscape(partner), strings.NewReader(doc))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/edi-x12")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m struct{ Location string }
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || resp.StatusCode != http.StatusAccepted {
			t.Fatalf("POST to %s = %d, %v", partner, resp.StatusCode, err)
		}
		return r.as2 + m.Location
	}
	var pending []string
	for i := range 3 {
		// Real 850s: PARTNER answers each with a 997 (the acknowledgement
		// panels).
		pending = append(pending, send(hub[i], "PARTNER", strings.ReplaceAll(po850, "000000101", fmt.Sprintf("00000010%d", i))))
		pending = append(pending, send(partner, "HUB", fmt.Sprintf("ISA*partner-to-hub*%d~", i)))
	}
	pending = append(pending, send(hub[2], "GONE", "ISA*nobody*listens~"))
	// awaiting-mdn is final for this test: the async MDN arrives in the
	// hub's MDN inbox (a panel counts it), whether or not a worker has
	// applied it to the message yet.
	final := map[string]bool{"delivered": true, "sent": true, "failed": true, "awaiting-mdn": true}
	for _, loc := range pending {
		deadline := time.Now().Add(60 * time.Second)
		for {
			req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, loc, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			var m struct{ Status, Error string }
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_ = json.NewDecoder(resp.Body).Decode(&m)
				resp.Body.Close()
			}
			if final[m.Status] {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: status %q (%s), want a final one", loc, m.Status, m.Error)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// Every panel's queries, and the variables' label_values, with the
	// variables set to the hub's installation, return data.
	vars := strings.NewReplacer("$namespace", "edihub", "$partner", ".*", "$__rate_interval", "1m", "$__range", "1d")
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*([a-z_]+)\)$`)
	type check struct{ what, query string }
	var checks []check
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Fatalf("variable %s: definition %q is not label_values(series, label)", v.Name, v.Definition)
		}
		checks = append(checks, check{"variable " + v.Name, fmt.Sprintf("group by (%s) (%s)", m[2], vars.Replace(m[1]))})
	}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for i, tg := range p.Targets {
			checks = append(checks, check{fmt.Sprintf("panel %q query %d", p.Title, i), vars.Replace(tg.Expr)})
		}
	}
	if len(checks) < 20 {
		t.Fatalf("found %d queries in %s; the dashboard or this test is broken", len(checks), dashboardFile)
	}
	// Scrapes run every second; a rate needs two samples after the
	// traffic. Wait for each query to return data, up to a minute in all.
	deadline := time.Now().Add(60 * time.Second)
	for _, c := range checks {
		for {
			n, body, err := query(c.query)
			if err == nil && n > 0 {
				t.Logf("%s: %d series", c.what, n)
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s returns no data: %s\n  %v %s", c.what, c.query, err, body)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	// The traffic exercised the leader's workers and the webhook, so the
	// panels above show events, not only the zeros a registered metric
	// starts with: async MDNs applied (and their latency), a webhook
	// delivery, a report stored, rows purged, documents counted today.
	deadline = time.Now().Add(60 * time.Second)
	for _, q := range []string{
		`sum(edihub_mdn_processed_total{namespace="edihub", partner="PARTNER", result="delivered"}) > 0`,
		`sum(edihub_mdn_latency_seconds_count{namespace="edihub"}) > 0`,
		`sum(edihub_webhook_deliveries_total{namespace="edihub", result="delivered"}) > 0`,
		`max(edihub_report_last_success_timestamp_seconds{namespace="edihub"}) > 0`,
		`sum(edihub_purge_deleted_total{namespace="edihub"}) > 0`,
		// Each replica's first document to or from a partner counts in
		// the "today" panels (its series exist at zero from the start).
		`sum(increase(edihub_as2_messages_sent_total{namespace="edihub", partner="PARTNER", result=~"delivered|sent|awaiting-mdn"}[1d])) > 0`,
		`sum(increase(edihub_as2_messages_received_total{namespace="edihub", partner="PARTNER", result="processed"}[1d])) > 0`,
	} {
		for {
			n, body, err := query(q)
			if err == nil && n > 0 {
				t.Logf("%s: %s", q, body)
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: no data: %v %s", q, err, body)
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	if webhookPosts.Load() == 0 {
		t.Error("the webhook received no delivery")
	}
	// The namespace variable separates installations: three replicas in
	// edihub, whatever the partner-hub installation exports.
	_, body, err := query(`count(up{job="edihub-ops", namespace="edihub"} == 1)`)
	if err != nil || !strings.Contains(body, `"3"`) {
		t.Errorf("replicas up in namespace edihub: %v %s, want 3", err, body)
	}
}
