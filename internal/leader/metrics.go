package leader

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	isLeader      prometheus.Gauge
	token         prometheus.Gauge
	transitions   prometheus.Counter
	workerRunning *prometheus.GaugeVec
	// workerLastSuccess is set by MarkSuccess.
	workerLastSuccess *prometheus.GaugeVec
	workerStuck       *prometheus.GaugeVec
	workerRestarts    *prometheus.CounterVec
	renewDuration     prometheus.Histogram
	renewFailures     prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, workers map[string]Worker) (*metrics, error) {
	m := &metrics{
		isLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edihub_leader_is_leader",
			Help: "1 while this replica leads (term opened, workers started), else 0.",
		}),
		token: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "edihub_leader_fencing_token",
			Help: "Fencing token of the term this replica leads; 0 while it follows.",
		}),
		transitions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edihub_leader_transitions_total",
			Help: "Times this replica became leader or stopped leading.",
		}),
		workerRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edihub_worker_running",
			Help: "1 while the leader-gated worker runs on this replica, else 0.",
		}, []string{"worker"}),
		workerLastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edihub_worker_last_success_timestamp_seconds",
			Help: "Unix time at which the leader-gated worker last finished a cycle of its work on this replica (0: never).",
		}, []string{"worker"}),
		workerStuck: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "edihub_worker_stuck",
			Help: "1 while this replica leads and the leader-gated worker made no progress (MarkSuccess) for its stuck-after time, else 0.",
		}, []string{"worker"}),
		workerRestarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "edihub_worker_restarts_total",
			Help: "Times the leader-gated worker returned while this replica led and was started again in the same term.",
		}, []string{"worker"}),
		renewDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "edihub_leader_renew_duration_seconds",
			Help:    "Time taken by each lease renewal attempt of the leader.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		renewFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "edihub_leader_renew_failures_total",
			Help: "Lease renewal attempts of the leader that failed.",
		}),
	}
	for name := range workers {
		m.workerRunning.WithLabelValues(name).Set(0)
		m.workerLastSuccess.WithLabelValues(name).Set(0)
		m.workerStuck.WithLabelValues(name).Set(0)
		m.workerRestarts.WithLabelValues(name)
	}
	for _, c := range []prometheus.Collector{m.isLeader, m.token, m.transitions, m.workerRunning, m.workerLastSuccess, m.workerStuck, m.workerRestarts, m.renewDuration, m.renewFailures} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("leader metrics: %w", err)
		}
	}
	return m, nil
}
