package leader

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.uber.org/zap"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
)

// KubernetesOptions configure the Kubernetes backend.
type KubernetesOptions struct {
	// Leases reads, creates and updates the Lease. Its requests must time
	// out well below the renew deadline (rest.Config.Timeout).
	Leases coordinationv1client.LeasesGetter
	// WatchLeases watches the Lease; its client must not have a request
	// timeout shorter than a watch. Default: Leases.
	WatchLeases coordinationv1client.LeasesGetter
	// Namespace of the Lease. Required.
	Namespace string
	// Version, when set, is asked for the API server's version at start
	// (GET /version): edihub logs it and warns when resourceVersions are
	// not guaranteed comparable there (before Kubernetes 1.35).
	Version discovery.ServerVersionInterface
}

// ErrUnusableToken is returned by Elector.Run when the API server answered
// our acquiring write with a resourceVersion that cannot be a fencing token
// (not a positive decimal integer, or above 2^63-1). The Lease has been
// released. The process must not lead with this API server: it is not
// backed by etcd as Kubernetes' is, or its versions are not comparable.
var ErrUnusableToken = errors.New("the API server's resourceVersion cannot serve as a fencing token")

// comparableSince is the first Kubernetes version that guarantees
// resourceVersions of one resource compare as integers (KEP-5504).
var comparableSince = utilversion.MajorMinor(1, 35)

// watchTimeout makes the API server end each watch after a while, so a
// watch that silently died is replaced.
const watchTimeout = 5 * time.Minute

// NewKubernetes returns an Elector on a coordination.k8s.io/v1 Lease that
// looks exactly like client-go's LeaseLock (holderIdentity, renewTime,
// leaseTransitions...). The fencing token of a term is the Lease's
// resourceVersion returned by the write that acquired it: resource versions
// of one resource type are comparable integers (KEP-5504) that only grow,
// also across a delete and re-create of the Lease.
//
// Followers watch the Lease: they take a released Lease at once, and an
// expired one exactly one lease duration after they saw it last change (by
// their monotonic clock), polling every retry period when the watch is
// broken.
func NewKubernetes(k KubernetesOptions, o Options) (*Elector, error) {
	if k.Leases == nil || k.Namespace == "" {
		return nil, errors.New("leader: Kubernetes backend needs a Leases client and a namespace")
	}
	if k.WatchLeases == nil {
		k.WatchLeases = k.Leases
	}
	if err := o.defaults(); err != nil {
		return nil, err
	}
	l := &kubeLease{
		leases:   k.Leases.Leases(k.Namespace),
		watches:  k.WatchLeases.Leases(k.Namespace),
		name:     o.LeaseName,
		identity: o.Identity,
		duration: o.LeaseDuration,
		retry:    o.RetryPeriod,
		version:  k.Version,
		log:      o.Logger.Named("leader").With(zap.String("identity", o.Identity), zap.String("lease", o.LeaseName), zap.String("backend", "kubernetes")),
	}
	return newElector(o, l)
}

type kubeLease struct {
	leases, watches    coordinationv1client.LeaseInterface
	name, identity     string
	duration, retry    time.Duration
	version            discovery.ServerVersionInterface
	log                *zap.Logger
	now                func() time.Time // nil: time.Now
	mu                 sync.Mutex
	observedRV         string    // newest resourceVersion seen
	observedHolder     string    // its holder
	observedTime       time.Time // when we first saw it (monotonic clock)
	ours               *coordinationv1.Lease
	oursAcquireTimeRFC string // AcquireTime of our term, to recognise it
}

func (l *kubeLease) kind() string { return "kubernetes" }

func (l *kubeLease) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}

// observe records a version of the Lease and returns when it was first
// seen. older is true when a newer version had been seen already and
// lease comes from a watch, whose events may lag.
//
// quorum marks a lease read from etcd itself (a Get, or the reply to our
// write): it is the truth at the moment it was served. before is the
// newest version this replica had seen when it sent that request
// (knownRV). When the lease's version is below before, etcd went back in
// time (restored from a snapshot, or the API server now talks to another
// etcd): the lease is taken as it is now, as if first seen now, and the
// regression is logged as an error with the remedy, so that election
// resumes instead of ignoring every read. A version below one seen only
// while the request was in flight is no regression: a watch event of a
// later write overtook the reply, and the reply is older.
func (l *kubeLease) observe(lease *coordinationv1.Lease, quorum bool, before string) (seen time.Time, older bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	rv := lease.ResourceVersion
	if l.observedRV != "" {
		c, err := resourceversion.CompareResourceVersion(rv, l.observedRV)
		if err == nil && c < 0 {
			if !quorum || !below(rv, before) {
				return l.observedTime, true
			}
			l.log.Error("the Lease's resourceVersion went backwards: etcd was restored from a snapshot or the API server uses another etcd; taking the Lease as it is now",
				zap.String("resource_version", rv), zap.String("before", l.observedRV), zap.String("holder", holderOf(lease)),
				zap.String("remedy", "election goes on with the restored Lease. Terms open only with a token above leader_fence.token in PostgreSQL: "+
					"if 'term refused' errors follow, wait until the cluster's resourceVersions pass the fence or reset the fence "+
					"(docs/leadership.md, \"Recovering after an etcd restore\"). Restore etcd with etcdutl snapshot restore --bump-revision --mark-compacted so that versions keep increasing"))
		}
		if err == nil && c == 0 {
			return l.observedTime, false
		}
	}
	l.observedRV = rv
	l.observedHolder = holderOf(lease)
	l.observedTime = l.clock()
	return l.observedTime, false
}

// knownRV is the newest resourceVersion of the Lease seen so far; a
// request's before (see observe).
func (l *kubeLease) knownRV() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.observedRV
}

// below reports whether resourceVersion rv is below before ("" is below
// nothing).
func below(rv, before string) bool {
	if before == "" {
		return false
	}
	c, err := resourceversion.CompareResourceVersion(rv, before)
	return err == nil && c < 0
}

func holderOf(lease *coordinationv1.Lease) string {
	if lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// setRecord writes rec's fields into spec and leaves the others
// (spec.strategy and spec.preferredHolder of coordinated leader election,
// and any field added later) as they were: edihub must not drop what
// another party (the coordinated leader election controller, an operator
// preparing a rolling update) wrote into the Lease.
func setRecord(spec *coordinationv1.LeaseSpec, rec *rl.LeaderElectionRecord) {
	from := rl.LeaderElectionRecordToLeaseSpec(rec)
	spec.HolderIdentity = from.HolderIdentity
	spec.LeaseDurationSeconds = from.LeaseDurationSeconds
	spec.AcquireTime = from.AcquireTime
	spec.RenewTime = from.RenewTime
	spec.LeaseTransitions = from.LeaseTransitions
}

// tokenOf turns the resourceVersion of our acquiring write into a token.
func tokenOf(rv string) (int64, error) {
	if _, err := resourceversion.CompareResourceVersion(rv, rv); err != nil {
		return 0, fmt.Errorf("fencing token: %w", err)
	}
	t, err := strconv.ParseInt(rv, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fencing token: resourceVersion %q does not fit in 63 bits: %w", rv, err)
	}
	return t, nil
}

func (l *kubeLease) record(acquire time.Time, transitions int) rl.LeaderElectionRecord {
	now := metav1.NewTime(l.clock())
	return rl.LeaderElectionRecord{
		HolderIdentity:       l.identity,
		LeaseDurationSeconds: int(l.duration.Round(time.Second) / time.Second),
		AcquireTime:          metav1.NewTime(acquire),
		RenewTime:            now,
		LeaderTransitions:    transitions,
	}
}

func (l *kubeLease) tryAcquire(ctx context.Context) (attempt, error) {
	l.mu.Lock()
	l.ours = nil // a new term needs a new write
	l.mu.Unlock()

	before := l.knownRV()
	lease, err := l.leases.Get(ctx, l.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		rec := l.record(l.clock(), 0)
		created, err := l.leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: l.name},
			Spec:       rl.LeaderElectionRecordToLeaseSpec(&rec),
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return attempt{}, nil // someone was faster: look again
		}
		if err != nil {
			return attempt{}, fmt.Errorf("create lease: %w", err)
		}
		return l.won(ctx, created, before)
	case err != nil:
		return attempt{}, fmt.Errorf("get lease: %w", err)
	}

	seen, _ := l.observe(lease, true, before)
	rec := rl.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	if rec.HolderIdentity != "" && rec.HolderIdentity != l.identity {
		expires := seen.Add(time.Duration(rec.LeaseDurationSeconds) * time.Second)
		if left := expires.Sub(l.clock()); left > 0 {
			return attempt{holder: rec.HolderIdentity, retryIn: left}, nil
		}
	}
	transitions := rec.LeaderTransitions
	if rec.HolderIdentity != l.identity {
		transitions++
	}
	next := l.record(l.clock(), transitions)
	lease = lease.DeepCopy()
	setRecord(&lease.Spec, &next)
	updated, err := l.leases.Update(ctx, lease, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		return attempt{}, nil // someone else wrote first: look again
	}
	if err != nil {
		return attempt{}, fmt.Errorf("update lease: %w", err)
	}
	return l.won(ctx, updated, before)
}

// won records the Lease our acquiring write returned; its resourceVersion
// is the term's token. When it cannot be one, won releases the Lease at
// once and returns an error wrapping ErrUnusableToken and errFatal.
func (l *kubeLease) won(ctx context.Context, lease *coordinationv1.Lease, before string) (attempt, error) {
	l.observe(lease, true, before)
	l.mu.Lock()
	l.ours = lease
	l.oursAcquireTimeRFC = acquireTimeOf(lease)
	l.mu.Unlock()
	token, err := tokenOf(lease.ResourceVersion)
	if err != nil {
		rerr := l.release(context.WithoutCancel(ctx), 0)
		if rerr != nil {
			rerr = fmt.Errorf("and the Lease could not be released (followers wait for it to expire): %w", rerr)
		} else {
			rerr = errors.New("the Lease was released")
		}
		return attempt{}, fmt.Errorf("%w: %w: the Lease write returned resourceVersion %q; %v. "+
			"edihub needs an API server backed by etcd whose resourceVersions are comparable integers (Kubernetes 1.35 and later guarantee it, KEP-5504; docs/leadership.md), "+
			"or EDIHUB_LEADER_BACKEND=postgres: %w", errFatal, ErrUnusableToken, lease.ResourceVersion, rerr, err)
	}
	return attempt{acquired: true, token: token, holder: l.identity, holderToken: token}, nil
}

// preflight asks the API server's version and logs it; before Kubernetes
// 1.35 it warns that resourceVersions are not guaranteed comparable.
func (l *kubeLease) preflight(context.Context) {
	if l.version == nil {
		return
	}
	info, err := l.version.ServerVersion()
	if err != nil {
		l.log.Warn("cannot read the API server's version; going on", zap.Error(err))
		return
	}
	v, err := utilversion.ParseGeneric(info.GitVersion)
	switch {
	case err != nil:
		l.log.Warn("the API server's version is not a Kubernetes version; its resourceVersions may not be comparable fencing tokens",
			zap.String("git_version", info.GitVersion), zap.Error(err))
	case v.LessThan(comparableSince):
		l.log.Warn("the API server is older than Kubernetes 1.35: resourceVersions are comparable fencing tokens only because it stores Leases in etcd (they are etcd revisions); "+
			"an API server not backed by etcd may order them otherwise (docs/leadership.md, \"Why the token is the resourceVersion\")",
			zap.String("git_version", info.GitVersion))
	default:
		l.log.Info("API server", zap.String("git_version", info.GitVersion))
	}
}

func acquireTimeOf(lease *coordinationv1.Lease) string {
	if lease.Spec.AcquireTime == nil {
		return ""
	}
	return lease.Spec.AcquireTime.UTC().Format(time.RFC3339Nano)
}

// stillOurs reports whether lease is still our term's Lease.
func (l *kubeLease) stillOurs(lease *coordinationv1.Lease) bool {
	return holderOf(lease) == l.identity && acquireTimeOf(lease) == l.oursAcquireTimeRFC
}

// write updates our term's Lease with spec built by fn; on a conflict it
// reads the Lease again and retries once if the term is still ours.
func (l *kubeLease) write(ctx context.Context, fn func(rec *rl.LeaderElectionRecord)) error {
	l.mu.Lock()
	cur := l.ours
	l.mu.Unlock()
	if cur == nil {
		return fmt.Errorf("%w: no term", errLost)
	}
	for try := 0; ; try++ {
		lease := cur.DeepCopy()
		rec := rl.LeaseSpecToLeaderElectionRecord(&lease.Spec)
		fn(rec)
		setRecord(&lease.Spec, rec)
		before := l.knownRV()
		updated, err := l.leases.Update(ctx, lease, metav1.UpdateOptions{})
		switch {
		case err == nil:
			l.observe(updated, true, before)
			l.mu.Lock()
			l.ours = updated
			l.mu.Unlock()
			return nil
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: the Lease was deleted", errLost)
		case !apierrors.IsConflict(err) || try > 0:
			return err
		}
		before = l.knownRV()
		fresh, err := l.leases.Get(ctx, l.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: the Lease was deleted", errLost)
		}
		if err != nil {
			return err
		}
		l.observe(fresh, true, before)
		if !l.stillOurs(fresh) {
			return fmt.Errorf("%w: now held by %q", errLost, holderOf(fresh))
		}
		cur = fresh
	}
}

func (l *kubeLease) renew(ctx context.Context, _ int64) error {
	err := l.write(ctx, func(rec *rl.LeaderElectionRecord) {
		rec.RenewTime = metav1.NewTime(l.clock())
		rec.LeaseDurationSeconds = int(l.duration.Round(time.Second) / time.Second)
	})
	if err != nil && !errors.Is(err, errLost) {
		return fmt.Errorf("renew lease: %w", err)
	}
	return err
}

// release writes what client-go's ReleaseOnCancel writes: no holder, a
// lease duration of one second, so client-go followers take it too.
func (l *kubeLease) release(ctx context.Context, _ int64) error {
	err := l.write(ctx, func(rec *rl.LeaderElectionRecord) {
		now := metav1.NewTime(l.clock())
		rec.HolderIdentity = ""
		rec.LeaseDurationSeconds = 1
		rec.AcquireTime, rec.RenewTime = now, now
	})
	l.mu.Lock()
	l.ours = nil
	l.mu.Unlock()
	if errors.Is(err, errLost) {
		return nil // not ours any more: nothing to give up
	}
	if err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	return nil
}

// watch follows the Lease and calls changed when it is released, deleted
// or changes hands; renewals only refresh the observed time.
func (l *kubeLease) watch(ctx context.Context, changed func()) error {
	timeout := int64(watchTimeout / time.Second)
	for ctx.Err() == nil {
		w, err := l.watches.Watch(ctx, metav1.ListOptions{
			FieldSelector:  fields.OneTermEqualSelector("metadata.name", l.name).String(),
			TimeoutSeconds: &timeout,
		})
		if err != nil {
			if !Sleep(ctx, l.retry) {
				return nil
			}
			continue
		}
		l.follow(ctx, w, changed)
		w.Stop()
	}
	return nil
}

func (l *kubeLease) follow(ctx context.Context, w watch.Interface, changed func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				lease, ok := ev.Object.(*coordinationv1.Lease)
				if !ok {
					continue
				}
				l.mu.Lock()
				before := l.observedHolder
				l.mu.Unlock()
				_, older := l.observe(lease, false, "")
				if h := holderOf(lease); older || h == "" || h != before {
					// older: etcd may have gone back in time; a Get
					// (a quorum read) will tell.
					changed()
				}
			case watch.Deleted:
				changed()
			case watch.Error:
				return
			}
		}
	}
}
