package pickup

import "github.com/prometheus/client_golang/prometheus"

// metrics are the poller's series, labelled by source name (the
// connectors document bounds them); the gauges describe the leader's last
// poll and are dropped when its term ends.
type metrics struct {
	files      *prometheus.CounterVec
	errors     *prometheus.CounterVec
	backlog    *prometheus.GaugeVec
	oldest     *prometheus.GaugeVec
	unarchived *prometheus.GaugeVec
	lastList   *prometheus.GaugeVec
}

func (m *metrics) register(r prometheus.Registerer) error {
	m.files = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edihub_pickup_files_total",
		Help: "Files of connector sources by what the pickup poller did with them: enqueued, archived, unrouted, too_large, refused, duplicate (each counted once per file version), failed (each attempt).",
	}, []string{"source", "result"})
	m.errors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "edihub_pickup_errors_total",
		Help: "Failures of the pickup poller by source and stage: list, read, enqueue, archive, claims.",
	}, []string{"source", "stage"})
	m.backlog = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "edihub_pickup_backlog_files",
		Help: "Files the leader's last poll listed at a source and did not take (not yet stable, over the per-poll limit, or left alone with a reason).",
	}, []string{"source"})
	m.oldest = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "edihub_pickup_oldest_waiting_seconds",
		Help: "Age (by modification time) of the oldest file waiting at a source at the leader's last poll; 0 when none waits.",
	}, []string{"source"})
	m.unarchived = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "edihub_pickup_unarchived_files",
		Help: "Files sent but still to archive or remove at a source (their archive failed), at the leader's last poll.",
	}, []string{"source"})
	m.lastList = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "edihub_pickup_last_list_timestamp_seconds",
		Help: "When the leader last listed a source successfully (Unix time).",
	}, []string{"source"})
	for _, c := range []prometheus.Collector{m.files, m.errors, m.backlog, m.oldest, m.unarchived, m.lastList} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// reset drops the gauges: a replica that no longer leads does not poll.
func (m *metrics) reset() {
	for _, g := range []*prometheus.GaugeVec{m.backlog, m.oldest, m.unarchived, m.lastList} {
		g.Reset()
	}
}

// forget drops the gauges of a source no longer configured.
func (m *metrics) forget(source string) {
	for _, g := range []*prometheus.GaugeVec{m.backlog, m.oldest, m.unarchived, m.lastList} {
		g.DeleteLabelValues(source)
	}
}
