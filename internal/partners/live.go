// Package partners keeps the trading partner profiles a replica serves in
// step with PostgreSQL, and changes them: partners live in the database
// (internal/postgres), every replica applies a change within a second or
// two (LISTEN/NOTIFY, with a periodic re-read as the safety net), and each
// change is versioned and recorded with who made it and what it changed.
//
// Live is a replica's view: a config.Source whose Current snapshot is
// replaced whole on each change, so that a message in flight keeps the
// profile it started with. Service makes changes for the API and the CLI:
// a partners document applied as one transaction (a broken document
// changes nothing), single creates, updates with optimistic concurrency on
// the version, deletes, history and restores.
//
// The station (the hub's own AS2 identity and keys) stays in the
// configuration file, with every secret: Live re-reads that file when it
// changes on disk, without a restart. Partners listed in the file are
// imported into an empty database once, when the first replica starts;
// after that the database is their home.
package partners

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
)

// LiveStore is what Live reads; *postgres.Store implements it.
type LiveStore interface {
	Partners(ctx context.Context) (postgres.PartnerSet, error)
	PartnerRevision(ctx context.Context) (int64, error)
	ImportPartners(ctx context.Context, actor string, changes []postgres.PartnerChange) (int64, error)
	ListenPartners(ctx context.Context, wake func()) error
	RecordServedRevision(ctx context.Context, identity string, revision int64, appliedAt time.Time) error
}

// Defaults of LiveOptions.
const (
	DefaultResync     = 30 * time.Second
	DefaultFileCheck  = 10 * time.Second
	DefaultListenWait = 2 * time.Second
)

// StoppedAfter is how long a replica may go without recording the
// revision it serves before the lists of replicas (the API's, the
// console's, edihub partners get) leave it out as stopped: Live records it
// at every resync, so three missed DefaultResync intervals. A replica
// killed or restarted (a new identity) drops out of the lists within it,
// and is never counted as behind.
const StoppedAfter = 3 * DefaultResync

// LiveOptions configure NewLive.
type LiveOptions struct {
	Store LiveStore
	// Path is the configuration file: the station, its keys and secrets,
	// and the partners to import into an empty database.
	Path string
	// Base, when set, is the file at Path loaded already, with
	// SecretsDir.
	Base *config.File
	// SecretsDir is the directory the secrets stored partners name are
	// read from (config.Options.SecretsDir); empty: none.
	SecretsDir string
	Logger     *zap.Logger
	Registerer prometheus.Registerer
	// Identity names this replica in partner_replicas.
	Identity string
	// Resync is how often the revision is compared with the database's,
	// in case a notification was lost (DefaultResync).
	Resync time.Duration
	// FileCheck is how often the configuration file and the files it
	// names are checked for changes (DefaultFileCheck).
	FileCheck time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Live is the partner set a replica serves: a config.Source. Build it with
// NewLive and Run it for as long as the replica serves.
type Live struct {
	o   LiveOptions
	log *zap.Logger
	cur atomic.Pointer[config.File]

	mu sync.Mutex // serialises reloads
	// change is signalled when a scheduled station key starts to sign;
	// Run takes the stations at that time again.
	change *time.Timer
	base   *config.File
	// appliedAt is when the revision served was applied.
	appliedAt time.Time
	files     map[string]fileStamp
	built     map[string]builtPartner

	revision, served, failed prometheus.Gauge
}

// builtPartner is a stored profile as this replica built it; kept so that
// an unchanged partner keeps its *config.Partner (and the connections made
// for it) across reloads, and a change that does not build here leaves the
// version before it in service.
type builtPartner struct {
	version int64
	spec    string
	partner *config.Partner
	// files are the secret files it was built with (or failed to be):
	// watched, so that a rotated password or a Secret mounted late is
	// taken without a restart.
	files []string
}

// NewLive loads the configuration file, imports its partners when the
// database has never held any, and reads the stored partners: the first
// snapshot. A partner that cannot be built on this replica (a secret file
// missing) is logged and left out; the others are served.
func NewLive(ctx context.Context, o LiveOptions) (*Live, error) {
	if o.Store == nil || o.Logger == nil || o.Registerer == nil || o.Path == "" {
		return nil, errors.New("partners: Live needs Store, Path, Logger and Registerer")
	}
	if o.Resync <= 0 {
		o.Resync = DefaultResync
	}
	if o.FileCheck <= 0 {
		o.FileCheck = DefaultFileCheck
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Live{o: o, log: o.Logger.Named("partners"), built: map[string]builtPartner{},
		revision: prometheus.NewGauge(prometheus.GaugeOpts{Name: "edihub_partners_revision", Help: "Revision of the partner set this replica serves (the last change applied)."}),
		served:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "edihub_partners_served", Help: "Partners this replica serves."}),
		failed: prometheus.NewGauge(prometheus.GaugeOpts{Name: "edihub_partners_load_errors",
			Help: "Stored partner profiles this replica cannot build (a secret file missing here, say): each is served at its last version that built, or not at all."}),
	}
	for _, c := range []prometheus.Collector{l.revision, l.served, l.failed} {
		if err := o.Registerer.Register(c); err != nil {
			return nil, fmt.Errorf("partners metrics: %w", err)
		}
	}
	base := o.Base
	var files map[string]fileStamp
	if base == nil {
		var err error
		if base, files, err = l.loadFile(); err != nil {
			return nil, err
		}
	} else {
		files = stampFiles(base.Files())
	}
	l.base, l.files = base, files
	if err := l.importFile(ctx, base); err != nil {
		return nil, err
	}
	if err := l.Reload(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// Current returns the configuration served now: the station of the file
// and the stored partners. The snapshot never changes; a later call may
// return a newer one.
func (l *Live) Current() *config.File { return l.cur.Load() }

// loadFile loads the configuration file and notes the modification times
// of the files it depends on.
func (l *Live) loadFile() (*config.File, map[string]fileStamp, error) {
	f, err := config.Load(l.o.Path, config.Options{Now: l.o.Now, SecretsDir: l.o.SecretsDir})
	if err != nil {
		return nil, nil, err
	}
	l.logWarnings(f)
	return f, stampFiles(f.Files()), nil
}

func (l *Live) logWarnings(f *config.File) {
	for _, w := range f.Warnings {
		l.log.Warn("configuration", zap.String("warning", w))
	}
}

// importFile stores the file's partners when the database has never held
// a partner: the bootstrap. Later, partners in the file are not served.
func (l *Live) importFile(ctx context.Context, base *config.File) error {
	if len(base.Partners) == 0 {
		return nil
	}
	specs, err := base.Specs(config.PartnerDocOptions{Now: l.o.Now})
	if err != nil {
		// A list that cannot be stored (a secret given as a path) stops
		// the start only when it would be imported.
		if rev, rerr := l.o.Store.PartnerRevision(ctx); rerr == nil && rev > 0 {
			l.log.Warn("partners listed in the configuration file are not served and cannot be imported: the database holds the partners",
				zap.String("path", base.Path), zap.Error(err))
			return nil
		}
		return err
	}
	changes := make([]postgres.PartnerChange, 0, len(specs))
	for _, spec := range specs {
		text, err := config.EncodeSpec(spec)
		if err != nil {
			return err
		}
		changes = append(changes, postgres.PartnerChange{AS2ID: spec.AS2ID, Op: postgres.PartnerImport, Spec: &text, Expect: 0,
			Diff: Diff(nil, &spec)})
	}
	rev, err := l.o.Store.ImportPartners(ctx, "import: "+base.Path, changes)
	switch {
	case errors.Is(err, postgres.ErrPartnersStored):
		if differ := l.differFromStored(ctx, changes); differ > 0 {
			l.log.Warn("partners listed in the configuration file differ from the database's and are not served: the database holds the partners; change them with edihub partners apply or the API",
				zap.String("path", base.Path), zap.Int("listed", len(specs)), zap.Int("differ", differ))
		}
		return nil
	case err != nil:
		return err
	}
	l.log.Info("partners imported from the configuration file into the database", zap.String("path", base.Path), zap.Int("partners", len(specs)), zap.Int64("revision", rev))
	return nil
}

// differFromStored counts the file's partners (as import changes) that the
// database does not hold as they are: a file left as it was imported says
// nothing.
func (l *Live) differFromStored(ctx context.Context, changes []postgres.PartnerChange) int {
	set, err := l.o.Store.Partners(ctx)
	if err != nil {
		return len(changes)
	}
	stored := make(map[string]string, len(set.Partners))
	for _, sp := range set.Partners {
		stored[sp.AS2ID] = sp.Spec
	}
	n := 0
	for _, c := range changes {
		if spec, ok := stored[c.AS2ID]; !ok || spec != *c.Spec {
			n++
		}
	}
	return n
}

// Reload reads the stored partners and serves them, unless the revision
// is the one served already.
func (l *Live) Reload(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reload(ctx, false)
}

func (l *Live) reload(ctx context.Context, force bool) error {
	start := time.Now()
	set, err := l.o.Store.Partners(ctx)
	if err != nil {
		return err
	}
	cur := l.cur.Load()
	if !force && cur != nil && cur.Revision == set.Revision && !usesChanged(cur, set.Uses) {
		// Seen: GET /partners lists the replicas seen lately.
		l.record(ctx, cur.Revision)
		return nil
	}
	now := l.o.Now()
	partners := make([]config.Partner, 0, len(set.Partners))
	built := make(map[string]builtPartner, len(set.Partners))
	failed := 0
	watch := l.base.Files()
	for _, sp := range set.Partners {
		b, err := l.build(sp, force, now)
		watch = append(watch, b.files...)
		if err != nil {
			failed++
			old, ok := l.built[sp.AS2ID]
			if ok {
				// A version before that names a station the file no
				// longer has must not go out as another station.
				_, ok = l.base.StationByID(old.partner.Station)
			}
			fields := []zap.Field{zap.String("partner", sp.AS2ID), zap.Int64("version", sp.Version), zap.Error(err)}
			if !ok {
				l.log.Error("stored partner profile cannot be served on this replica; the partner is not served here", fields...)
				continue
			}
			l.log.Error("stored partner profile cannot be served on this replica; it keeps the version before", append(fields, zap.Int64("serving_version", old.version))...)
			b = old
		}
		built[sp.AS2ID] = b
		pa := *b.partner
		pa.CertificateUses = set.Uses[sp.AS2ID]
		partners = append(partners, pa)
	}
	l.built = built
	l.files = stampFiles(watch)
	next := l.base.At(now).WithPartners(partners, set.Revision)
	l.cur.Store(next)
	l.schedule(next.NextChange(now))
	l.revision.Set(float64(set.Revision))
	l.served.Set(float64(len(partners)))
	l.failed.Set(float64(failed))
	if cur == nil || cur.Revision != set.Revision || force {
		l.log.Info("partners applied", zap.Int64("revision", set.Revision), zap.Int("partners", len(partners)), zap.Int("errors", failed), zap.Duration("took", time.Since(start)))
	}
	l.appliedAt = now
	l.record(ctx, set.Revision)
	return nil
}

// record notes in the database that this replica serves revision (since
// appliedAt) and is alive.
func (l *Live) record(ctx context.Context, revision int64) {
	if err := l.o.Store.RecordServedRevision(ctx, l.o.Identity, revision, l.appliedAt); err != nil && ctx.Err() == nil {
		l.log.Warn("record served partner revision", zap.Error(err))
	}
}

// schedule arms the timer for the next scheduled station key (none when
// at is zero).
func (l *Live) schedule(at time.Time) {
	if l.change == nil {
		l.change = time.NewTimer(time.Hour)
		l.change.Stop()
	}
	l.change.Stop()
	if !at.IsZero() {
		l.change.Reset(time.Until(at) + 10*time.Millisecond)
	}
}

// build makes the profile of a stored partner, reusing the one built
// before when neither the spec nor the station changed.
func (l *Live) build(sp postgres.StoredPartner, force bool, now time.Time) (builtPartner, error) {
	if old, ok := l.built[sp.AS2ID]; ok && !force && old.version == sp.Version && old.spec == sp.Spec {
		return old, nil
	}
	pa, warnings, err := buildStored(l.base, sp, now)
	if err != nil {
		return builtPartner{files: pa.Files()}, err
	}
	for _, w := range warnings {
		l.log.Warn("partner profile", zap.String("warning", w))
	}
	return builtPartner{version: sp.Version, spec: sp.Spec, partner: &pa, files: pa.Files()}, nil
}

// buildStored makes the profile of a stored partner for base's stations.
func buildStored(base *config.File, sp postgres.StoredPartner, now time.Time) (config.Partner, []string, error) {
	name := fmt.Sprintf("partner %q version %d", sp.AS2ID, sp.Version)
	spec, err := config.DecodeSpec(name, sp.Spec)
	if err != nil {
		return config.Partner{}, nil, err
	}
	return config.BuildPartner(base, spec, name, now)
}

// usesChanged reports whether the recorded certificate uses of the
// partners cur serves differ from those it was built with.
func usesChanged(cur *config.File, uses map[string]map[string]time.Time) bool {
	for i := range cur.Partners {
		p := &cur.Partners[i]
		got := uses[p.AS2ID]
		if len(p.CertificateUses) != len(got) {
			return true
		}
		for fp := range got {
			if _, ok := p.CertificateUses[fp]; !ok {
				return true
			}
		}
	}
	return false
}

// Run keeps the snapshot current until ctx ends: on every notification of
// a change, every Resync (a lost notification), and when the
// configuration file or a file it names changes (FileCheck). A lost
// database connection is retried; Run returns nil when ctx ends.
func (l *Live) Run(ctx context.Context) error {
	wake, wait := postgres.Follow(ctx, l.o.Store.ListenPartners, DefaultListenWait, func(err error) {
		l.log.Warn("listen for partner changes; retrying (changes are still read every resync)", zap.Error(err))
	})
	defer wait()
	resync := time.NewTicker(l.o.Resync)
	defer resync.Stop()
	files := time.NewTicker(l.o.FileCheck)
	defer files.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			l.tryReload(ctx, false)
		case <-resync.C:
			l.tryReload(ctx, false)
		case <-files.C:
			l.checkFiles(ctx)
		case <-l.change.C:
			l.log.Info("a scheduled station key starts to sign now")
			l.tryReload(ctx, true)
		}
	}
}

func (l *Live) tryReload(ctx context.Context, force bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.reload(ctx, force); err != nil && ctx.Err() == nil {
		l.log.Warn("read partners; serving the set read before", zap.Error(err))
	}
}

// checkFiles reloads the configuration file, and every partner against
// it, when it or a file it names (the station's keys), or a secret file of
// a stored partner, changed on disk. A file that no longer loads is logged and the one
// loaded before stays in service.
func (l *Live) checkFiles(ctx context.Context) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !changed(l.files) {
		return
	}
	base, files, err := l.loadFile()
	if err != nil {
		l.log.Error("configuration file changed but does not load; the station loaded before stays in service", zap.Error(err))
		l.files = stampFiles(keys(l.files)) // do not log again until it changes again
		return
	}
	l.base, l.files = base, files
	l.log.Info("configuration file changed: station and secrets reloaded", zap.String("path", base.Path), zap.String("station", base.Station.AS2ID))
	if err := l.reload(ctx, true); err != nil && ctx.Err() == nil {
		l.log.Warn("read partners; serving the set read before", zap.Error(err))
	}
}

// fileStamp is what tells that a file changed: its modification time and
// size after following links (a Kubernetes Secret update swaps a link).
type fileStamp struct {
	mod  time.Time
	size int64
	ok   bool
}

func stampFiles(paths []string) map[string]fileStamp {
	out := make(map[string]fileStamp, len(paths))
	for _, p := range paths {
		out[p] = stamp(p)
	}
	return out
}

func stamp(path string) fileStamp {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size(), ok: true}
}

func changed(files map[string]fileStamp) bool {
	for p, s := range files {
		if stamp(p) != s {
			return true
		}
	}
	return false
}

func keys(m map[string]fileStamp) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Snapshot is the configuration a one-shot command (edihub send, report)
// works with: base's station and the stored partners, or base's own
// partners when the database has never held any (before the first replica
// imported them). A stored partner that does not build here is an error.
func Snapshot(ctx context.Context, store interface {
	Partners(ctx context.Context) (postgres.PartnerSet, error)
}, base *config.File, now time.Time) (*config.File, error) {
	set, err := store.Partners(ctx)
	if err != nil {
		return nil, err
	}
	if set.Revision == 0 {
		return base, nil
	}
	list := make([]config.Partner, 0, len(set.Partners))
	for _, sp := range set.Partners {
		pa, _, err := buildStored(base, sp, now)
		if err != nil {
			return nil, err
		}
		pa.CertificateUses = set.Uses[sp.AS2ID]
		list = append(list, pa)
	}
	return base.WithPartners(list, set.Revision), nil
}
