package outbox_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestDispatchMDNTargets: an async MDN goes only where the partner's
// profile allows, checked when dialling: a loopback target is refused
// unless allow_private_mdn_targets, also when it is reached through a
// listed host name that resolves to loopback (so DNS cannot redirect it),
// and the refusal is final.
func TestDispatchMDNTargets(t *testing.T) {
	tests := []struct {
		name     string
		profile  []string
		host     string // host of the MDN URL; the partner's port
		wantSent bool
	}{
		{"loopback, not allowed", nil, "127.0.0.1", false},
		{"name resolving to loopback", []string{"mdn_hosts: [localhost]"}, "localhost", false},
		{"loopback allowed", []string{"allow_private_mdn_targets: true"}, "127.0.0.1", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := pgtest.Store(t)
			partner := newPartner(t, func(int, request) (int, http.Header, []byte) { return 200, nil, nil })
			u, _ := url.Parse(partner.URL)
			mdnURL := fmt.Sprintf("http://%s:%s/mdn", tt.host, u.Port())
			cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL + "/as2", extra: append([]string{"mdn: sync"}, tt.profile...)})
			reg := owedMDN(t, st, cfg, fmt.Sprintf("<in-%d@partner>", i), mdnURL, postgres.Retry{})
			result := "mdn-failed"
			if tt.wantSent {
				result = "mdn-sent"
			}
			deadline := time.Now().Add(20 * time.Second)
			for metric(reg, result) == 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if metric(reg, result) != 1 {
				t.Fatalf("edihub_as2_messages_sent_total{result=%q} never reached 1", result)
			}
			if n := len(partner.requests()); (n == 1) != tt.wantSent || n > 1 {
				t.Errorf("the target got %d requests, want sent %v", n, tt.wantSent)
			}
			if metric(reg, "mdn-retry") != 0 {
				t.Errorf("a refused target was retried")
			}
		})
	}
}

func metric(reg *prometheus.Registry, result string) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "edihub_as2_messages_sent_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestAsyncMDNRetriedThroughTheWindow: an async MDN owed to a partner whose
// endpoint answers 503 for longer than max_attempts (its hub failing over)
// is still delivered once it is back, within the retry window; without a
// window it fails after max_attempts, and the partner's message then waits
// for a receipt that never comes.
func TestAsyncMDNRetriedThroughTheWindow(t *testing.T) {
	tests := []struct {
		name   string
		retry  postgres.Retry
		result string
		posts  int
	}{
		{"window", postgres.Retry{MaxAttempts: 2, Window: time.Hour}, "mdn-sent", 6},
		{"max_attempts alone", postgres.Retry{MaxAttempts: 2}, "mdn-failed", 2},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := pgtest.Store(t)
			partner := newPartner(t, func(n int, _ request) (int, http.Header, []byte) {
				if n <= 5 {
					return http.StatusServiceUnavailable, nil, nil
				}
				return http.StatusOK, nil, nil
			})
			cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL + "/as2", extra: []string{"mdn: sync", "allow_private_mdn_targets: true"}})
			reg := owedMDN(t, st, cfg, fmt.Sprintf("<window-%d@partner>", i), partner.URL+"/mdn", tt.retry)
			deadline := time.Now().Add(30 * time.Second)
			for metric(reg, tt.result) == 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if metric(reg, tt.result) != 1 {
				t.Fatalf("edihub_as2_messages_sent_total{result=%q} never reached 1 (mdn-sent %v, mdn-failed %v)", tt.result, metric(reg, "mdn-sent"), metric(reg, "mdn-failed"))
			}
			if n := len(partner.requests()); n != tt.posts {
				t.Errorf("the partner got %d posts of the MDN, want %d", n, tt.posts)
			}
		})
	}
}

// owedMDN stores an inbound message from partnerID whose async MDN is owed
// to mdnURL, retried as r says, and starts a dispatcher on st; the
// registry has its metrics.
func owedMDN(t *testing.T, st *postgres.Store, cfg *config.File, messageID, mdnURL string, r postgres.Retry) *prometheus.Registry {
	t.Helper()
	_, err := st.SaveInbound(context.Background(), &postgres.InboundMessage{
		Partner: partnerID, AS2From: partnerID, AS2To: "EDIHUB TEST", MessageID: messageID,
		Status: postgres.InboundProcessed, Disposition: "automatic-action/MDN-sent-automatically; processed",
		Payload: []byte("x"), PayloadSize: 1, MDNMode: "async", MDNURL: mdnURL, Outbox: true, MDNRetry: r,
		MDN: &postgres.StoredMDN{Header: http.Header{"Content-Type": {"multipart/report; boundary=b"}}, Body: []byte("--b--\r\n"), Disposition: "processed"},
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	o := dispatcherOpts(t, st, cfg, "d1")
	o.Metrics = outbox.NewMetrics(reg, st.OutboxStats)
	startDispatcher(t, o)
	return reg
}
