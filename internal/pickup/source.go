package pickup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/postgres"
)

// sourceState is what the poller remembers of one source during a term.
type sourceState struct {
	// seen is the last poll's listing: path → size and version.
	seen map[string]postgres.PickupKey
	// refused are the file versions left alone, with when to look again.
	refused map[postgres.PickupKey]time.Time
	// archiveNoted are the claims whose failed archive was logged.
	archiveNoted map[int64]bool
	due          time.Time
}

func newSourceState() *sourceState {
	return &sourceState{seen: map[string]postgres.PickupKey{}, refused: map[postgres.PickupKey]time.Time{}, archiveNoted: map[int64]bool{}}
}

// openClaimsBatch bounds the claims whose archive one poll finishes.
const openClaimsBatch = 100

// pollSource is one poll of s: finish the archives still to do, list,
// take the stable files, update the gauges.
func (p *Poller) pollSource(ctx context.Context, f hub.Fence, s SourceSpec, st *sourceState) error {
	log := p.log.With(zap.String("source", s.Name))
	if err := p.finishClaims(ctx, f, s, st, log); err != nil {
		return err
	}
	objs, err := s.Source.List(ctx)
	if err != nil {
		p.m.errors.WithLabelValues(s.Name, "list").Inc()
		log.Warn("source cannot be listed; trying again at the next poll", zap.Error(err))
		return fmt.Errorf("list: %w", err)
	}
	p.m.lastList.WithLabelValues(s.Name).Set(float64(p.o.Now().Unix()))
	// Oldest first: files are taken in the order they were written.
	slices.SortFunc(objs, func(a, b connector.Object) int {
		return cmp.Or(a.ModTime.Compare(b.ModTime), cmp.Compare(a.Path, b.Path))
	})
	keys := make([]postgres.PickupKey, len(objs))
	for i, o := range objs {
		keys[i] = keyOf(s, o)
	}
	claims, err := p.o.Store.PickupClaims(ctx, s.Name, keys)
	if err != nil {
		p.m.errors.WithLabelValues(s.Name, "claims").Inc()
		return err
	}
	claimed := make(map[postgres.PickupKey]postgres.PickupClaim, len(claims))
	for _, c := range claims {
		claimed[c.PickupKey] = c
	}
	seen := make(map[string]postgres.PickupKey, len(objs))
	var (
		taken, backlog int
		oldest         time.Time
		errs           []error
	)
	for i, o := range objs {
		if err := ctx.Err(); err != nil { // leadership lost: stop between files
			return err
		}
		k := keys[i]
		seen[o.Path] = k
		if c, ok := claimed[k]; ok {
			p.claimedAgain(s, st, c, log)
			continue
		}
		took, err := p.consider(ctx, f, s, st, o, k, taken < p.o.MaxFiles, log)
		if errors.Is(err, hub.ErrStaleFence) || ctx.Err() != nil {
			return err
		}
		if err != nil {
			errs = append(errs, err)
		}
		if took {
			taken++
			continue
		}
		backlog++
		if oldest.IsZero() || o.ModTime.Before(oldest) {
			oldest = o.ModTime
		}
	}
	st.seen = seen
	for k := range st.refused {
		if seen[k.Path] != k {
			delete(st.refused, k)
		}
	}
	p.m.backlog.WithLabelValues(s.Name).Set(float64(backlog))
	age := 0.0
	if !oldest.IsZero() {
		age = max(p.o.Now().Sub(oldest).Seconds(), 0)
	}
	p.m.oldest.WithLabelValues(s.Name).Set(age)
	return errors.Join(errs...)
}

// keyOf is the version of o the claim records: its ETag for an etag
// source (when it has one), its modification time otherwise.
func keyOf(s SourceSpec, o connector.Object) postgres.PickupKey {
	v := o.ModTime.UTC().Format(time.RFC3339Nano)
	if s.Stable == StableETag && o.ETag != "" {
		v = o.ETag
	}
	return postgres.PickupKey{Source: s.Name, Path: o.Path, Size: o.Size, Version: v}
}

// claimedAgain handles a listed file whose version was claimed: one still
// to archive was handled by finishClaims (it failed); one archived is the
// same version put back, which is never sent twice.
func (p *Poller) claimedAgain(s SourceSpec, st *sourceState, c postgres.PickupClaim, log *zap.Logger) {
	if c.State != postgres.PickupArchived {
		return
	}
	if _, ok := st.refused[c.PickupKey]; ok {
		return
	}
	st.refused[c.PickupKey] = time.Time{}.Add(1<<63 - 1) // never looked at again while listed
	p.m.files.WithLabelValues(s.Name, ResultDuplicate).Inc()
	log.Warn("file already sent, left where it is: the same version (path, size, time or ETag) was picked up before",
		zap.String("path", c.Path), zap.Int64("size", c.Size), zap.Int64("message", c.Message), zap.Int64("claim", c.ID))
}

// consider takes o when it is stable, may be taken now and is not a
// refused version still left alone; took reports it was queued.
func (p *Poller) consider(ctx context.Context, f hub.Fence, s SourceSpec, st *sourceState, o connector.Object, k postgres.PickupKey, room bool, log *zap.Logger) (took bool, err error) {
	if until, ok := st.refused[k]; ok && p.o.Now().Before(until) {
		return false, nil
	}
	stable, marker, err := p.stable(ctx, s, st, o, k)
	if err != nil {
		p.m.errors.WithLabelValues(s.Name, "read").Inc()
		log.Warn("marker file cannot be checked", zap.String("path", o.Path), zap.Error(err))
		return false, err
	}
	if !stable || !room {
		return false, nil
	}
	return p.take(ctx, f, s, st, o, k, marker, log)
}

// stable reports whether o may be taken, by s's mode; marker is the
// marker file's path in marker mode.
func (p *Poller) stable(ctx context.Context, s SourceSpec, st *sourceState, o connector.Object, k postgres.PickupKey) (ok bool, marker string, err error) {
	switch s.Stable {
	case StableMarker:
		marker = o.Path + MarkerSuffix
		rc, err := s.Source.Open(ctx, connector.Object{Path: marker})
		if errors.Is(err, connector.ErrNotFound) {
			return false, "", nil
		}
		if err != nil {
			return false, "", fmt.Errorf("open marker %s: %w", marker, err)
		}
		_ = rc.Close()
		return true, marker, nil
	default: // StablePolls, StableETag: the same version at the last poll
		prev, ok := st.seen[o.Path]
		return ok && prev == k, "", nil
	}
}
