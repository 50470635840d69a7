package outbox

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edihub/edihub/internal/postgres"
)

// Results counted in edihub_delivery_attempts_total{result}.
const (
	ResultDeliveryDone   = "delivered" // the destination took the document
	ResultDeliveryRetry  = "retry"     // attempt failed, will be retried
	ResultDeliveryFailed = "failed"    // given up: a dead letter
)

func newDeliveryCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edihub_delivery_attempts_total",
		Help: "Attempts to write received documents to the connectors' destinations, by destination and outcome (delivered, retry, failed).",
	}, []string{"destination", "result"})
}

// BacklogFunc reports the pending deliveries per destination
// (postgres.Store.DeliveryBacklogs).
type BacklogFunc func(ctx context.Context) ([]postgres.DeliveryBacklog, error)

// NewDeliveryBacklog is a collector of the deliveries waiting, computed
// from f at scrape time across all replicas (bounded by a short timeout; a
// failing query reports no sample): edihub_delivery_backlog{destination},
// the pending deliveries, and edihub_delivery_oldest_seconds{destination},
// how long the oldest has waited since it was queued. A destination with
// nothing pending has no series.
func NewDeliveryBacklog(f BacklogFunc) prometheus.Collector {
	return &backlogCollector{f: f,
		backlog: prometheus.NewDesc("edihub_delivery_backlog",
			"Deliveries of received documents waiting to be written, per destination (all replicas).", []string{"destination"}, nil),
		oldest: prometheus.NewDesc("edihub_delivery_oldest_seconds",
			"How long the oldest delivery waiting for a destination has waited since it was queued.", []string{"destination"}, nil),
	}
}

type backlogCollector struct {
	f               BacklogFunc
	backlog, oldest *prometheus.Desc
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.oldest
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	l, err := c.f(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.backlog, err)
		return
	}
	for _, b := range l {
		ch <- prometheus.MustNewConstMetric(c.backlog, prometheus.GaugeValue, float64(b.Pending), b.Destination)
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, b.Oldest.Seconds(), b.Destination)
	}
}
