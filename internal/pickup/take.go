package pickup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"sync"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

// Results of a file, the result label of edihub_pickup_files_total.
const (
	ResultEnqueued  = "enqueued"  // queued for its partner
	ResultArchived  = "archived"  // archived or removed after it was queued
	ResultUnrouted  = "unrouted"  // no route, or no partner for its receiver
	ResultTooLarge  = "too_large" // larger than Options.MaxSize
	ResultRefused   = "refused"   // the partner's profile refused it (empty, bad name)
	ResultDuplicate = "duplicate" // the same version was sent before
	ResultFailed    = "failed"    // reading or queuing it failed; tried again
)

// take queues o for its partner under the term f and then archives it.
func (p *Poller) take(ctx context.Context, f hub.Fence, s SourceSpec, st *sourceState, o connector.Object, k postgres.PickupKey, marker string, log *zap.Logger) (bool, error) {
	log = log.With(zap.String("path", o.Path), zap.Int64("size", o.Size))
	route, ok := s.Route(o.Path)
	if !ok {
		p.refuse(s, st, k, ResultUnrouted, log, "no route takes this file: add a route whose match names this source and a path pattern that matches it")
		return false, nil
	}
	if o.Size > p.o.MaxSize {
		p.refuse(s, st, k, ResultTooLarge, log, fmt.Sprintf("the file is larger than the send limit of %d bytes: split it, or raise the limit", p.o.MaxSize))
		return false, nil
	}
	op := &opener{ctx: ctx, src: s.Source, obj: o}
	defer op.close()
	partner := route.Partner
	if partner == "" {
		var reason string
		partner, reason = p.partnerOf(op)
		if partner == "" {
			p.refuse(s, st, k, ResultUnrouted, log.With(zap.String("route", route.Name)), reason)
			return false, op.err()
		}
	}
	m, err := p.o.Outbound(outbox.Document{Partner: partner, Filename: path.Base(o.Path), Open: op.open, Size: o.Size})
	if errors.Is(err, outbox.ErrUnknownPartner) || errors.Is(err, outbox.ErrInvalidDocument) {
		p.refuse(s, st, k, ResultRefused, log.With(zap.String("partner", partner)), err.Error())
		return false, nil
	}
	if ctx.Err() != nil {
		return false, ctx.Err()
	}
	if err != nil || op.err() != nil {
		return false, p.failed(s, "read", log, errors.Join(err, op.err()))
	}
	c := postgres.PickupClaim{PickupKey: k, Marker: marker}
	if !s.Delete {
		c.Archive = archiveDir(s)
	}
	e, c, err := p.o.Store.EnqueuePickup(ctx, f, m, c)
	switch {
	case errors.Is(err, hub.ErrStaleFence):
		return false, err
	case errors.Is(err, postgres.ErrPickupClaimed):
		return false, nil // taken since the claims were read; the next poll sees the claim
	case ctx.Err() != nil:
		return false, ctx.Err() // leadership lost mid-copy: nothing was stored
	case err != nil:
		return false, p.failed(s, "enqueue", log, err)
	}
	p.m.files.WithLabelValues(s.Name, ResultEnqueued).Inc()
	log.Info("file picked up", zap.String("partner", partner), zap.String("route", route.Name),
		zap.Int64("message", e.ID), zap.String("message_id", e.MessageID), zap.Int64("claim", c.ID))
	if p.o.Notify != nil {
		p.o.Notify()
	}
	return true, p.archive(ctx, f, s, st, c, log)
}

// failed counts and logs a failure to read or queue a file, which is
// tried again at the next poll, and returns it.
func (p *Poller) failed(s SourceSpec, stage string, log *zap.Logger, err error) error {
	p.m.errors.WithLabelValues(s.Name, stage).Inc()
	p.m.files.WithLabelValues(s.Name, ResultFailed).Inc()
	log.Warn("file not picked up; trying again at the next poll", zap.String("stage", stage), zap.Error(err))
	return err
}

// refuse leaves the file version k where it is for Options.Recheck, and
// logs and counts why the first time.
func (p *Poller) refuse(s SourceSpec, st *sourceState, k postgres.PickupKey, result string, log *zap.Logger, reason string) {
	_, again := st.refused[k]
	st.refused[k] = p.o.Now().Add(p.o.Recheck)
	if again {
		return
	}
	p.m.files.WithLabelValues(s.Name, result).Inc()
	log.Warn("file left where it is", zap.String("result", result), zap.String("reason", reason))
}

// partnerOf finds the partner of the file by the receiver of its first
// interchange; "" and why when there is none.
func (p *Poller) partnerOf(op *opener) (partner, reason string) {
	// The first interchange's header is enough: read a bounded prefix.
	doc, err := edi.Parse(io.LimitReader(op.open(), 64<<10), edi.Limits{})
	if err != nil || len(doc.Interchanges) == 0 {
		if op.err() != nil {
			return "", "the file cannot be read: " + op.err().Error()
		}
		return "", "the route names no partner and the file is not an X12 or EDIFACT interchange whose receiver names one: name the partner in the route"
	}
	rcv := doc.Interchanges[0].Receiver
	if p.o.PartnerByReceiver != nil {
		if partner, ok := p.o.PartnerByReceiver(rcv); ok {
			return partner, ""
		}
	}
	return "", fmt.Sprintf("the route names no partner and no partner has the interchange receiver ID %q (qualifier %q): name the partner in the route, or give the partner this interchange ID", rcv.ID, rcv.Qualifier)
}

// archiveDir is where s archives taken files.
func archiveDir(s SourceSpec) string {
	if s.Archive == "" {
		return DefaultArchive
	}
	return s.Archive
}

// archiveName is where claim c's file (or, with suffix, its marker) goes:
// ARCHIVE/DIR/ID-BASE, unique per claim and the same on every attempt.
func archiveName(c postgres.PickupClaim, file string) string {
	if c.Archive == "" {
		return ""
	}
	dir, base := path.Split(file)
	return path.Clean(c.Archive) + "/" + dir + strconv.FormatInt(c.ID, 10) + "-" + base
}

// archive archives (or removes) the file of claim c, its marker first, and
// marks the claim archived. A failure is recorded on the claim, counted,
// logged once per claim, and tried again at the next poll.
func (p *Poller) archive(ctx context.Context, f hub.Fence, s SourceSpec, st *sourceState, c postgres.PickupClaim, log *zap.Logger) error {
	var err error
	// The marker goes first: a marker left alone would make a later file
	// of the same name look complete at once.
	if c.Marker != "" {
		err = s.Source.Archive(ctx, connector.Object{Path: c.Marker}, archiveName(c, c.Marker))
	}
	if err == nil || errors.Is(err, connector.ErrNotFound) {
		err = s.Source.Archive(ctx, connector.Object{Path: c.Path, Size: c.Size}, archiveName(c, c.Path))
	}
	// A file already gone (removed by hand, or an archive whose answer
	// was lost) leaves nothing to do.
	if err != nil && !errors.Is(err, connector.ErrNotFound) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		p.m.errors.WithLabelValues(s.Name, "archive").Inc()
		if !st.archiveNoted[c.ID] {
			st.archiveNoted[c.ID] = true
			log.Warn("file sent but not archived; trying again at every poll, it will not be sent again",
				zap.Int64("claim", c.ID), zap.Int64("message", c.Message), zap.Error(err))
		}
		if ferr := p.o.Store.PickupArchiveFailed(ctx, f, c.ID, err.Error()); errors.Is(ferr, hub.ErrStaleFence) {
			return ferr
		}
		return fmt.Errorf("archive %s: %w", c.Path, err)
	}
	if err := p.o.Store.PickupArchived(ctx, f, c.ID); err != nil {
		return err
	}
	delete(st.archiveNoted, c.ID)
	p.m.files.WithLabelValues(s.Name, ResultArchived).Inc()
	return nil
}

// finishClaims archives the files of s's claims whose archive is still to
// do: queued by this leader or an earlier one, never queued again.
func (p *Poller) finishClaims(ctx context.Context, f hub.Fence, s SourceSpec, st *sourceState, log *zap.Logger) error {
	claims, err := p.o.Store.OpenPickupClaims(ctx, s.Name, openClaimsBatch)
	if err != nil {
		p.m.errors.WithLabelValues(s.Name, "claims").Inc()
		return err
	}
	p.m.unarchived.WithLabelValues(s.Name).Set(float64(len(claims)))
	var errs []error
	for _, c := range claims {
		err := p.archive(ctx, f, s, st, c, log.With(zap.String("path", c.Path)))
		if errors.Is(err, hub.ErrStaleFence) || ctx.Err() != nil {
			return err
		}
		if err != nil {
			errs = append(errs, err)
		} else {
			p.m.unarchived.WithLabelValues(s.Name).Dec()
		}
	}
	// Archive failures do not stop the poll: new files are still taken.
	if len(errs) > 0 {
		p.log.Debug("archives still to do", zap.String("source", s.Name), zap.Int("failed", len(errs)))
	}
	return nil
}

// opener opens a listed file for reading as many times as the queue
// reads it (envelope, then copy), each reader stopping when ctx ends, and
// closes them all at the end. A failure to open is returned by the
// reader's Read and by err.
type opener struct {
	ctx context.Context
	src connector.Source
	obj connector.Object

	mu      sync.Mutex
	readers []io.Closer
	openErr error
}

func (op *opener) open() io.Reader {
	rc, err := op.src.Open(op.ctx, op.obj)
	op.mu.Lock()
	defer op.mu.Unlock()
	if err != nil {
		op.openErr = fmt.Errorf("open %s: %w", op.obj.Path, err)
		return errReader{op.openErr}
	}
	op.readers = append(op.readers, rc)
	return ctxReader{ctx: op.ctx, r: rc}
}

func (op *opener) err() error {
	op.mu.Lock()
	defer op.mu.Unlock()
	return op.openErr
}

func (op *opener) close() {
	op.mu.Lock()
	defer op.mu.Unlock()
	for _, r := range op.readers {
		_ = r.Close()
	}
	op.readers = nil
}

// ctxReader stops reading when ctx ends: a copy stops between two reads
// even when the source's reader does not watch the context.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
