package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/report"
)

// HubStore reads what the database knows of the hub; *postgres.Store
// implements it.
type HubStore interface {
	HubState(ctx context.Context, lease string) (postgres.HubState, error)
	ServedRevisions(ctx context.Context, seenWithin time.Duration) ([]postgres.ReplicaRevision, error)
	PartnerRevision(ctx context.Context) (int64, error)
	ReportDays(ctx context.Context, limit int) ([]postgres.ReportDay, error)
	RecordReplicaStatus(ctx context.Context, st postgres.ReplicaStatus) error
	ReplicaStatuses(ctx context.Context) ([]postgres.ReplicaStatus, error)
}

// Reports renders day reports; *report.Service implements it. Errors
// wrapping report.ErrInvalidDay are the caller's.
type Reports interface {
	Render(ctx context.Context, day, format string) ([]byte, error)
}

// reportPolicy is the Content-Security-Policy of a day report's HTML, the
// one the managers get by mail: it has inline styles and its charts are
// data: images, so it is served apart from the console's pages, in a
// sandbox (an origin of its own, no script, no form, no navigation of the
// console) that only the console may frame.
const reportPolicy = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; sandbox; frame-ancestors 'self'; base-uri 'none'; form-action 'none'"

// workerView is one leader-gated worker on the leader.
type workerView struct {
	Name string
	leader.WorkerStatus
}

// replicaView is one replica the database saw lately.
type replicaView struct {
	postgres.ReplicaRevision
	This, Leader, Behind bool
	// Version and Started are from its recorded status; empty and zero
	// when it recorded none lately.
	Version string
	Started time.Time
}

// hubData is the hub page's.
type hubData struct {
	// Status is this replica's elector; nil without one.
	Status *leader.Status
	// Workers are the leader's leader-gated workers, from WorkersOf (the
	// leader's identity); WorkersAt is when the leader recorded them
	// (zero: this replica leads, they are live) and WorkersStale is true
	// when that is longer ago than three recording intervals. No workers
	// and an empty WorkersOf: the leader recorded none lately.
	Workers      []workerView
	WorkersOf    string
	WorkersAt    time.Time
	WorkersStale bool
	// Holder is the lease's holder as this replica or the database knows.
	Holder   string
	State    postgres.HubState
	Replicas []replicaView
	Revision int64
	// Today is today's report so far; nil when it could not be built.
	Today       *report.Report
	TodayError  string
	Days        []postgres.ReportDay
	HasReports  bool
	OutboxTotal int64
}

// hub shows the hub: this replica and the leader, the leader-gated
// workers, the replicas, the queues and today's figures.
func (c *Console) hub(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d := hubData{HasReports: c.o.Reports != nil}
	if c.o.Leader != nil {
		st := c.o.Leader()
		d.Status = &st
	}
	var err error
	if d.State, err = c.o.Hub.HubState(ctx, c.o.LeaseName); err != nil {
		c.internal(w, r, "Reading the hub's state", err)
		return
	}
	for _, b := range d.State.Outbox {
		d.OutboxTotal += b.Due + b.Waiting + b.Claimed
	}
	if d.Revision, err = c.o.Hub.PartnerRevision(ctx); err != nil {
		c.internal(w, r, "Reading the hub's state", err)
		return
	}
	if err := c.hubReplicas(ctx, &d); err != nil {
		c.internal(w, r, "Reading the hub's state", err)
		return
	}
	if c.o.Reports != nil {
		rep, err := c.today(ctx)
		if err != nil {
			c.log.Warn("today's figures not built", zap.Error(err))
			d.TodayError = "Today's figures could not be built; try again in a moment."
		}
		d.Today = rep
		if d.Days, err = c.o.Hub.ReportDays(ctx, 14); err != nil {
			c.internal(w, r, "Reading the hub's state", err)
			return
		}
	}
	c.render(w, r, http.StatusOK, "hub", c.view(r, "Hub", "hub", d))
}

// hubReplicas fills in the replicas and the leader's workers.
func (c *Console) hubReplicas(ctx context.Context, d *hubData) error {
	served, err := c.o.Hub.ServedRevisions(ctx, partners.StoppedAfter)
	if err != nil {
		return err
	}
	recorded, err := c.o.Hub.ReplicaStatuses(ctx)
	if err != nil {
		return err
	}
	d.Holder = d.State.Term.Holder
	if d.Status != nil && d.Status.Holder != "" {
		d.Holder = d.Status.Holder
	}
	if st, at := leaderWorkers(d.Status, d.Holder, recorded); st != nil {
		d.WorkersOf, d.WorkersAt = st.Identity, at
		d.WorkersStale = !at.IsZero() && c.now().Sub(at) > 3*c.o.StatusInterval
		for name, ws := range st.Workers {
			d.Workers = append(d.Workers, workerView{Name: name, WorkerStatus: ws})
		}
		sort.Slice(d.Workers, func(i, j int) bool { return d.Workers[i].Name < d.Workers[j].Name })
	}
	byID := make(map[string]postgres.ReplicaStatus, len(recorded))
	for _, rs := range recorded {
		byID[rs.Identity] = rs
	}
	for _, rr := range served {
		v := replicaView{ReplicaRevision: rr, Behind: rr.Revision < d.Revision, Leader: rr.Identity == d.Holder}
		v.This = d.Status != nil && rr.Identity == d.Status.Identity
		if rs, ok := byID[rr.Identity]; ok {
			v.Version, v.Started = rs.Version, rs.StartedAt
		}
		d.Replicas = append(d.Replicas, v)
	}
	return nil
}

// todayEvery is how often a replica builds today's figures for the hub
// page at most: the report builder reads the whole day (and the day
// before, and the week before), too much for every refresh of every page.
const todayEvery = time.Minute

// todayCache keeps today's figures between hub pages.
type todayCache struct {
	mu  sync.Mutex
	at  time.Time
	rep *report.Report
}

// today returns today's figures so far, built at most once per todayEvery
// (one build at a time; the pages asking meanwhile wait for it).
func (c *Console) today(ctx context.Context) (*report.Report, error) {
	c.todayFigures.mu.Lock()
	defer c.todayFigures.mu.Unlock()
	now := c.now()
	if t := &c.todayFigures; t.rep != nil && now.Sub(t.at) < todayEvery && now.Sub(t.at) >= 0 {
		return t.rep, nil
	}
	b, err := c.o.Reports.Render(ctx, "today", "json")
	if err != nil {
		return nil, err
	}
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, err
	}
	c.todayFigures.at, c.todayFigures.rep = now, &rep
	return &rep, nil
}

// reportData is the report page's.
type reportData struct {
	Day string
}

// dayOf reads {day}: YYYY-MM-DD, today or yesterday. It does not check
// the date (Render does).
func dayOf(r *http.Request) (string, bool) {
	d := r.PathValue("day")
	if d == "today" || d == "yesterday" {
		return d, true
	}
	if len(d) != len("2006-01-02") {
		return "", false
	}
	for i, ch := range d {
		if i == 4 || i == 7 {
			if ch != '-' {
				return "", false
			}
		} else if ch < '0' || ch > '9' {
			return "", false
		}
	}
	return d, true
}

// reportPage shows a day's report, as mailed, in a sandboxed frame.
func (c *Console) reportPage(w http.ResponseWriter, r *http.Request) {
	day, ok := dayOf(r)
	if !ok {
		c.fail(w, r, http.StatusNotFound, "A report is named by its day: 2026-01-31, today or yesterday.")
		return
	}
	c.render(w, r, http.StatusOK, "report", c.view(r, "Report of "+day, "hub", reportData{Day: day}))
}

// reportFile serves a day's report as HTML (under reportPolicy, to be
// framed by reportPage) or CSV (a download).
func (c *Console) reportFile(format string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		day, ok := dayOf(r)
		if !ok {
			c.fail(w, r, http.StatusNotFound, "A report is named by its day: 2026-01-31, today or yesterday.")
			return
		}
		b, err := c.o.Reports.Render(r.Context(), day, format)
		switch {
		case errors.Is(err, report.ErrInvalidDay):
			c.fail(w, r, http.StatusNotFound, "There is no such day: name it like 2026-01-31.")
			return
		case err != nil:
			c.internal(w, r, "Building the report of "+day, err)
			return
		}
		h := w.Header()
		if format == "html" {
			h.Set("Content-Security-Policy", reportPolicy)
			h.Set("X-Frame-Options", "SAMEORIGIN")
			h.Set("Content-Type", "text/html; charset=utf-8")
		} else {
			h.Set("Content-Type", "text/csv; charset=utf-8")
			h.Set("Content-Disposition", `attachment; filename="edihub-report-`+day+`.csv"`)
		}
		h.Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
	}
}
