package receiver

import (
	"errors"
	"io"
	"sync"
)

// errBusy means a request did not fit the process-wide in-flight byte
// budget or its partner's concurrency cap; it is answered 503 with
// Retry-After, nothing stored, so that the partner retries.
var errBusy = errors.New("receiver: in-flight budget exhausted")

// chunkedReserve is what a request without Content-Length reserves before
// its body is read; the reservation grows as the body arrives.
const chunkedReserve = 1 << 20

// budget accounts the bytes held by requests in flight (bodies and
// decompression, process-wide) and the requests in flight per partner.
// It is safe for concurrent use.
type budget struct {
	limit      int64 // 0: no byte limit
	perPartner int   // 0: no cap

	mu      sync.Mutex
	used    int64
	peak    int64
	partner map[string]int
}

func newBudget(limit int64, perPartner int) *budget {
	return &budget{limit: limit, perPartner: perPartner, partner: map[string]int{}}
}

// admit reserves n bytes and a concurrency slot for partner, or reports
// errBusy. Release the reservation when the request ends.
func (b *budget) admit(partner string, n int64) (*reservation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.perPartner > 0 && b.partner[partner] >= b.perPartner {
		return nil, errBusy
	}
	if !b.takeLocked(n) {
		return nil, errBusy
	}
	b.partner[partner]++
	return &reservation{b: b, partner: partner, n: n}, nil
}

func (b *budget) takeLocked(n int64) bool {
	if b.limit > 0 && b.used+n > b.limit {
		return false
	}
	b.used += n
	b.peak = max(b.peak, b.used)
	return true
}

// inUse and peakUse report the bytes reserved now and at most so far.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

func (b *budget) peakUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.peak
}

// reservation is one request's share of the budget. Its methods are
// called by the request's goroutine only.
type reservation struct {
	b       *budget
	partner string
	n       int64
}

// grow adds n bytes, or reports errBusy.
func (r *reservation) grow(n int64) error {
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	if !r.b.takeLocked(n) {
		return errBusy
	}
	r.n += n
	return nil
}

// release gives everything back; it is idempotent.
func (r *reservation) release() {
	if r == nil || r.b == nil {
		return
	}
	r.b.mu.Lock()
	r.b.used -= r.n
	r.b.partner[r.partner]--
	if r.b.partner[r.partner] == 0 {
		delete(r.b.partner, r.partner)
	}
	r.b.mu.Unlock()
	r.b = nil
}

// growingReader grows a reservation as a body of unknown length arrives.
type growingReader struct {
	r        io.Reader
	res      *reservation
	read     int64
	reserved int64
}

func (g *growingReader) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	g.read += int64(n)
	if g.read > g.reserved {
		add := max(g.read-g.reserved, chunkedReserve)
		if gerr := g.res.grow(add); gerr != nil {
			return n, gerr
		}
		g.reserved += add
	}
	return n, err
}
