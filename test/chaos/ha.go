package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/testenv/pgserver"
	"github.com/edihub/edihub/test/netproxy"
)

// haDB is PostgreSQL as an HA pair: a primary and a streaming standby
// (synchronous unless async), the standby streaming through a proxy of its
// own (the replication link, which a run cuts to make the standby lag), and
// one address the replicas use (front), repointed to the standby when it is
// promoted, as a Kubernetes Service in front of CloudNativePG's or
// Patroni's primary is. With multiHost the replicas instead use a libpq
// multi-host URL of two node addresses (nodes) with
// target_session_attrs=read-write, as with Patroni without a Service: each
// node address stays with its slot, a failover moves the primary to the
// other node, and the standby rebuilt afterwards takes the dead primary's
// node.
type haDB struct {
	dir       string
	async     bool
	multiHost bool
	logf      func(string, ...any)
	// bg runs the standby rebuilt after a failover; Close cancels and
	// waits for it before it stops the servers.
	bg       sync.WaitGroup
	bgCtx    context.Context
	bgCancel context.CancelFunc

	mu      sync.Mutex
	primary *pgserver.Server
	standby *pgserver.Server
	repl    *netproxy.Proxy // standby → primary
	front   *netproxy.Proxy // replicas → primary; nil with multiHost
	// nodes are the two node addresses of multiHost; the primary is on
	// nodes[primaryNode], the standby on the other.
	nodes       [2]*netproxy.Proxy
	primaryNode int
	failures    int // failovers so far, naming the data directories
}

// startHA starts the primary, its standby and the front address.
func startHA(ctx context.Context, dir string, async, multiHost bool, logf func(string, ...any)) (_ *haDB, err error) {
	h := &haDB{dir: dir, async: async, multiHost: multiHost, logf: logf}
	h.bgCtx, h.bgCancel = context.WithCancel(context.Background())
	// The postgres user must walk into it (when running as root).
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	h.primary, err = pgserver.New(pgserver.Options{Dir: filepath.Join(dir, "pg-0")})
	if err != nil {
		return nil, err
	}
	if err := h.primary.Start(ctx); err != nil {
		return nil, err
	}
	front := &h.front
	if multiHost {
		front = &h.nodes[0]
	}
	if *front, err = netproxy.Start(addr(h.primary)); err != nil {
		return nil, err
	}
	if err := h.addStandby(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

func addr(s *pgserver.Server) string { return "127.0.0.1:" + strconv.Itoa(s.Port()) }

// URL is the database URL the replicas use: the front address, or with
// multiHost both node addresses and target_session_attrs=read-write.
func (h *haDB) URL() string {
	if h.multiHost {
		return "postgres://postgres@" + h.nodes[0].Addr() + "," + h.nodes[1].Addr() + "/postgres?sslmode=disable&target_session_attrs=read-write"
	}
	return "postgres://postgres@" + h.front.Addr() + "/postgres?sslmode=disable"
}

// addStandby makes a standby of the current primary, starts it, waits
// until it streams and, unless async, makes it synchronous.
func (h *haDB) addStandby(ctx context.Context) error {
	h.mu.Lock()
	primary := h.primary
	n := h.failures + 1
	h.mu.Unlock()
	repl, err := netproxy.Start(addr(primary))
	if err != nil {
		return err
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%s user=postgres application_name=standby", portOf(repl.Addr()))
	sb, err := pgserver.NewStandby(ctx, primary, pgserver.Options{
		Dir:      filepath.Join(h.dir, "pg-"+strconv.Itoa(n)),
		Settings: map[string]string{"primary_conninfo": conninfo},
	})
	if err == nil {
		err = sb.Start(ctx)
	}
	if err != nil {
		repl.Close()
		return err
	}
	if h.multiHost {
		// The standby takes the node the primary is not on: at the start
		// the second node, after a failover the dead primary's.
		if err := h.placeStandby(sb); err != nil {
			_ = sb.Stop()
			repl.Close()
			return err
		}
	}
	h.mu.Lock()
	h.standby, h.repl = sb, repl
	h.mu.Unlock()
	mode := "sync"
	if h.async {
		mode = "async"
	}
	if err := setReplication(ctx, primary, mode); err != nil {
		return err
	}
	h.logf("PostgreSQL: primary on %s, %s standby on %s", addr(primary), mode, addr(sb))
	return nil
}

// placeStandby points the standby's node address (the one the primary is
// not on) at sb, dropping connections still held through it.
func (h *haDB) placeStandby(sb *pgserver.Server) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 1 - h.primaryNode
	if h.nodes[n] == nil {
		p, err := netproxy.Start(addr(sb))
		if err != nil {
			return err
		}
		h.nodes[n] = p
		return nil
	}
	h.nodes[n].SetTarget(addr(sb))
	h.nodes[n].Reset()
	return nil
}

func portOf(hostport string) string {
	for i := len(hostport) - 1; i >= 0; i-- {
		if hostport[i] == ':' {
			return hostport[i+1:]
		}
	}
	return hostport
}

// setReplication sets synchronous_standby_names on primary for mode (sync:
// any one standby; async: none) and waits until pg_stat_replication shows
// one streaming standby in that mode.
func setReplication(ctx context.Context, primary *pgserver.Server, mode string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := pgx.Connect(ctx, primary.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	names := "''"
	if mode == "sync" {
		names = "'*'"
	}
	for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = " + names, "SELECT pg_reload_conf()"} {
		if _, err := c.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	for {
		var n int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1`, mode).Scan(&n)
		if err == nil && n == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %s standby streaming (last check: %v): %w", mode, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CutReplication blackholes the standby's link to the primary: a lagging
// standby. A synchronous primary's commits then wait; an asynchronous one
// commits what the standby will never have.
func (h *haDB) CutReplication() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.repl.Cut()
}

// Failover kills the primary (SIGKILL to every process of it), promotes
// the standby and repoints the front address to it; it returns when the
// new primary accepts writes. A new standby of it is added afterwards in
// the background (done is closed then), so a later failover has one.
func (h *haDB) Failover(ctx context.Context) (promoted time.Time, done <-chan error, err error) {
	h.mu.Lock()
	old, sb, repl := h.primary, h.standby, h.repl
	h.mu.Unlock()
	if sb == nil {
		return time.Time{}, nil, errors.New("no standby to promote")
	}
	if err := old.Kill(); err != nil {
		return time.Time{}, nil, err
	}
	repl.Close()
	if err := sb.Promote(ctx); err != nil {
		return time.Time{}, nil, err
	}
	promoted = time.Now()
	h.mu.Lock()
	if h.multiHost {
		// The clients find the new primary on the other node themselves
		// (target_session_attrs=read-write); the dead one's connections
		// are dropped.
		h.nodes[h.primaryNode].Reset()
		h.primaryNode = 1 - h.primaryNode
	} else {
		h.front.SetTarget(addr(sb))
		h.front.Reset() // connections still held to the dead primary
	}
	h.primary, h.standby, h.repl = sb, nil, nil
	h.failures++
	h.mu.Unlock()
	_ = old.Stop()
	ch := make(chan error, 1)
	h.bg.Go(func() { ch <- h.addStandby(h.bgCtx) })
	return promoted, ch, nil
}

// Close stops every server and proxy, the standby being rebuilt too.
func (h *haDB) Close() {
	h.bgCancel()
	h.bg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range []*pgserver.Server{h.standby, h.primary} {
		if s != nil {
			_ = s.Stop()
		}
	}
	for _, p := range []*netproxy.Proxy{h.repl, h.front, h.nodes[0], h.nodes[1]} {
		if p != nil {
			p.Close()
		}
	}
}
