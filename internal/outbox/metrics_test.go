package outbox_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// TestMetrics: one retry then success, one final failure; the counters,
// the retry count, the duration histogram and the due gauge follow. A
// configured partner's series exist at zero from the dispatcher's start
// (Prometheus sees no increase in a series that appears with its value).
func TestMetrics(t *testing.T) {
	st := pgtest.Store(t)
	partner := newPartner(t, func(n int, r request) (int, http.Header, []byte) {
		if strings.Contains(string(r.body), "fail") {
			return 400, nil, nil
		}
		if n == 1 {
			return 503, nil, nil
		}
		return 200, nil, nil
	})
	cfg := loadConfig(t, partnerYAML{id: partnerID, url: partner.URL, extra: []string{"mdn: none"}})
	reg := prometheus.NewRegistry()
	o := dispatcherOpts(t, st, cfg, "d1")
	o.Metrics = outbox.NewMetrics(reg, st.OutboxStats)
	o.Workers = 1
	ok := enqueue(t, st, cfg, partnerID, []byte("fine"), "", "")
	if err := testutil.GatherAndCompare(reg, strings.NewReader("# HELP edihub_outbox_due Pending outbox items whose next attempt is due and that no dispatcher holds (all replicas).\n# TYPE edihub_outbox_due gauge\nedihub_outbox_due 1\n"), "edihub_outbox_due"); err != nil {
		t.Errorf("before any dispatcher: %v", err)
	}
	startDispatcher(t, o)
	waitStatus(t, st, ok.ID, "sent")
	bad := enqueue(t, st, cfg, partnerID, []byte("fail"), "", "")
	waitStatus(t, st, bad.ID, "failed")

	want := `
# HELP edihub_as2_messages_sent_total Outbound AS2 message and async MDN attempts by outcome (delivered, sent, awaiting-mdn, failed, retry, mdn-sent, mdn-retry, mdn-failed).
# TYPE edihub_as2_messages_sent_total counter
edihub_as2_messages_sent_total{partner="ACME CORP",result="awaiting-mdn"} 0
edihub_as2_messages_sent_total{partner="ACME CORP",result="delivered"} 0
edihub_as2_messages_sent_total{partner="ACME CORP",result="failed"} 1
edihub_as2_messages_sent_total{partner="ACME CORP",result="mdn-failed"} 0
edihub_as2_messages_sent_total{partner="ACME CORP",result="mdn-retry"} 0
edihub_as2_messages_sent_total{partner="ACME CORP",result="mdn-sent"} 0
edihub_as2_messages_sent_total{partner="ACME CORP",result="retry"} 1
edihub_as2_messages_sent_total{partner="ACME CORP",result="sent"} 1
# HELP edihub_outbox_retries_total Outbox attempts rescheduled for a retry.
# TYPE edihub_outbox_retries_total counter
edihub_outbox_retries_total{partner="ACME CORP"} 1
# HELP edihub_outbox_due Pending outbox items whose next attempt is due and that no dispatcher holds (all replicas).
# TYPE edihub_outbox_due gauge
edihub_outbox_due 0
# HELP edihub_outbox_in_flight Outbox items this replica is sending right now.
# TYPE edihub_outbox_in_flight gauge
edihub_outbox_in_flight 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"edihub_as2_messages_sent_total", "edihub_outbox_retries_total", "edihub_outbox_due", "edihub_outbox_in_flight"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "edihub_as2_send_duration_seconds"); n != 1 {
		t.Errorf("send duration series = %d, want 1", n)
	}
}
