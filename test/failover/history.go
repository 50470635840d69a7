package failover

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/postgres"
)

// Term is one leadership term: from leader_terms (token, holder, when it
// took the fence, by the database clock) and from the logs (when the
// replica said it became leader and when its workers had stopped).
type Term struct {
	Identity string
	Replica  string
	Token    int64
	OpenedAt time.Time
	// Start is the "became leader" line; zero when not logged.
	Start time.Time
	// Stop is the "lost leadership" or "released" line (workers stopped)
	// or the SIGKILL of the process; zero while the term lasts, or when
	// its process was frozen or cut off and never said.
	Stop       time.Time
	StopReason string
}

func (t Term) String() string {
	return fmt.Sprintf("term %d of %s (%s) opened %s, log %s–%s", t.Token, t.Identity, t.Replica,
		t.OpenedAt.Format("15:04:05.000"), clock(t.Start), clock(t.Stop))
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "…"
	}
	return t.Format("15:04:05.000")
}

// Beat is one accepted fenced write (a heartbeat row).
type Beat = postgres.Beat

// History is what a scenario recorded.
type History struct {
	Terms []Term          // in token order
	Beats []postgres.Beat // accepted fenced writes, in id order
}

// Verdict is Check's judgement of a History.
type Verdict struct {
	// Stale are accepted writes whose token was below the fence when they
	// were written: a term with a higher token had opened before.
	Stale []postgres.Beat
	// Interleaved are accepted writes whose token is below that of an
	// earlier write (id order): two terms' writes interleaved.
	Interleaved []postgres.Beat
	// Unknown are accepted writes of no opened term (or of another holder).
	Unknown []postgres.Beat
	// Unordered are terms that took the fence out of token order.
	Unordered []Term
	// Overlapping are pairs of terms whose log intervals (became leader →
	// workers stopped) overlap. Only terms with a logged stop count as
	// ended, so a frozen or cut-off leader that never logged its stop
	// overlaps its successor: callers decide whether that is expected.
	Overlapping [][2]Term
}

// Err returns nil when no accepted write was stale, interleaved or
// unknown and terms opened in token order; Overlapping is not judged here.
func (v Verdict) Err() error {
	var errs []error
	for _, b := range v.Stale {
		errs = append(errs, fmt.Errorf("stale write accepted: beat %d of term %d by %s at %s", b.ID, b.Token, b.Holder, b.At.Format(time.RFC3339Nano)))
	}
	for _, b := range v.Interleaved {
		errs = append(errs, fmt.Errorf("interleaved write: beat %d of term %d by %s after a beat of a later term", b.ID, b.Token, b.Holder))
	}
	for _, b := range v.Unknown {
		errs = append(errs, fmt.Errorf("write of no opened term: beat %d, token %d, holder %s", b.ID, b.Token, b.Holder))
	}
	for _, t := range v.Unordered {
		errs = append(errs, fmt.Errorf("term opened out of token order: %s", t))
	}
	return errors.Join(errs...)
}

// OverlapErr returns an error naming the overlapping terms, or nil.
func (v Verdict) OverlapErr() error {
	var errs []error
	for _, p := range v.Overlapping {
		errs = append(errs, fmt.Errorf("overlapping terms: %s and %s", p[0], p[1]))
	}
	return errors.Join(errs...)
}

// Check judges h. A write is stale when a term with a higher token had
// taken the fence (OpenedAt, database clock, taken after the fence lock,
// so every legitimate older write is stamped before it) before the write
// was stamped (beat_at, database clock, inside the fenced transaction).
func Check(h History) Verdict {
	var v Verdict
	terms := slices.Clone(h.Terms)
	slices.SortFunc(terms, func(a, b Term) int { return a.OpenedAt.Compare(b.OpenedAt) })
	for i := 1; i < len(terms); i++ {
		if terms[i].Token <= terms[i-1].Token {
			v.Unordered = append(v.Unordered, terms[i])
		}
	}
	holders := map[int64]string{}
	for _, t := range h.Terms {
		holders[t.Token] = t.Identity
	}
	var highest int64
	for _, b := range h.Beats {
		if holder, ok := holders[b.Token]; !ok || holder != b.Holder {
			v.Unknown = append(v.Unknown, b)
		}
		if b.Token < highest {
			v.Interleaved = append(v.Interleaved, b)
		}
		highest = max(highest, b.Token)
		var fence int64
		for _, t := range terms {
			if t.OpenedAt.Before(b.At) {
				fence = max(fence, t.Token)
			}
		}
		if b.Token < fence {
			v.Stale = append(v.Stale, b)
		}
	}
	for i, a := range h.Terms {
		for _, b := range h.Terms[i+1:] {
			if overlap(a, b) {
				v.Overlapping = append(v.Overlapping, [2]Term{a, b})
			}
		}
	}
	return v
}

// overlap reports whether two terms' log intervals overlap; a term with no
// logged start is judged by when it took the fence.
func overlap(a, b Term) bool {
	start := func(t Term) time.Time {
		if t.Start.IsZero() {
			return t.OpenedAt
		}
		return t.Start
	}
	ends := func(t Term, at time.Time) bool { return !t.Stop.IsZero() && !t.Stop.After(at) }
	return !ends(a, start(b)) && !ends(b, start(a))
}

// Summary describes h in a few lines, for test logs.
func (h History) Summary() string {
	var b strings.Builder
	count := map[int64]int{}
	for _, beat := range h.Beats {
		count[beat.Token]++
	}
	for _, t := range h.Terms {
		fmt.Fprintf(&b, "%s, %d beats accepted, stop: %s\n", t, count[t.Token], t.StopReason)
	}
	return b.String()
}

// Stats are the minimum, median and maximum of some durations.
type Stats struct {
	N             int
	Min, P50, Max time.Duration
}

// StatsOf computes Stats; P50 is the nearest-rank median (of ten values,
// the fifth smallest).
func StatsOf(ds []time.Duration) Stats {
	if len(ds) == 0 {
		return Stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return Stats{N: len(s), Min: s[0], P50: s[(len(s)+1)/2-1], Max: s[len(s)-1]}
}

func (s Stats) String() string {
	if s.N == 0 {
		return "no trials"
	}
	return fmt.Sprintf("min %s / p50 %s / max %s (n=%d)", round(s.Min), round(s.P50), round(s.Max), s.N)
}

func round(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%.2fs", d.Seconds())
}
