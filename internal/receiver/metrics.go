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
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
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
	}
	for _, c := range []prometheus.Collector{m.received, m.duration, m.bytes, m.inbox, m.mdnTargetRefused, m.replays} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("receiver: register metrics: %w", err)
		}
	}
	return m, nil
}
