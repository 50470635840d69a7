package outbox

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Results counted in edihub_as2_messages_sent_total{result}.
const (
	ResultDelivered   = "delivered"    // positive MDN with a matching MIC
	ResultSent        = "sent"         // accepted (2xx), no MDN requested
	ResultAwaitingMDN = "awaiting-mdn" // accepted, async MDN requested
	ResultFailed      = "failed"       // final failure
	ResultRetry       = "retry"        // attempt failed, will be retried
	ResultMDNSent     = "mdn-sent"     // async MDN delivered to the partner
	ResultMDNRetry    = "mdn-retry"
	ResultMDNFailed   = "mdn-failed"
)

// Results counted in edihub_webhook_deliveries_total{result}.
const (
	ResultWebhookDelivered = "delivered" // the webhook answered 2xx
	ResultWebhookRetry     = "retry"     // attempt failed, will be retried
	ResultWebhookFailed    = "failed"    // given up (final answer, or attempts and window used up)
)

// StatsFunc counts due and claimed outbox rows (postgres.Store.OutboxStats).
type StatsFunc func(ctx context.Context) (due, claimed int64, err error)

// Metrics are the dispatcher's Prometheus metrics. Labels are bounded: the
// partner label only takes configured AS2 IDs.
type Metrics struct {
	sent     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	retries  *prometheus.CounterVec
	inFlight prometheus.Gauge
	webhook  *prometheus.CounterVec
	delivery *prometheus.CounterVec
}

// NewMetrics registers the dispatcher's metrics on reg. With stats set,
// edihub_outbox_due is computed from it at scrape time (bounded by a short
// timeout; a failing query reports no sample).
func NewMetrics(reg prometheus.Registerer, stats StatsFunc) *Metrics {
	m := &Metrics{
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_as2_messages_sent_total",
			Help: "Outbound AS2 message and async MDN attempts by outcome (delivered, sent, awaiting-mdn, failed, retry, mdn-sent, mdn-retry, mdn-failed).",
		}, []string{"partner", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "edihub_as2_send_duration_seconds",
			Help:    "Duration of one outbound HTTP exchange with a partner, synchronous MDN included.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"partner"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_outbox_retries_total",
			Help: "Outbox attempts rescheduled for a retry.",
		}, []string{"partner"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edihub_outbox_in_flight",
			Help: "Outbox items this replica is sending right now.",
		}),
		webhook: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_webhook_deliveries_total",
			Help: "Webhook delivery attempts by outcome (delivered, retry, failed).",
		}, []string{"result"}),
		delivery: newDeliveryCounter(),
	}
	for _, r := range []string{ResultWebhookDelivered, ResultWebhookRetry, ResultWebhookFailed} {
		m.webhook.WithLabelValues(r)
	}
	reg.MustRegister(m.sent, m.duration, m.retries, m.inFlight, m.webhook, m.delivery)
	if stats != nil {
		reg.MustRegister(&dueCollector{stats: stats, desc: prometheus.NewDesc("edihub_outbox_due",
			"Pending outbox items whose next attempt is due and that no dispatcher holds (all replicas).", nil, nil)})
	}
	return m
}

type dueCollector struct {
	stats StatsFunc
	desc  *prometheus.Desc
}

func (c *dueCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *dueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	due, _, err := c.stats(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(due))
}

// presetPartners exports every partner's series at zero before its first
// message: Prometheus counts no increase for a series that first appears
// with its value, so without this the first documents of each partner
// after a start would be missing from rates and "today" panels.
func (m *Metrics) presetPartners(partners []string) {
	for _, p := range partners {
		for _, r := range []string{ResultDelivered, ResultSent, ResultAwaitingMDN, ResultFailed, ResultRetry, ResultMDNSent, ResultMDNRetry, ResultMDNFailed} {
			m.sent.WithLabelValues(p, r)
		}
		m.duration.WithLabelValues(p)
		m.retries.WithLabelValues(p)
	}
}
