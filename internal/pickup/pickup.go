// Package pickup is the leader-gated pickup poller: it lists the
// connector sources (folders, SFTP directories, S3 prefixes), and sends
// each stable file to its partner exactly once, across leaders.
//
// A file is taken in three steps. Its bytes are copied into the database
// as an outbound message, and in the same transaction, after the copy, the
// term's fence is checked and a claim of the file version (source, path,
// size, modification time or ETag) is inserted: the message is queued
// only when the claim commits, under the current term, and a file version
// is never claimed twice. Only after that commit is the file archived (or
// removed) at the source, and the claim marked archived. A leader that
// dies between the commit and the archive leaves a claim its successor
// finishes (archives, without queuing again); a leader paused and fenced
// out meanwhile commits nothing. docs/connectors-pickup.md tells the
// whole story.
package pickup

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/edi"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
)

// Stability says when a listed file is complete enough to take.
type Stability string

// The stability modes of a source.
const (
	// StablePolls: the size and modification time are unchanged across
	// two consecutive polls (the default). The poller remembers the last
	// poll in memory, so a new leader takes a file at its second poll.
	StablePolls Stability = "polls"
	// StableMarker: a marker file NAME.done exists beside NAME (the
	// writer creates it when NAME is complete). The marker is archived or
	// removed with the file.
	StableMarker Stability = "marker"
	// StableETag: the object's ETag (and size) are unchanged across two
	// consecutive polls (S3).
	StableETag Stability = "etag"
)

// MarkerSuffix is appended to a file's name to name its marker file.
const MarkerSuffix = ".done"

// DefaultArchive is the archive directory of a source that names none.
const DefaultArchive = "archive/"

// Route says where the files of a source path go.
type Route struct {
	// Name names the route, for logs.
	Name string
	// Partner is the AS2 ID of the partner the file is sent to; empty
	// means the partner whose interchange ID is the receiver of the
	// file's first interchange (ISA08, UNB receiver), found by
	// Options.PartnerByReceiver.
	Partner string
}

// SourceSpec is one source the poller lists.
type SourceSpec struct {
	// Name names the source (connectors document), in claims, logs and
	// metric labels. Required.
	Name string
	// Source lists, reads and archives the files. Required.
	Source connector.Source
	// Stable is the stability mode; empty means StablePolls.
	Stable Stability
	// Delete removes taken files instead of archiving them.
	Delete bool
	// Archive is the directory, relative to the source's root, taken
	// files are moved to (ending in "/"); empty means DefaultArchive.
	// A file PATH goes to ARCHIVE/DIR/ID-BASE, where DIR and BASE are
	// PATH's directory and base name and ID its claim's number: unique
	// and the same on every attempt.
	Archive string
	// Poll is the time between two polls of the source; zero means
	// DefaultPoll.
	Poll time.Duration
	// Route gives the route of a file path; false: no route takes the
	// file, which stays where it is. Required.
	Route func(path string) (Route, bool)
}

// DefaultPoll is the poll interval of a source that names none.
const DefaultPoll = 10 * time.Second

// Store is the storage the poller needs; *postgres.Store implements it.
type Store interface {
	EnqueuePickup(ctx context.Context, f hub.Fence, m postgres.NewOutbound, c postgres.PickupClaim) (postgres.Enqueued, postgres.PickupClaim, error)
	PickupClaims(ctx context.Context, source string, keys []postgres.PickupKey) ([]postgres.PickupClaim, error)
	OpenPickupClaims(ctx context.Context, source string, limit int) ([]postgres.PickupClaim, error)
	PickupArchived(ctx context.Context, f hub.Fence, id int64) error
	PickupArchiveFailed(ctx context.Context, f hub.Fence, id int64, reason string) error
	PurgePickupClaims(ctx context.Context, f hub.Fence, olderThan time.Duration, limit int) (int64, error)
}

// Options configure NewPoller.
type Options struct {
	// Store, Sources, Outbound, Logger and Registerer are required.
	Store Store
	// Sources gives the sources in force; it is called at every tick, so
	// a live configuration applies at once. None: the poller idles.
	Sources func() []SourceSpec
	// Outbound turns a picked-up document into the outbound message to
	// queue, validated against the partner's profile as the API's are:
	// (*outbox.Queue).Outbound.
	Outbound func(outbox.Document) (postgres.NewOutbound, error)
	// Notify, when set, is called after each file queued (the local
	// dispatcher's wakeup: (*outbox.Queue).Notify).
	Notify func()
	// PartnerByReceiver finds the partner (AS2 ID) whose interchange ID
	// is an interchange's receiver, for routes that name no partner. Nil:
	// such files stay where they are, with a reason.
	PartnerByReceiver func(edi.Party) (string, bool)
	// MaxFiles is how many files one poll of a source takes at most;
	// default 100. The rest wait for the next poll.
	MaxFiles int
	// MaxSize is the largest file taken, in bytes; larger files stay
	// where they are, with a reason. Default 100 MiB.
	MaxSize int64
	// ClaimRetention is how long archived claims are kept (a file
	// version is not taken again while its claim is kept); default 30
	// days.
	ClaimRetention time.Duration
	// Tick is how often the poller looks for sources due; default 1 s.
	Tick time.Duration
	// Recheck is how long a refused file version (no route, no partner,
	// too large) is left alone before it is looked at again; its reason
	// is logged once. Default 1 min.
	Recheck time.Duration
	// Now is the clock; default time.Now.
	Now        func() time.Time
	Logger     *zap.Logger
	Registerer prometheus.Registerer
}

// Poller is the pickup poller, a leader.Worker. Its Run and Poll must not
// be called concurrently.
type Poller struct {
	o   Options
	log *zap.Logger
	m   metrics
	// state is per source name: what the last poll saw, the refusals
	// noted, when the source is due.
	state     map[string]*sourceState
	nextPurge time.Time
}

// NewPoller returns a Poller.
func NewPoller(o Options) (*Poller, error) {
	if o.Store == nil || o.Sources == nil || o.Outbound == nil || o.Logger == nil || o.Registerer == nil {
		return nil, errors.New("pickup: poller needs Store, Sources, Outbound, Logger and Registerer")
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = 100
	}
	if o.MaxSize <= 0 {
		o.MaxSize = 100 << 20
	}
	if o.ClaimRetention <= 0 {
		o.ClaimRetention = 30 * 24 * time.Hour
	}
	if o.Tick <= 0 {
		o.Tick = time.Second
	}
	if o.Recheck <= 0 {
		o.Recheck = time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	p := &Poller{o: o, log: o.Logger.Named("pickup"), state: map[string]*sourceState{}}
	if err := p.m.register(o.Registerer); err != nil {
		return nil, fmt.Errorf("pickup: %w", err)
	}
	return p, nil
}

// Run polls every source when it is due until ctx ends (nil) or a newer
// term refuses a write (an error wrapping hub.ErrStaleFence). ctx
// must carry a fence (leader.FenceFrom). A source that fails (down,
// refusing) is logged and counted, and tried again at its next poll; it
// does not stop the others. What a poll remembers (the stability of
// files) starts afresh with every term.
func (p *Poller) Run(ctx context.Context) error {
	f, ok := leader.FenceFrom(ctx)
	if !ok {
		return errors.New("pickup: no fence in the context (run it as a leader-gated worker)")
	}
	p.state = map[string]*sourceState{}
	defer p.m.reset()
	p.log.Info("pickup poller started", zap.Stringer("fence", f))
	return leader.Loop{Name: "pickup poll", Step: p.step, Interval: p.o.Tick, Logger: p.log}.Run(ctx)
}

// step polls the sources due, and purges old claims once an hour.
func (p *Poller) step(ctx context.Context, f hub.Fence) error {
	err := p.poll(ctx, f, false)
	if errors.Is(err, hub.ErrStaleFence) {
		return err
	}
	// Other failures were logged and counted per source: a source down
	// must not make the leader look stuck.
	if now := p.o.Now(); now.After(p.nextPurge) {
		if _, err := p.PurgeClaims(ctx, f); err != nil {
			return err
		}
		p.nextPurge = now.Add(time.Hour)
	}
	return nil
}

// Poll polls every source once, due or not, under the term f: it
// finishes the claims whose archive is still to do, lists the source, and
// takes the stable files (at most Options.MaxFiles). It returns an error
// wrapping hub.ErrStaleFence at once when the term is over, and
// otherwise the sources' failures joined, after polling them all.
func (p *Poller) Poll(ctx context.Context, f hub.Fence) error {
	return p.poll(ctx, f, true)
}

func (p *Poller) poll(ctx context.Context, f hub.Fence, all bool) error {
	specs := p.o.Sources()
	now := p.o.Now()
	var errs []error
	names := make(map[string]bool, len(specs))
	for _, s := range specs {
		names[s.Name] = true
		st := p.state[s.Name]
		if st == nil {
			st = newSourceState()
			p.state[s.Name] = st
		}
		if !all && now.Before(st.due) {
			continue
		}
		st.due = now.Add(cmp.Or(s.Poll, DefaultPoll))
		err := p.pollSource(ctx, f, s, st)
		if errors.Is(err, hub.ErrStaleFence) || ctx.Err() != nil {
			return err
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("source %s: %w", s.Name, err))
		}
	}
	for name := range p.state {
		if !names[name] { // a source removed from the configuration
			delete(p.state, name)
			p.m.forget(name)
		}
	}
	return errors.Join(errs...)
}

// PurgeClaims deletes the archived claims older than
// Options.ClaimRetention, in batches, under the term f, and returns how
// many it deleted.
func (p *Poller) PurgeClaims(ctx context.Context, f hub.Fence) (int64, error) {
	var total int64
	for {
		n, err := p.o.Store.PurgePickupClaims(ctx, f, p.o.ClaimRetention, 1000)
		total += n
		if err != nil || n < 1000 {
			return total, err
		}
	}
}
