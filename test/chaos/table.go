package chaos

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// dbAddress says how the replicas reach the database's primary.
func dbAddress(multiHost bool) string {
	if multiHost {
		return "multi-host URL (target_session_attrs=read-write)"
	}
	return "one address repointed at a promotion"
}

// Print writes the run's checker counts and its failover table, as
// Markdown.
func (r *Result) Print(w io.Writer) {
	o := r.Options
	fmt.Fprintf(w, "\n## Chaos run: mode %s, seed %d, rate %.1f/s each way, %s replication, %s, took %s\n\n",
		o.Mode, o.Seed, o.Rate, replication(o.Async), dbAddress(o.MultiHost), r.Took.Round(time.Second))
	v := r.Verdict
	fmt.Fprintf(w, "Traffic: %d documents hub → partner, %d partner → hub queued (%d API calls retried); settled: %v\n\n",
		r.HubQueued, r.PartnerQueued, r.APIRetries, r.Settled)
	fmt.Fprintln(w, "| checker | count |")
	fmt.Fprintln(w, "|---|---|")
	rows := []struct {
		name string
		n    any
	}{
		{"partner → hub: acknowledged (positive MDN)", v.Acknowledged},
		{"… lost", v.Lost},
		{"… duplicated", v.Duplicated},
		{"… failed / not final at the partner", fmt.Sprintf("%d / %d", v.PartnerFailed, v.PartnerNotFinal)},
		{"hub → partner: outbound messages (delivered / failed)", fmt.Sprintf("%d (%d / %d)", v.Outbound, v.Delivered, v.Failed)},
		{"… accepted by the hub's API and lost", v.SubmittedLost},
		{"… without a final state", v.NotFinal},
		{"… with two final states", v.FinalTwice},
		{"… stored twice by the partner", v.PartnerStoredTwice},
		{"… posted more often than attempts recorded", v.OverPosted},
		{"async MDNs applied", v.MDNsApplied},
		{"… applied twice", v.MDNAppliedTwice},
		{"… delivered without an applied MDN", v.DeliveredWithoutMDN},
		{"… left pending", v.MDNsPending},
		{"report days stored / mails received", fmt.Sprintf("%d / %d", v.ReportDays, v.ReportMails)},
		{"… days without exactly one mail", v.ReportDaysWrong},
		{"… mails unequal to a recount", fmt.Sprintf("%d (compared: %s)", v.RecountMismatch, v.Recounted)},
		{"terms / accepted fenced writes", fmt.Sprintf("%d / %d", v.Terms, v.Beats)},
		{"… stale writes accepted", v.Stale},
		{"… interleaved writes", v.Interleaved},
		{"… writes of no opened term", v.UnknownWrites},
		{"… token backwards (terms out of order)", v.Backwards},
		{"availability during serving faults (POSTs 2xx / all)", fmt.Sprintf("%.2f%% (%d / %d)", 100*v.Availability(), v.ServingOK, v.ServingPosts)},
		{"… longest gap between 2xx answers", v.LongestGap.Round(time.Millisecond)},
	}
	for _, row := range rows {
		fmt.Fprintf(w, "| %s | %v |\n", row.name, row.n)
	}
	r.printFailover(w)
	if fs := v.Failures(); len(fs) > 0 {
		fmt.Fprintf(w, "\nBROKEN INVARIANTS:\n")
		for _, f := range fs {
			fmt.Fprintf(w, "- %s\n", f)
		}
	}
	for _, d := range v.Details {
		fmt.Fprintf(w, "  %s\n", d)
	}
}

// printFailover writes count, p50, p95 and max per fault kind.
func (r *Result) printFailover(w io.Writer) {
	fmt.Fprintln(w, "\n| fault | n | fault → successor's workers running (p50 / p95 / max) | fault → old leader's workers stopped (p50 / p95 / max) | receiving (DB) / mail (SMTP) back (p50 / p95 / max) | partner POSTs 2xx during | errors |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, k := range append(slices.Clone(Kinds), SMTPDown) {
		var succ, old, recv []time.Duration
		n, errs, posts, ok := 0, 0, 0, 0
		for _, o := range r.Outcomes {
			if o == nil || o.Kind != k {
				continue
			}
			n++
			posts, ok = posts+o.Posts, ok+o.PostsOK
			if o.Err != nil {
				errs++
			}
			if o.Successor >= 0 {
				succ = append(succ, o.Successor)
			}
			if o.OldStopped >= 0 {
				old = append(old, o.OldStopped)
			}
			if o.Receiving >= 0 {
				recv = append(recv, o.Receiving)
			}
		}
		if n == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %d / %d | %d |\n", k, n, quantiles(succ), quantiles(old), quantiles(recv), ok, posts, errs)
	}
	for _, o := range r.Outcomes {
		if o != nil && o.Err != nil {
			fmt.Fprintf(w, "- %s: %v\n", o.Kind, o.Err)
		}
	}
}

// quantiles formats p50 / p95 / max (nearest rank) of ds, or "–".
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "–"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(s))+0.999999) - 1
		return s[max(0, min(i, len(s)-1))]
	}
	f := func(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
	return fmt.Sprintf("%s / %s / %s", f(at(0.5)), f(at(0.95)), f(s[len(s)-1]))
}
