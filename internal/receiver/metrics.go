package receiver

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the receiver's Prometheus series. Labels stay bounded: the
// partner label is a configured AS2 ID or "unknown".
type metrics struct {
	received *prometheus.CounterVec
	duration prometheus.Histogram
	bytes    *prometheus.CounterVec
	inbox    *prometheus.CounterVec
	// mdnTargetRefused counts Receipt-Delivery-Option URLs the partner's
	// profile does not allow.
	mdnTargetRefused *prometheus.CounterVec
	// replays counts signed content seen again under a new Message-ID.
	replays *prometheus.CounterVec
	// busy counts 503 answers for the in-flight budget, by stage.
	busy     *prometheus.CounterVec
	inFlight prometheus.GaugeFunc
}

func newMetrics(reg prometheus.Registerer, b *budget) (*metrics, error) {
	m := &metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_as2_messages_received_total",
			Help: "AS2 messages received, by partner (configured AS2 ID or unknown) and result (processed, duplicate, an MDN error modifier such as decryption-failed, unknown-trading-relationship, too-large, bad-request, unavailable).",
		}, []string{"partner", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "edihub_as2_receive_duration_seconds",
			Help:    "Time from the start of an AS2 request to its answer, body read included (async MDN intake excluded).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_as2_received_bytes_total",
			Help: "Request body bytes received on POST /as2, by partner.",
		}, []string{"partner"}),
		inbox: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_as2_mdn_inbox_received_total",
			Help: "Asynchronous MDNs stored in the MDN inbox, by partner.",
		}, []string{"partner"}),
		mdnTargetRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_as2_mdn_target_refused_total",
			Help: "Receipt-Delivery-Option URLs refused because the partner profile does not allow their host (mdn_hosts, allow_private_mdn_targets); the MDN went in the response.",
		}, []string{"partner"}),
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_as2_replays_total",
			Help: "Signed content received again under a new Message-ID within the partner's replay window, by partner and action (flagged, refused).",
		}, []string{"partner", "action"}),
		busy: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_as2_busy_total",
			Help: "AS2 requests answered 503 with Retry-After because the process-wide in-flight byte budget or the partner's concurrency cap was reached, by partner and stage (admission: before the body was read; body; decompression; spool: the spool's limit on disk).",
		}, []string{"partner", "stage"}),
		inFlight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "edihub_as2_in_flight_bytes",
			Help: "Bytes reserved by AS2 requests in flight on this replica (bodies and decompression output), against EDIHUB_MAX_IN_FLIGHT_BYTES.",
		}, func() float64 { return float64(b.inUse()) }),
	}
	for _, c := range []prometheus.Collector{m.received, m.duration, m.bytes, m.inbox, m.mdnTargetRefused, m.replays, m.busy, m.inFlight} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("receiver: register metrics: %w", err)
		}
	}
	return m, nil
}

// registerSpool exports the spool's bytes in use on disk.
func registerSpool(reg prometheus.Registerer, used func() int64) error {
	g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "edihub_as2_spool_bytes",
		Help: "Bytes on disk in the spool of large AS2 requests in flight on this replica (bodies and payloads), against EDIHUB_SPOOL_MAX_BYTES.",
	}, func() float64 { return float64(used()) })
	if err := reg.Register(g); err != nil {
		return fmt.Errorf("receiver: register metrics: %w", err)
	}
	return nil
}
