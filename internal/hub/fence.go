package hub

import (
	"errors"
	"fmt"
	"time"
)

// Fence identifies one leadership term: the lease it was won on and the
// term's fencing token. Tokens of a lease strictly increase from term to
// term, across replicas; a Fence whose token is no longer the highest one
// opened is stale. The store refuses every leader-gated write made under a
// stale Fence with ErrStaleFence.
type Fence struct {
	Lease string
	Token int64
}

// String formats the fence for logs as lease@token.
func (f Fence) String() string { return fmt.Sprintf("%s@%d", f.Lease, f.Token) }

// ErrStaleFence reports a leader-gated write (or a term opening) refused
// because a term with a newer fencing token has opened on the same lease,
// or no term has opened at all. The caller is no longer the leader and must
// stop acting as one. Match it with errors.Is.
var ErrStaleFence = errors.New("stale fencing token: a newer leadership term has opened")

// Term is one opened leadership term: the fence it opened and who holds
// it.
type Term struct {
	Lease  string
	Token  int64
	Holder string
	// OpenedAt is when the term took the fence (database clock), after
	// every fenced write of older terms committed.
	OpenedAt time.Time
}
