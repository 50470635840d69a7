package partners_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest/observer"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// Long enough that neither the resync nor the file check happens during
// a test that did not ask for it.
const never = time.Hour

// served is how long a change may take to be served.
const served = 2 * time.Second

type liveEnv struct {
	live *partners.Live
	reg  *prometheus.Registry
	logs *observer.ObservedLogs
}

// newLive builds a Live for the configuration file at path on st.
func newLive(t *testing.T, st *postgres.Store, path, identity string, resync, fileCheck time.Duration) liveEnv {
	t.Helper()
	log, logs := testLogger(t)
	reg := prometheus.NewRegistry()
	l, err := partners.NewLive(context.Background(), partners.LiveOptions{
		Store: st, Path: path, SecretsDir: filepath.Dir(path), Logger: log, Registerer: reg, Identity: identity, Resync: resync, FileCheck: fileCheck,
	})
	if err != nil {
		t.Fatalf("NewLive: %v", err)
	}
	return liveEnv{live: l, reg: reg, logs: logs}
}

// run runs l until the test ends, then stops it and waits for it.
func run(t *testing.T, l *partners.Live) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Live.Run after cancel = %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Live.Run did not return within 10s of its context ending")
		}
	})
}

// gauge reads a gauge of reg.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// partnerIDs lists the AS2 IDs f serves.
func partnerIDs(f *config.File) string {
	var ids []string
	for _, p := range f.Partners {
		ids = append(ids, p.AS2ID)
	}
	return strings.Join(ids, ",")
}

func serves(f *config.File, as2ID string) bool {
	_, ok := f.Partner(as2ID)
	return ok
}

// TestLiveImport: the first replica imports the file's partners into an
// empty database and serves them; a replica started later does not import
// again, and does not serve partners only its file lists.
func TestLiveImport(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	path := stationDir(t, acmeYAML, betaYAML)
	base := loadBase(t, path)

	// Before any replica imported, one-shot commands use the file's own.
	if snap, err := partners.Snapshot(ctx, st, base, time.Now()); err != nil || snap != base {
		t.Errorf("Snapshot(empty database) = %p, %v; want the file %p", snap, err, base)
	}

	first := newLive(t, st, path, "replica-1", never, never)
	h := history(t, st, "")
	if len(h) != 2 {
		t.Fatalf("history after the first NewLive = %d entries, want 2", len(h))
	}
	for _, e := range h {
		if e.Op != postgres.PartnerImport || e.Version != 1 || e.Actor != "import: "+path || e.Spec == nil ||
			!strings.Contains(*e.Spec, "-----BEGIN CERTIFICATE-----") || !strings.Contains(e.Diff, "+ as2_id: ") {
			t.Errorf("history of %s = %s v%d by %q diff %q; want import v1 by %q, the certificate inline, every key in the diff", e.AS2ID, e.Op, e.Version, e.Actor, e.Diff, "import: "+path)
		}
	}
	rev, err := st.PartnerRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cur := first.live.Current()
	if cur.Revision != rev || partnerIDs(cur) != "ACME CORP,BETA" || cur.Station.AS2ID != "EDIHUB" || cur.Path != path {
		t.Errorf("Current() = revision %d partners %q station %q path %q; want revision %d, ACME CORP,BETA, EDIHUB, %s", cur.Revision, partnerIDs(cur), cur.Station.AS2ID, cur.Path, rev, path)
	}
	if acme, ok := cur.Partner("ACME CORP"); !ok || acme.Sign != config.DigestSHA256 || len(acme.Certificates) != 1 || !acme.Certificates[0].Equal(acmeID.Cert) {
		t.Errorf("Current().Partner(ACME CORP) = %+v, want the file's profile", acme)
	}
	if got := gauge(t, first.reg, "edihub_partners_served"); got != 2 {
		t.Errorf("edihub_partners_served = %v, want 2", got)
	}
	if got := gauge(t, first.reg, "edihub_partners_revision"); got != float64(rev) {
		t.Errorf("edihub_partners_revision = %v, want %d", got, rev)
	}
	replicas, err := st.ServedRevisions(ctx, partners.StoppedAfter)
	if err != nil || len(replicas) != 1 || replicas[0].Identity != "replica-1" || replicas[0].Revision != rev {
		t.Errorf("ServedRevisions = %+v, %v; want replica-1 at revision %d", replicas, err, rev)
	}
	snap, err := partners.Snapshot(ctx, st, base, time.Now())
	if err != nil || snap.Revision != rev || partnerIDs(snap) != "ACME CORP,BETA" {
		t.Errorf("Snapshot after the import = %v, %v; want revision %d with ACME CORP,BETA", snap, err, rev)
	}

	// A second replica whose file lists one more partner: the database is
	// the partners' home now.
	gamma := strings.Replace(betaYAML, "BETA", "GAMMA", 1)
	second := newLive(t, st, writeConfig(t, filepath.Dir(path), acmeYAML, betaYAML, gamma), "replica-2", never, never)
	if n := len(history(t, st, "")); n != 2 {
		t.Errorf("history after the second NewLive = %d entries, want 2 (no second import)", n)
	}
	if cur := second.live.Current(); cur.Revision != rev || partnerIDs(cur) != "ACME CORP,BETA" {
		t.Errorf("second Current() = revision %d partners %q; want %d, ACME CORP,BETA (GAMMA is only in its file)", cur.Revision, partnerIDs(cur), rev)
	}
	if n := second.logs.FilterMessageSnippet("not served: the database holds the partners").Len(); n != 1 {
		t.Errorf("second NewLive logged %d warnings that the file's partners are not served, want 1", n)
	}
	// A replica whose file lists the partners as imported says nothing.
	third := newLive(t, st, writeConfig(t, filepath.Dir(path), acmeYAML, betaYAML), "replica-3", never, never)
	if n := third.logs.FilterMessageSnippet("not served").Len(); n != 0 {
		t.Errorf("a NewLive whose file holds the imported partners logged %d warnings, want none", n)
	}
}

// TestLiveServesChange: with Run running, a change made through the
// Service is served by Current within 2 s (notified, not re-read: the
// resync is an hour away), and a snapshot taken before the change, as a
// message in flight holds it, does not change.
func TestLiveServesChange(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	path := stationDir(t, acmeYAML, betaYAML)
	env := newLive(t, st, path, "replica-1", never, never)
	run(t, env.live)
	svc := &partners.Service{Store: st, Base: env.live.Current}

	before := env.live.Current()
	acmeBefore, _ := before.Partner("ACME CORP")
	steps := []struct {
		name   string
		change func() (int64, error)
		check  func(*config.File) bool
	}{
		{"create GAMMA", func() (int64, error) {
			sp, err := svc.Put(ctx, "alice", inline("as2_id: GAMMA\nurl: https://as2.gamma.example/as2\ncertificate: beta.crt\n"), 0)
			return sp.Revision, err
		}, func(f *config.File) bool { return serves(f, "GAMMA") }},
		{"update ACME", func() (int64, error) {
			sp, err := svc.Put(ctx, "alice", inline("as2_id: ACME CORP\nurl: https://as2.acme.example/as2\ncertificate: acme.crt\nsign: sha-512\n"), 1)
			return sp.Revision, err
		}, func(f *config.File) bool { p, ok := f.Partner("ACME CORP"); return ok && p.Sign == config.DigestSHA512 }},
		{"delete BETA", func() (int64, error) {
			return svc.Delete(ctx, "alice", "BETA", 1)
		}, func(f *config.File) bool { return !serves(f, "BETA") }},
		// The first use of a certificate changes no revision, but is
		// served all the same (switch_on_first_use).
		{"first use of ACME's certificate", func() (int64, error) {
			if first, err := st.RecordCertificateUse(ctx, "ACME CORP", "fp-acme"); err != nil || !first {
				return 0, fmt.Errorf("RecordCertificateUse = %v, %w; want true", first, err)
			}
			return st.PartnerRevision(ctx)
		}, func(f *config.File) bool {
			p, ok := f.Partner("ACME CORP")
			return ok && !p.CertificateUses["fp-acme"].IsZero()
		}},
	}
	for _, s := range steps {
		// Measured from before the change is made: an upper bound of the
		// time from its commit.
		start := time.Now()
		rev, err := s.change()
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		waitFor(t, s.name+" served", 10*time.Second, func() bool {
			cur := env.live.Current()
			return cur.Revision == rev && s.check(cur)
		})
		took := time.Since(start)
		t.Logf("%s: served %v after the change was made", s.name, took.Round(time.Millisecond))
		if took >= served {
			t.Errorf("%s: served %v after the change was made, want within %v", s.name, took, served)
		}
	}
	if got := partnerIDs(env.live.Current()); got != "ACME CORP,GAMMA" {
		t.Errorf("Current() partners = %q, want ACME CORP,GAMMA", got)
	}

	// The snapshot taken before is as it was.
	if got := partnerIDs(before); got != "ACME CORP,BETA" {
		t.Errorf("earlier snapshot partners = %q, want ACME CORP,BETA", got)
	}
	if acme, _ := before.Partner("ACME CORP"); acme.Sign != config.DigestSHA256 || acmeBefore.Sign != config.DigestSHA256 || len(acmeBefore.CertificateUses) != 0 {
		t.Errorf("earlier snapshot ACME signs %s (held pointer: %s, uses %v), want sha-256 and no certificate use", acme.Sign, acmeBefore.Sign, acmeBefore.CertificateUses)
	}
	rev, err := st.PartnerRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the served revision recorded", 10*time.Second, func() bool {
		rr, err := st.ServedRevisions(ctx, partners.StoppedAfter)
		return err == nil && len(rr) == 1 && rr[0].Identity == "replica-1" && rr[0].Revision == rev
	})
}

// TestLiveReload: Current is a snapshot; without Run, a stored change is
// served from the next Reload on, and a Reload without a change keeps the
// snapshot.
func TestLiveReload(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	env := newLive(t, st, stationDir(t, acmeYAML), "replica-1", never, never)
	before := env.live.Current()
	if err := env.live.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := env.live.Current(); got != before {
		t.Errorf("Reload without a change replaced the snapshot")
	}
	svc := &partners.Service{Store: st, Base: env.live.Current}
	sp, err := svc.Put(ctx, "alice", inline("as2_id: BETA\nurl: https://as2.beta.example/as2\ncertificate: beta.crt\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := env.live.Current(); got != before || serves(got, "BETA") {
		t.Errorf("Current() changed without Run or Reload: %q", partnerIDs(got))
	}
	if err := env.live.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if got := env.live.Current(); got.Revision != sp.Revision || partnerIDs(got) != "ACME CORP,BETA" {
		t.Errorf("Current() after Reload = revision %d %q; want %d ACME CORP,BETA", got.Revision, partnerIDs(got), sp.Revision)
	}
	if partnerIDs(before) != "ACME CORP" {
		t.Errorf("the snapshot before = %q, want ACME CORP", partnerIDs(before))
	}
}

// TestLiveSecretMissing: a stored profile naming a secret file this
// replica does not have is not served here when it is new, and keeps its
// version before when it is a change; the other partners are served.
func TestLiveSecretMissing(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	path := stationDir(t, acmeYAML, betaYAML)
	dir := filepath.Dir(path)
	env := newLive(t, st, path, "replica-1", never, never)
	run(t, env.live)
	// The CLI, away from the replicas, accepts the missing files.
	svc := &partners.Service{Store: st, Base: env.live.Current, SecretsOptional: true}

	acmeV2 := strings.Replace(acmeYAML, "sign: sha-256", "sign: sha-512\n    auth: {user: edi, password_file: acme.pw}", 1)
	gamma := "  - as2_id: GAMMA\n    url: https://as2.gamma.example/as2\n    certificate: beta.crt\n    auth: {user: edi, password_file: gamma.pw}\n"
	delta := "  - as2_id: DELTA\n    url: https://as2.delta.example/as2\n    certificate: beta.crt\n"
	plan, err := svc.Plan(ctx, doc(acmeV2, betaYAML, gamma, delta), dir, "partners.yaml", false)
	if err != nil {
		t.Fatalf("Plan = %v", err)
	}
	if len(plan.Warnings) != 2 {
		t.Errorf("Plan warnings = %q, want one for each missing secret file", plan.Warnings)
	}
	rev, err := svc.Apply(ctx, "alice", plan)
	if err != nil {
		t.Fatalf("Apply = %v", err)
	}
	took := waitFor(t, "the revision served", 10*time.Second, func() bool { return env.live.Current().Revision == rev })
	t.Logf("revision %d served %v after the commit", rev, took.Round(time.Millisecond))

	cur := env.live.Current()
	if got := partnerIDs(cur); got != "ACME CORP,BETA,DELTA" {
		t.Errorf("Current() partners = %q, want ACME CORP,BETA,DELTA (GAMMA cannot be built here)", got)
	}
	if acme, ok := cur.Partner("ACME CORP"); !ok || acme.Sign != config.DigestSHA256 || acme.BasicAuth != nil {
		t.Errorf("Current().Partner(ACME CORP) = %+v, want version 1 (sha-256, no auth) still served", acme)
	}
	if got := gauge(t, env.reg, "edihub_partners_load_errors"); got != 2 {
		t.Errorf("edihub_partners_load_errors = %v, want 2", got)
	}
	if got := gauge(t, env.reg, "edihub_partners_served"); got != 3 {
		t.Errorf("edihub_partners_served = %v, want 3", got)
	}
	for _, want := range []string{"the partner is not served here", "it keeps the version before"} {
		if env.logs.FilterMessageSnippet(want).Len() != 1 {
			t.Errorf("no log %q", want)
		}
	}
	// The profile stays left out, or at its version before, across later
	// changes of other partners.
	if _, err := svc.Delete(ctx, "alice", "DELTA", 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "DELTA's delete served", 10*time.Second, func() bool { return !serves(env.live.Current(), "DELTA") })
	cur = env.live.Current()
	if acme, ok := cur.Partner("ACME CORP"); !ok || acme.Sign != config.DigestSHA256 || serves(cur, "GAMMA") {
		t.Errorf("after another change: ACME %+v, GAMMA served %v; want ACME version 1, GAMMA not served", acme, serves(cur, "GAMMA"))
	}
}

// replaceFile writes data to path through a rename, so that a reader sees
// the old file or the new one, never a partial one.
func replaceFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	writeFile(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TestLiveStationFilesChange: a new station key pair written over the
// files the configuration names is served within FileCheck, with the
// partners; a snapshot taken before keeps the old station; a file that no
// longer loads leaves the station loaded before in service.
func TestLiveStationFilesChange(t *testing.T) {
	st := pgtest.Store(t)
	path := stationDir(t, acmeYAML, betaYAML)
	dir := filepath.Dir(path)
	const fileCheck = 100 * time.Millisecond
	env := newLive(t, st, path, "replica-1", never, fileCheck)
	run(t, env.live)
	before := env.live.Current()

	renewed, err := devpki.New("EDIHUB renewed", devpki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	replaceFile(t, filepath.Join(dir, "station.crt"), renewed.CertPEM())
	replaceFile(t, filepath.Join(dir, "station.key"), renewed.KeyPEM())
	took := waitFor(t, "the new station key served", 10*time.Second, func() bool {
		return env.live.Current().Station.Certificate.Equal(renewed.Cert)
	})
	t.Logf("new station key pair served %v after it was written (FileCheck %v)", took.Round(time.Millisecond), fileCheck)
	if took >= served {
		t.Errorf("new station key pair served %v after it was written, want within %v (FileCheck %v)", took, served, fileCheck)
	}
	cur := env.live.Current()
	if !cur.Station.PrivateKey.Equal(renewed.Key) || len(cur.Station.Keys) != 1 {
		t.Errorf("Current().Station: key matches the new one %v, %d keys; want the new key, 1", cur.Station.PrivateKey.Equal(renewed.Key), len(cur.Station.Keys))
	}
	if partnerIDs(cur) != "ACME CORP,BETA" || cur.Revision != before.Revision {
		t.Errorf("Current() after the station change = %q at revision %d; want ACME CORP,BETA at %d", partnerIDs(cur), cur.Revision, before.Revision)
	}
	if !before.Station.Certificate.Equal(stationID.Cert) || !before.Station.PrivateKey.Equal(stationID.Key) {
		t.Errorf("the snapshot taken before the change has a new station; want the old key pair")
	}

	// A configuration that no longer loads: the station stays.
	writeFile(t, path, []byte("station: {as2_id: \"EDIHUB\", private_key: nope.key, certificate: station.crt}\n"))
	waitFor(t, "the broken file logged", 10*time.Second, func() bool {
		return env.logs.FilterMessageSnippet("does not load").Len() > 0
	})
	if cur := env.live.Current(); !cur.Station.Certificate.Equal(renewed.Cert) || partnerIDs(cur) != "ACME CORP,BETA" {
		t.Errorf("Current() after a broken file = station %v, partners %q; want the station loaded before and ACME CORP,BETA", cur.Station.Certificate.Subject, partnerIDs(cur))
	}
	// Repaired, with the old key pair back: served again.
	replaceFile(t, filepath.Join(dir, "station.crt"), stationID.CertPEM())
	replaceFile(t, filepath.Join(dir, "station.key"), stationID.KeyPEM())
	writeConfig(t, dir, acmeYAML, betaYAML)
	waitFor(t, "the repaired file served", 10*time.Second, func() bool {
		return env.live.Current().Station.Certificate.Equal(stationID.Cert)
	})
}

// listeners lists the backends of the database conn is connected to that
// are listening (their last statement a LISTEN).
func listeners(t *testing.T, conn *pgx.Conn) []int32 {
	t.Helper()
	rows, err := conn.Query(context.Background(), `
SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND query LIKE 'LISTEN%' ORDER BY pid`)
	if err != nil {
		t.Fatalf("read pg_stat_activity: %v", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatalf("read pg_stat_activity: %v", err)
	}
	return pids
}

// killListener waits for Live's one listening backend and terminates it;
// it returns its pid once it is gone.
func killListener(t *testing.T, conn *pgx.Conn) int32 {
	t.Helper()
	var pid int32
	waitFor(t, "Live listening", 10*time.Second, func() bool {
		pids := listeners(t, conn)
		if len(pids) > 1 {
			t.Fatalf("listening backends = %v, want one", pids)
		}
		if len(pids) == 1 {
			pid = pids[0]
		}
		return len(pids) == 1
	})
	var ok bool
	if err := conn.QueryRow(context.Background(), `SELECT pg_terminate_backend($1)`, pid).Scan(&ok); err != nil || !ok {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ok, err)
	}
	waitFor(t, "the listening backend gone", 10*time.Second, func() bool { return len(listeners(t, conn)) == 0 })
	return pid
}

func openStore(t *testing.T, url string) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return st
}

// TestLiveResyncAfterListenerKilled: while the LISTEN connection is gone
// (its backend terminated), a change is still served, by the resync; and
// Run listens again.
func TestLiveResyncAfterListenerKilled(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st := openStore(t, url)
	conn := pgtest.Conn(t, url)
	path := stationDir(t, acmeYAML)
	const resync = 200 * time.Millisecond
	env := newLive(t, st, path, "replica-1", resync, never)
	run(t, env.live)
	svc := &partners.Service{Store: st, Base: env.live.Current}

	killed := killListener(t, conn)
	start := time.Now()
	sp, err := svc.Put(ctx, "alice", inline("as2_id: GAMMA\nurl: https://as2.gamma.example/as2\ncertificate: beta.crt\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "GAMMA served", 10*time.Second, func() bool { return env.live.Current().Revision == sp.Revision })
	took := time.Since(start)
	t.Logf("GAMMA served %v after it was put, the listener down (Resync %v)", took.Round(time.Millisecond), resync)
	if pids := listeners(t, conn); len(pids) != 0 {
		t.Errorf("listening backends when GAMMA was served = %v, want none: the resync must have served it", pids)
	}
	if took >= served {
		t.Errorf("GAMMA served %v after it was put, want within %v", took, served)
	}
	if !serves(env.live.Current(), "GAMMA") {
		t.Errorf("Current() partners = %q, want GAMMA among them", partnerIDs(env.live.Current()))
	}
	if env.logs.FilterMessageSnippet("listen for partner changes; retrying").Len() == 0 {
		t.Errorf("the lost listener was not logged")
	}
	waitFor(t, "Live listening again", 10*time.Second, func() bool {
		pids := listeners(t, conn)
		return len(pids) == 1 && pids[0] != killed
	})
}

// TestLiveListensAgainAfterListenerKilled: after its LISTEN connection
// was terminated, Run listens again, and a change is notified again: it
// is served within 2 s although the resync is an hour away.
func TestLiveListensAgainAfterListenerKilled(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st := openStore(t, url)
	conn := pgtest.Conn(t, url)
	path := stationDir(t, acmeYAML)
	env := newLive(t, st, path, "replica-1", never, never)
	run(t, env.live)
	svc := &partners.Service{Store: st, Base: env.live.Current}

	killed := killListener(t, conn)
	again := waitFor(t, "Live listening again", 10*time.Second, func() bool {
		pids := listeners(t, conn)
		return len(pids) == 1 && pids[0] != killed
	})
	t.Logf("listening again %v after the backend was gone", again.Round(time.Millisecond))
	start := time.Now()
	sp, err := svc.Put(ctx, "alice", inline("as2_id: GAMMA\nurl: https://as2.gamma.example/as2\ncertificate: beta.crt\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "GAMMA served", 10*time.Second, func() bool { return env.live.Current().Revision == sp.Revision })
	took := time.Since(start)
	t.Logf("GAMMA served %v after it was put, through the new LISTEN", took.Round(time.Millisecond))
	if took >= served {
		t.Errorf("GAMMA served %v after it was put, want within %v", took, served)
	}
}
