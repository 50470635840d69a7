package report_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

const testLease = "edihub-leader"

// seedMsg is one stored message as the seed wrote it.
type seedMsg struct {
	partner, direction, status, disposition string
	size                                    int64
	attempts                                int
	overdue                                 bool
	created                                 time.Time
	completed                               *time.Time
}

type seedDup struct {
	partner string
	at      time.Time
}

// seed is what a test stored: the recount works from it.
type seed struct {
	msgs  []seedMsg
	dups  []seedDup
	terms []struct {
		token  int64
		holder string
		at     time.Time
	}
	rejections []time.Time
	inbox      []struct{ received, processed *time.Time }
}

var partnerMix = []struct {
	name    string
	in, out int
}{
	{"ACME CORP", 46, 38},
	{"GLOBEX", 14, 22},
	{"INITECH", 6, 4},
}

const (
	dispProcessed = "automatic-action/MDN-sent-automatically; processed"
	dispAuth      = "automatic-action/MDN-sent-automatically; processed/Error: authentication-failed"
	dispDecrypt   = "automatic-action/MDN-sent-automatically; processed/Error: decryption-failed"
	dispUnknown   = "automatic-action/MDN-sent-automatically; processed/Error: unknown-trading-relationship"
)

// traffic generates a day's messages in loc, deterministically from rng;
// scale multiplies the volume (the days before differ).
func (s *seed) traffic(rng *rand.Rand, day time.Time, scale float64) {
	start := day
	end := time.Date(day.Year(), day.Month(), day.Day()+1, 0, 0, 0, 0, day.Location())
	// Business hours weigh more; local hours, whatever the day's length.
	weights := []int{1, 1, 1, 1, 1, 2, 3, 6, 9, 10, 10, 9, 7, 8, 9, 8, 6, 4, 3, 2, 2, 1, 1, 1}
	total := 0
	for _, w := range weights {
		total += w
	}
	at := func() time.Time {
		n, h := rng.IntN(total), 0
		for ; n >= weights[h]; h++ {
			n -= weights[h]
		}
		t := time.Date(day.Year(), day.Month(), day.Day(), h, 0, 0, 0, day.Location()).
			Add(time.Duration(rng.Int64N(int64(time.Hour)))).Truncate(time.Millisecond)
		if t.Before(start) || !t.Before(end) {
			return start
		}
		return t
	}
	for _, p := range partnerMix {
		for range int(float64(p.in) * scale) {
			m := seedMsg{partner: p.name, direction: "inbound", status: "processed", disposition: dispProcessed,
				size: 200 + rng.Int64N(50_000), attempts: 1, created: at()}
			switch r := rng.IntN(100); {
			case r < 4:
				m.status, m.disposition, m.size = "error", dispAuth, 0
			case r < 7:
				m.status, m.disposition, m.size = "error", dispDecrypt, 0
			case r < 8:
				m.status, m.disposition, m.size = "error", dispUnknown, 0
			}
			c := m.created
			m.completed = &c
			s.msgs = append(s.msgs, m)
			if rng.IntN(20) == 0 && m.status == "processed" {
				s.dups = append(s.dups, seedDup{partner: p.name, at: m.created.Add(time.Duration(rng.IntN(90)) * time.Minute)})
			}
		}
		for range int(float64(p.out) * scale) {
			m := seedMsg{partner: p.name, direction: "outbound", size: 500 + rng.Int64N(120_000), attempts: 1, created: at()}
			if rng.IntN(8) == 0 {
				m.attempts += 1 + rng.IntN(3)
			}
			done := m.created.Add(time.Duration(1500+rng.IntN(90_000)) * time.Millisecond * time.Duration(m.attempts))
			switch r := rng.IntN(100); {
			case r < 78:
				m.status, m.disposition, m.completed = "delivered", dispProcessed, &done
			case r < 82:
				m.status, m.completed = "sent", &done
			case r < 86:
				m.status, m.disposition, m.completed = "failed", dispDecrypt, &done
			case r < 89:
				m.status, m.completed = "failed", &done
				m.attempts = 8
			case r < 94:
				m.status = "awaiting-mdn"
			case r < 96:
				m.status, m.overdue = "awaiting-mdn", true
			default:
				m.status = "retrying"
				m.attempts++
			}
			s.msgs = append(s.msgs, m)
		}
	}
}

// standard seeds the report day (local midnight day in its zone) and the
// day before and the week before, plus leadership history, rejections and
// the MDN inbox.
func standardSeed(day time.Time) *seed {
	rng := rand.New(rand.NewPCG(8, 2026))
	s := &seed{}
	s.traffic(rng, day, 1)
	s.traffic(rng, day.AddDate(0, 0, -1), 0.8)
	s.traffic(rng, day.AddDate(0, 0, -7), 1.1)
	// Edges: the first instant is the day's, the next day's midnight not.
	first := day
	s.msgs = append(s.msgs, seedMsg{partner: "GLOBEX", direction: "inbound", status: "processed", disposition: dispProcessed, size: 1000, attempts: 1, created: first, completed: &first})
	next := day.AddDate(0, 0, 1)
	s.msgs = append(s.msgs, seedMsg{partner: "GLOBEX", direction: "inbound", status: "processed", disposition: dispProcessed, size: 1000, attempts: 1, created: next, completed: &next})
	add := func(token int64, holder string, at time.Time) {
		s.terms = append(s.terms, struct {
			token  int64
			holder string
			at     time.Time
		}{token, holder, at})
	}
	add(1, "edihub-0-aaaa", day.AddDate(0, 0, -20))
	add(2, "edihub-1-bbbb", day.Add(3*time.Hour+12*time.Minute)) // failover
	add(3, "edihub-1-bbbb", day.Add(15*time.Hour))               // same process again
	add(4, "edihub-2-cccc", day.Add(22*time.Hour))               // failover
	s.rejections = []time.Time{day.Add(3*time.Hour + 12*time.Minute + time.Second), day.Add(22*time.Hour + 2*time.Second), day.AddDate(0, 0, -1).Add(time.Hour)}
	p1 := day.Add(23 * time.Hour)
	late := day.AddDate(0, 0, 1).Add(time.Hour)
	r1, r2, r3 := day.Add(10*time.Hour), day.Add(23*time.Hour+30*time.Minute), day.Add(2*time.Hour)
	s.inbox = append(s.inbox,
		struct{ received, processed *time.Time }{&r1, &p1},   // processed before the end
		struct{ received, processed *time.Time }{&r2, &late}, // processed after it: backlog
		struct{ received, processed *time.Time }{&r3, nil},   // never: backlog
	)
	return s
}

// store writes s to the database at url.
func (s *seed) store(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	c := pgtest.Conn(t, url)
	batch := &pgx.Batch{}
	for i, m := range s.msgs {
		batch.Queue(`
INSERT INTO messages (direction, partner, as2_from, as2_to, message_id, status, payload_size, disposition, attempts,
                      mdn_overdue, created_at, updated_at, completed_at)
VALUES ($1, $2, $3, 'EDIHUB', $4, $5, $6, $7, $8, $9, $10, $10, $11)`,
			m.direction, m.partner, m.partner, fmt.Sprintf("<seed-%d@test>", i), m.status, m.size, m.disposition,
			m.attempts, m.overdue, m.created, m.completed)
	}
	for _, d := range s.dups {
		batch.Queue(`
INSERT INTO duplicates (message_id, partner, answered_at)
SELECT id, partner, $2 FROM messages WHERE partner = $1 AND direction = 'inbound' ORDER BY id LIMIT 1`, d.partner, d.at)
	}
	for _, tm := range s.terms {
		batch.Queue(`INSERT INTO leader_terms (lease, token, holder, opened_at) VALUES ($1, $2, $3, $4)`, testLease, tm.token, tm.holder, tm.at)
	}
	for _, r := range s.rejections {
		batch.Queue(`INSERT INTO fencing_rejections (lease, token, rejected_at) VALUES ($1, 1, $2)`, testLease, r)
	}
	for _, in := range s.inbox {
		batch.Queue(`INSERT INTO mdn_inbox (received_at, content_type, body, processed_at) VALUES ($1, 'multipart/report', '\x00', $2)`, in.received, in.processed)
	}
	if err := c.SendBatch(ctx, batch).Close(); err != nil {
		t.Fatalf("seed: %v", err)
	}
}

// newSeededStore returns a store on a fresh database holding s.
func newSeededStore(t *testing.T, s *seed) *postgres.Store {
	t.Helper()
	url := pgtest.URL(t)
	s.store(t, url)
	st, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// percentile is PostgreSQL's percentile_cont: linear interpolation between
// the sorted values.
func percentile(v []float64, p float64) float64 {
	sort.Float64s(v)
	pos := p * float64(len(v)-1)
	lo := int(pos)
	if lo+1 >= len(v) {
		return v[lo]
	}
	return v[lo] + (pos-float64(lo))*(v[lo+1]-v[lo])
}
