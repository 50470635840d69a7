package postgres

import "github.com/prometheus/client_golang/prometheus"

// poolCollector exports the connection pool's statistics at scrape time.
type poolCollector struct {
	s                                                 *Store
	acquired, idle, total, max, constructing          *prometheus.Desc
	acquires, emptyAcquires, canceled, acquireSeconds *prometheus.Desc
	newConns, destroyedLifetime, destroyedIdle        *prometheus.Desc
}

// Collector returns a Prometheus collector for the pool's statistics
// (edihub_db_pool_*) and the store's fencing rejections
// (edihub_fencing_rejections_total) and of its group commit of receipts
// (edihub_receipt_flush_*). Register it once per Store.
func (s *Store) Collector() prometheus.Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("edihub_db_pool_"+name, help, nil, nil)
	}
	return &poolCollector{
		s:                 s,
		acquired:          d("acquired_conns", "Connections currently in use."),
		idle:              d("idle_conns", "Idle connections in the pool."),
		total:             d("total_conns", "Connections in the pool (in use, idle and being opened)."),
		max:               d("max_conns", "Largest size the pool may reach."),
		constructing:      d("constructing_conns", "Connections being opened."),
		acquires:          d("acquires_total", "Successful connection acquisitions."),
		emptyAcquires:     d("empty_acquires_total", "Acquisitions that had to wait for a connection."),
		canceled:          d("canceled_acquires_total", "Acquisitions canceled by their context."),
		acquireSeconds:    d("acquire_seconds_total", "Time spent waiting for connections."),
		newConns:          d("new_conns_total", "Connections opened."),
		destroyedLifetime: d("max_lifetime_destroyed_total", "Connections closed for reaching their maximum lifetime."),
		destroyedIdle:     d("max_idle_destroyed_total", "Connections closed for being idle too long."),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	prometheus.DescribeByCollect(c, ch)
}

func newFenceRejections() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "edihub_fencing_rejections_total",
		Help: "Leader-gated writes and term openings refused because their fencing token was stale (a newer term had opened).",
	})
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	c.s.fenceRejections.Collect(ch)
	c.s.receipts.perFlush.Collect(ch)
	c.s.receipts.fallbacks.Collect(ch)
	st := c.s.pool.Stat()
	g := func(d *prometheus.Desc, v float64) { ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v) }
	k := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	g(c.acquired, float64(st.AcquiredConns()))
	g(c.idle, float64(st.IdleConns()))
	g(c.total, float64(st.TotalConns()))
	g(c.max, float64(st.MaxConns()))
	g(c.constructing, float64(st.ConstructingConns()))
	k(c.acquires, float64(st.AcquireCount()))
	k(c.emptyAcquires, float64(st.EmptyAcquireCount()))
	k(c.canceled, float64(st.CanceledAcquireCount()))
	k(c.acquireSeconds, st.AcquireDuration().Seconds())
	k(c.newConns, float64(st.NewConnsCount()))
	k(c.destroyedLifetime, float64(st.MaxLifetimeDestroyCount()))
	k(c.destroyedIdle, float64(st.MaxIdleDestroyCount()))
}
