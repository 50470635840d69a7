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

// bodyStep is how much a request's reservation grows at a time as its
// body arrives (never past a declared Content-Length), so that the lock
// is not taken for every read of a few KiB.
const bodyStep = 1 << 20

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

// admit takes a concurrency slot for partner and returns an empty
// reservation, grown as the body arrives (bodyReader) and by
// decompression, or reports errBusy: when the partner is at its cap, or
// when declared (the Content-Length; 0 when unknown) does not fit what
// the budget has free now, so that a body that cannot fit is refused
// from its header. Nothing is reserved before bytes arrive: a connection
// that declares a large body and sends it slowly, or not at all, holds
// only what it sent. Release the reservation when the request ends.
func (b *budget) admit(partner string, declared int64) (*reservation, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.perPartner > 0 && b.partner[partner] >= b.perPartner {
		return nil, errBusy
	}
	if b.limit > 0 && declared > b.limit-b.used {
		return nil, errBusy
	}
	b.partner[partner]++
	return &reservation{b: b, partner: partner}, nil
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

// bodyReader grows a reservation as a body arrives, a bodyStep at a
// time, never past the declared length: the budget holds what was
// received, not what was announced.
type bodyReader struct {
	r        io.Reader
	res      *reservation
	declared int64 // Content-Length; 0 when unknown (chunked)
	read     int64
	reserved int64
}

func (g *bodyReader) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	g.read += int64(n)
	if g.read > g.reserved {
		add := max(g.read-g.reserved, bodyStep)
		if g.declared > 0 && g.reserved+add > g.declared {
			add = max(g.declared, g.read) - g.reserved
		}
		if gerr := g.res.grow(add); gerr != nil {
			// A step ahead may not fit where the bytes that arrived do.
			need := g.read - g.reserved
			if add == need || g.res.grow(need) != nil {
				return n, gerr
			}
			add = need
		}
		g.reserved += add
	}
	return n, err
}
