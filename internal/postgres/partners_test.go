package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// specText is a distinct stored spec; the store keeps specs as opaque text.
func specText(as2ID string, n int) *string {
	s := fmt.Sprintf("as2_id: %s\nurl: https://%d.example/as2\n", as2ID, n)
	return &s
}

// partnerRows is everything the partner tables hold, as comparable text:
// a refused change must leave it exactly as it was.
func partnerRows(t *testing.T, url string) []string {
	t.Helper()
	c := pgtest.Conn(t, url)
	rows, err := c.Query(context.Background(), `
SELECT 'partner ' || as2_id || ' v' || version || ' r' || revision || ' by ' || updated_by || ': ' || spec FROM partners
UNION ALL
SELECT 'history r' || revision || ' ' || as2_id || ' v' || version || ' ' || op || ' by ' || actor || ' spec=' || coalesce(spec, '<null>') || ' diff=' || diff FROM partner_history
ORDER BY 1`)
	if err != nil {
		t.Fatalf("read partner rows: %v", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// historyOf is a partner's history without the timestamps.
func historyOf(t *testing.T, st *postgres.Store, as2ID string) []postgres.PartnerHistoryEntry {
	t.Helper()
	h, err := st.PartnerHistory(context.Background(), as2ID, 100)
	if err != nil {
		t.Fatalf("PartnerHistory(%q): %v", as2ID, err)
	}
	for i := range h {
		if h[i].ChangedAt.IsZero() {
			t.Errorf("PartnerHistory(%q)[%d].ChangedAt is zero", as2ID, i)
		}
		h[i].ChangedAt = time.Time{}
	}
	return h
}

// TestChangePartnersVersionsAndHistory: creates, updates and deletes
// number each partner's versions from 1 and the set's revisions in commit
// order; every change is a history row with its op, actor and diff, and a
// delete's row has no spec. The set read back is the last revision's.
func TestChangePartnersVersionsAndHistory(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)

	if rev, err := st.PartnerRevision(ctx); err != nil || rev != 0 {
		t.Fatalf("PartnerRevision(empty) = %d, %v; want 0, nil", rev, err)
	}
	steps := []struct {
		name  string
		actor string
		give  postgres.PartnerChange
		// wantVer is the version the step records; wantGone that the
		// partner is no longer stored after it.
		wantVer  int64
		wantGone bool
	}{
		{"create A", "alice", postgres.PartnerChange{AS2ID: "A", Op: postgres.PartnerCreate, Spec: specText("A", 1), Expect: 0, Diff: "+ as2_id: A\n"}, 1, false},
		{"create B", "bob", postgres.PartnerChange{AS2ID: "B", Op: postgres.PartnerCreate, Spec: specText("B", 1), Expect: 0, Diff: "+ as2_id: B\n"}, 1, false},
		{"update A", "alice", postgres.PartnerChange{AS2ID: "A", Op: postgres.PartnerUpdate, Spec: specText("A", 2), Expect: 1, Diff: "~ url: 1 → 2\n"}, 2, false},
		{"update A over any version", "carol", postgres.PartnerChange{AS2ID: "A", Op: postgres.PartnerUpdate, Spec: specText("A", 3), Expect: postgres.AnyVersion, Diff: "~ url: 2 → 3\n"}, 3, false},
		{"delete B", "bob", postgres.PartnerChange{AS2ID: "B", Op: postgres.PartnerDelete, Expect: 1, Diff: "- as2_id: B\n"}, 2, true},
		{"create B again", "dave", postgres.PartnerChange{AS2ID: "B", Op: postgres.PartnerCreate, Spec: specText("B", 9), Expect: 0, Diff: "+ as2_id: B\n"}, 3, false},
	}
	var lastRev int64
	want := map[string][]postgres.PartnerHistoryEntry{}
	for _, s := range steps {
		rev, err := st.ChangePartners(ctx, s.actor, []postgres.PartnerChange{s.give})
		if err != nil {
			t.Fatalf("%s: ChangePartners = %v", s.name, err)
		}
		if rev <= lastRev {
			t.Errorf("%s: ChangePartners revision = %d, want more than the previous %d", s.name, rev, lastRev)
		}
		lastRev = rev
		if got, err := st.PartnerRevision(ctx); err != nil || got != rev {
			t.Errorf("%s: PartnerRevision = %d, %v; want %d", s.name, got, err, rev)
		}
		want[s.give.AS2ID] = append([]postgres.PartnerHistoryEntry{{Revision: rev, AS2ID: s.give.AS2ID, Version: s.wantVer,
			Op: s.give.Op, Spec: s.give.Spec, Diff: s.give.Diff, Actor: s.actor}}, want[s.give.AS2ID]...)
		p, err := st.Partner(ctx, s.give.AS2ID)
		switch {
		case s.wantGone:
			if !errors.Is(err, postgres.ErrPartnerNotFound) {
				t.Errorf("%s: Partner(%s) = %+v, %v; want ErrPartnerNotFound", s.name, s.give.AS2ID, p, err)
			}
		case err != nil:
			t.Errorf("%s: Partner(%s) = %v", s.name, s.give.AS2ID, err)
		default:
			if p.Version != s.wantVer || p.Revision != rev || p.Spec != *s.give.Spec || p.UpdatedBy != s.actor || p.UpdatedAt.IsZero() {
				t.Errorf("%s: Partner(%s) = v%d r%d %q by %q; want v%d r%d %q by %q", s.name, s.give.AS2ID,
					p.Version, p.Revision, p.Spec, p.UpdatedBy, s.wantVer, rev, *s.give.Spec, s.actor)
			}
		}
	}
	for _, id := range []string{"A", "B"} {
		if diff := cmp.Diff(want[id], historyOf(t, st, id)); diff != "" {
			t.Errorf("PartnerHistory(%s) mismatch (-want +got):\n%s", id, diff)
		}
	}
	if got := historyOf(t, st, ""); len(got) != len(steps) || got[0].Revision != lastRev {
		t.Errorf("PartnerHistory(all) = %d entries, newest r%d; want %d, newest r%d", len(got), got[0].Revision, len(steps), lastRev)
	}
	if got := historyOf(t, st, "A"); len(got) != 3 {
		t.Fatalf("PartnerHistory(A) = %d entries, want 3", len(got))
	}
	if got, err := st.PartnerHistory(ctx, "A", 1); err != nil || len(got) != 1 || got[0].Version != 3 {
		t.Errorf("PartnerHistory(A, limit 1) = %+v, %v; want only version 3", got, err)
	}
	// The deleted version of B has no spec; B's delete is version 2 of B.
	if h := historyOf(t, st, "B"); h[1].Op != postgres.PartnerDelete || h[1].Spec != nil || h[1].Version != 2 {
		t.Errorf("PartnerHistory(B)[1] = %s v%d spec %v; want delete v2 with a NULL spec", h[1].Op, h[1].Version, h[1].Spec)
	}

	set, err := st.Partners(ctx)
	if err != nil {
		t.Fatalf("Partners: %v", err)
	}
	if set.Revision != lastRev {
		t.Errorf("Partners().Revision = %d, want %d", set.Revision, lastRev)
	}
	var got []string
	for _, p := range set.Partners {
		got = append(got, fmt.Sprintf("%s v%d %q", p.AS2ID, p.Version, p.Spec))
	}
	wantSet := []string{fmt.Sprintf("A v3 %q", *specText("A", 3)), fmt.Sprintf("B v3 %q", *specText("B", 9))}
	if diff := cmp.Diff(wantSet, got); diff != "" {
		t.Errorf("Partners() mismatch (-want +got):\n%s", diff)
	}
}

// TestChangePartnersRefused: a change that does not apply refuses the
// whole transaction: nothing of it is stored, neither the partners nor
// their history, and the revision stays.
func TestChangePartnersRefused(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st := open(t, url)
	// A at version 2, B at version 1, C deleted (version 2 was the delete).
	seed := [][]postgres.PartnerChange{
		{{AS2ID: "A", Op: postgres.PartnerCreate, Spec: specText("A", 1)}, {AS2ID: "B", Op: postgres.PartnerCreate, Spec: specText("B", 1)}, {AS2ID: "C", Op: postgres.PartnerCreate, Spec: specText("C", 1)}},
		{{AS2ID: "A", Op: postgres.PartnerUpdate, Spec: specText("A", 2), Expect: 1}, {AS2ID: "C", Op: postgres.PartnerDelete, Expect: 1}},
	}
	for _, changes := range seed {
		if _, err := st.ChangePartners(ctx, "seed", changes); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	before := partnerRows(t, url)
	revBefore, err := st.PartnerRevision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	create := func(id string) postgres.PartnerChange {
		return postgres.PartnerChange{AS2ID: id, Op: postgres.PartnerCreate, Spec: specText(id, 5), Expect: 0}
	}
	tests := []struct {
		name string
		give []postgres.PartnerChange
		want error
	}{
		{"stale update last", []postgres.PartnerChange{create("D"), {AS2ID: "B", Op: postgres.PartnerUpdate, Spec: specText("B", 5), Expect: 1}, {AS2ID: "A", Op: postgres.PartnerUpdate, Spec: specText("A", 5), Expect: 1}}, postgres.ErrPartnerConflict},
		{"stale update first", []postgres.PartnerChange{{AS2ID: "A", Op: postgres.PartnerUpdate, Spec: specText("A", 5), Expect: 1}, create("D")}, postgres.ErrPartnerConflict},
		{"stale delete", []postgres.PartnerChange{create("D"), {AS2ID: "A", Op: postgres.PartnerDelete, Expect: 1}}, postgres.ErrPartnerConflict},
		{"create of a stored partner", []postgres.PartnerChange{create("D"), create("B")}, postgres.ErrPartnerConflict},
		{"delete of a missing partner", []postgres.PartnerChange{create("D"), {AS2ID: "X", Op: postgres.PartnerDelete, Expect: postgres.AnyVersion}}, postgres.ErrPartnerNotFound},
		{"delete of a deleted partner", []postgres.PartnerChange{create("D"), {AS2ID: "C", Op: postgres.PartnerDelete, Expect: 1}}, postgres.ErrPartnerNotFound},
		{"update of a deleted partner", []postgres.PartnerChange{create("D"), {AS2ID: "C", Op: postgres.PartnerUpdate, Spec: specText("C", 5), Expect: 1}}, postgres.ErrPartnerNotFound},
		{"the same partner twice", []postgres.PartnerChange{create("D"), create("D")}, postgres.ErrPartnerConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rev, err := st.ChangePartners(ctx, "mallory", tt.give)
			if !errors.Is(err, tt.want) || rev != 0 {
				t.Errorf("ChangePartners = %d, %v; want 0, %v", rev, err, tt.want)
			}
			if diff := cmp.Diff(before, partnerRows(t, url)); diff != "" {
				t.Errorf("partner tables changed by a refused change (-before +after):\n%s", diff)
			}
			if got, err := st.PartnerRevision(ctx); err != nil || got != revBefore {
				t.Errorf("PartnerRevision = %d, %v; want %d", got, err, revBefore)
			}
		})
	}
	// The same changes with the right versions go through: the refusals
	// above were about the versions, not the changes.
	rev, err := st.ChangePartners(ctx, "alice", []postgres.PartnerChange{create("D"), {AS2ID: "A", Op: postgres.PartnerDelete, Expect: 2}, create("C")})
	if err != nil {
		t.Fatalf("ChangePartners(current versions) = %v", err)
	}
	if rev <= revBefore {
		t.Errorf("ChangePartners revision = %d, want more than %d", rev, revBefore)
	}
	c, err := st.Partner(ctx, "C")
	if err != nil || c.Version != 3 || c.Revision != rev {
		t.Errorf("Partner(C) after re-create = v%d r%d, %v; want v3 r%d (the count goes on after the delete)", c.Version, c.Revision, err, rev)
	}
}

// TestPartnerVersion: every stored version of a partner's history can be
// read back; a delete's version and versions never written cannot.
func TestPartnerVersion(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	for _, c := range []postgres.PartnerChange{
		{AS2ID: "A", Op: postgres.PartnerCreate, Spec: specText("A", 1)},
		{AS2ID: "A", Op: postgres.PartnerUpdate, Spec: specText("A", 2), Expect: 1},
		{AS2ID: "A", Op: postgres.PartnerDelete, Expect: 2},
	} {
		if _, err := st.ChangePartners(ctx, "t", []postgres.PartnerChange{c}); err != nil {
			t.Fatalf("%s: %v", c.Op, err)
		}
	}
	tests := []struct {
		id      string
		version int64
		want    string
		wantErr error
	}{
		{"A", 1, *specText("A", 1), nil},
		{"A", 2, *specText("A", 2), nil},
		{"A", 3, "", postgres.ErrPartnerNotFound}, // the delete
		{"A", 4, "", postgres.ErrPartnerNotFound},
		{"A", 0, "", postgres.ErrPartnerNotFound},
		{"Z", 1, "", postgres.ErrPartnerNotFound},
	}
	for _, tt := range tests {
		got, err := st.PartnerVersion(ctx, tt.id, tt.version)
		if got != tt.want || !errors.Is(err, tt.wantErr) || (tt.wantErr == nil) != (err == nil) {
			t.Errorf("PartnerVersion(%s, %d) = %q, %v; want %q, %v", tt.id, tt.version, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestImportPartners: the import stores the partners of a database that
// never held any, once; after that (even once they are all deleted) it
// refuses and changes nothing.
func TestImportPartners(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st := open(t, url)
	imports := []postgres.PartnerChange{
		{AS2ID: "A", Op: postgres.PartnerImport, Spec: specText("A", 1)},
		{AS2ID: "B", Op: postgres.PartnerImport, Spec: specText("B", 1)},
	}
	rev, err := st.ImportPartners(ctx, "import: edihub.yaml", imports)
	if err != nil || rev == 0 {
		t.Fatalf("ImportPartners(empty database) = %d, %v; want a revision, nil", rev, err)
	}
	h := historyOf(t, st, "")
	if len(h) != 2 {
		t.Fatalf("history after import = %d entries, want 2", len(h))
	}
	for _, e := range h {
		if e.Op != postgres.PartnerImport || e.Version != 1 || e.Actor != "import: edihub.yaml" {
			t.Errorf("history entry of %s = %s v%d by %q; want import v1 by %q", e.AS2ID, e.Op, e.Version, e.Actor, "import: edihub.yaml")
		}
	}
	if got, _ := st.PartnerRevision(ctx); got != rev {
		t.Errorf("PartnerRevision = %d, want the import's %d", got, rev)
	}

	before := partnerRows(t, url)
	again := []postgres.PartnerChange{{AS2ID: "C", Op: postgres.PartnerImport, Spec: specText("C", 1)}}
	if rev, err := st.ImportPartners(ctx, "import: other.yaml", again); !errors.Is(err, postgres.ErrPartnersStored) || rev != 0 {
		t.Errorf("second ImportPartners = %d, %v; want 0, ErrPartnersStored", rev, err)
	}
	if diff := cmp.Diff(before, partnerRows(t, url)); diff != "" {
		t.Errorf("refused import changed the partner tables (-before +after):\n%s", diff)
	}

	// A database whose partners were all deleted held partners: a replica
	// started with an old file must not bring them back.
	if _, err := st.ChangePartners(ctx, "t", []postgres.PartnerChange{
		{AS2ID: "A", Op: postgres.PartnerDelete, Expect: 1}, {AS2ID: "B", Op: postgres.PartnerDelete, Expect: 1},
	}); err != nil {
		t.Fatal(err)
	}
	before = partnerRows(t, url)
	if _, err := st.ImportPartners(ctx, "import: edihub.yaml", imports); !errors.Is(err, postgres.ErrPartnersStored) {
		t.Errorf("ImportPartners after every partner was deleted = %v, want ErrPartnersStored", err)
	}
	if diff := cmp.Diff(before, partnerRows(t, url)); diff != "" {
		t.Errorf("refused import changed the partner tables (-before +after):\n%s", diff)
	}
}

// TestImportPartnersConcurrent: replicas starting at once all try the
// import; it is stored exactly once and the others are told
// ErrPartnersStored.
func TestImportPartnersConcurrent(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	const replicas = 4
	stores := make([]*postgres.Store, replicas)
	for i := range stores {
		stores[i] = open(t, url)
	}
	errs := make([]error, replicas)
	testenv.Together(replicas, func(i int) {
		_, errs[i] = stores[i].ImportPartners(ctx, fmt.Sprintf("import: replica %d", i), []postgres.PartnerChange{
			{AS2ID: "A", Op: postgres.PartnerImport, Spec: specText("A", i)},
			{AS2ID: "B", Op: postgres.PartnerImport, Spec: specText("B", i)},
			{AS2ID: "C", Op: postgres.PartnerImport, Spec: specText("C", i)},
		})
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("imports %d and %d both stored", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, postgres.ErrPartnersStored):
			t.Errorf("import %d = %v, want nil or ErrPartnersStored", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no import stored: %v", errs)
	}
	h := historyOf(t, stores[0], "")
	if len(h) != 3 {
		t.Errorf("history = %d entries, want 3 (one import)", len(h))
	}
	for _, e := range h {
		if e.Version != 1 || e.Actor != fmt.Sprintf("import: replica %d", winner) || *e.Spec != *specText(e.AS2ID, winner) {
			t.Errorf("history of %s = v%d by %q %q; want v1 by the winner, replica %d", e.AS2ID, e.Version, e.Actor, *e.Spec, winner)
		}
	}
	set, err := stores[0].Partners(ctx)
	if err != nil || len(set.Partners) != 3 {
		t.Errorf("Partners = %d partners, %v; want 3", len(set.Partners), err)
	}
}

// TestListenPartners: a listener is woken once listening, within 2 s of
// each committed change, and not by a change that was refused (rolled
// back). A first certificate use wakes it too.
func TestListenPartners(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	st := pgtest.Store(t)
	wakes := make(chan time.Time, 100)
	done := make(chan error, 1)
	go func() { done <- st.ListenPartners(ctx, func() { wakes <- time.Now() }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ListenPartners after cancel = %v, want nil", err)
		}
	})
	expectWake := func(what string, since time.Time) {
		t.Helper()
		select {
		case at := <-wakes:
			t.Logf("%s: woken %v after the commit", what, at.Sub(since).Round(time.Millisecond))
			if d := at.Sub(since); d > 2*time.Second {
				t.Errorf("%s: woken %v after the commit, want within 2s", what, d)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: not woken within 2s", what)
		}
	}
	noWake := func(what string, wait time.Duration) {
		t.Helper()
		select {
		case <-wakes:
			t.Errorf("%s: woken, want no wake", what)
		case <-time.After(wait):
		}
	}
	expectWake("listening", time.Now())

	start := time.Now()
	if _, err := st.ChangePartners(context.Background(), "t", []postgres.PartnerChange{{AS2ID: "A", Op: postgres.PartnerCreate, Spec: specText("A", 1)}}); err != nil {
		t.Fatal(err)
	}
	expectWake("create", start)
	noWake("after the create's one wake", 300*time.Millisecond)

	// Refused: the pg_notify inside the rolled-back transaction must not
	// be delivered. A committed change follows, so that the listener is
	// shown to be alive: exactly one wake arrives.
	_, err := st.ChangePartners(context.Background(), "t", []postgres.PartnerChange{
		{AS2ID: "B", Op: postgres.PartnerCreate, Spec: specText("B", 1)},
		{AS2ID: "A", Op: postgres.PartnerUpdate, Spec: specText("A", 2), Expect: 7},
	})
	if !errors.Is(err, postgres.ErrPartnerConflict) {
		t.Fatalf("stale ChangePartners = %v, want ErrPartnerConflict", err)
	}
	noWake("refused change", time.Second)
	start = time.Now()
	if _, err := st.ChangePartners(context.Background(), "t", []postgres.PartnerChange{{AS2ID: "A", Op: postgres.PartnerUpdate, Spec: specText("A", 2), Expect: 1}}); err != nil {
		t.Fatal(err)
	}
	expectWake("update after the refused change", start)
	noWake("after the update's one wake", time.Second)

	start = time.Now()
	if first, err := st.RecordCertificateUse(context.Background(), "A", "fp1"); err != nil || !first {
		t.Fatalf("RecordCertificateUse = %v, %v; want true, nil", first, err)
	}
	expectWake("first certificate use", start)
	if first, err := st.RecordCertificateUse(context.Background(), "A", "fp1"); err != nil || first {
		t.Fatalf("RecordCertificateUse again = %v, %v; want false, nil", first, err)
	}
	noWake("second certificate use", time.Second)
}

// TestPartnerCertificateUse: the first use of a certificate is recorded
// once, per partner and fingerprint, and read with the partner set.
func TestPartnerCertificateUse(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	tests := []struct {
		partner, fp string
		want        bool
	}{
		{"A", "fp1", true},
		{"A", "fp1", false},
		{"A", "fp2", true},
		{"B", "fp1", true},
		{"A", "fp2", false},
	}
	for _, tt := range tests {
		got, err := st.RecordCertificateUse(ctx, tt.partner, tt.fp)
		if err != nil || got != tt.want {
			t.Errorf("RecordCertificateUse(%s, %s) = %v, %v; want %v, nil", tt.partner, tt.fp, got, err, tt.want)
		}
	}
	set, err := st.Partners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for id, uses := range set.Uses {
		for fp, at := range uses {
			if at.IsZero() {
				t.Errorf("Uses[%s][%s] has no time", id, fp)
			}
			got[id] = append(got[id], fp)
		}
	}
	want := map[string][]string{"A": {"fp1", "fp2"}, "B": {"fp1"}}
	for _, fps := range got {
		slices.Sort(fps)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Partners().Uses mismatch (-want +got):\n%s", diff)
	}
}

// TestServedRevisionsLeaveStoppedOut: a replica that has not recorded its
// revision within the window (killed, or restarted under a new identity)
// is not listed, while one that records on time is.
func TestServedRevisionsLeaveStoppedOut(t *testing.T) {
	ctx := context.Background()
	url := pgtest.URL(t)
	st, err := postgres.Open(ctx, url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	applied := time.Now().Add(-time.Hour).UTC().Truncate(time.Microsecond)
	for _, identity := range []string{"replica-live", "replica-killed"} {
		if err := st.RecordServedRevision(ctx, identity, 4, applied); err != nil {
			t.Fatalf("RecordServedRevision(%s): %v", identity, err)
		}
	}
	// The killed one's last record, 100 s ago: past three 30 s heartbeats,
	// within the two minutes the list used to keep.
	c := pgtest.Conn(t, url)
	if _, err := c.Exec(ctx, `UPDATE partner_replicas SET seen_at = now() - interval '100 seconds' WHERE identity = 'replica-killed'`); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		give time.Duration
		want []string
	}{
		{90 * time.Second, []string{"replica-live"}},
		{110 * time.Second, []string{"replica-killed", "replica-live"}},
	}
	for _, tt := range tests {
		got, err := st.ServedRevisions(ctx, tt.give)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, rr := range got {
			ids = append(ids, rr.Identity)
		}
		if diff := cmp.Diff(tt.want, ids); diff != "" {
			t.Errorf("ServedRevisions(%v) identities (-want +got):\n%s", tt.give, diff)
		}
	}
}

// TestPartnerServedRevisions: a replica's recorded revision is listed, and a
// later record replaces it.
func TestPartnerServedRevisions(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	applied := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	records := []struct {
		identity string
		revision int64
		at       time.Time
	}{
		{"replica-b", 3, applied},
		{"replica-a", 7, applied},
		{"replica-a", 9, applied.Add(time.Second)},
	}
	for _, r := range records {
		if err := st.RecordServedRevision(ctx, r.identity, r.revision, r.at); err != nil {
			t.Fatalf("RecordServedRevision(%s, %d): %v", r.identity, r.revision, err)
		}
	}
	got, err := st.ServedRevisions(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if got[i].SeenAt.IsZero() {
			t.Errorf("ServedRevisions()[%d].SeenAt is zero", i)
		}
		got[i].SeenAt = time.Time{}
		got[i].AppliedAt = got[i].AppliedAt.UTC()
	}
	want := []postgres.ReplicaRevision{
		{Identity: "replica-a", Revision: 9, AppliedAt: applied.Add(time.Second)},
		{Identity: "replica-b", Revision: 3, AppliedAt: applied},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ServedRevisions() mismatch (-want +got):\n%s", diff)
	}
}
