package postgres_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func connectorsChange(doc string, expect int64) postgres.ConnectorsChange {
	return postgres.ConnectorsChange{Document: doc, Summary: "s " + doc, Expect: expect,
		Audit: postgres.AuditEntry{Actor: "user:alice", Action: "connectors.apply", Target: "connectors", Remote: "192.0.2.7"}}
}

// TestConnectorsRevisions: an empty database holds revision 0; each
// change is the next revision, readable as the current one and by
// number, listed newest first, and recorded in the audit log in its
// transaction; a change against a stale revision stores nothing and
// writes no audit entry.
func TestConnectorsRevisions(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	cur, err := st.Connectors(ctx)
	if err != nil || cur.Revision != 0 || cur.Document != "" {
		t.Fatalf("Connectors on an empty database = %+v, %v, want revision 0", cur, err)
	}
	for i, doc := range []string{"a", "b", "c"} {
		rev, err := st.ChangeConnectors(ctx, connectorsChange(doc, int64(i)))
		if err != nil || rev != int64(i+1) {
			t.Fatalf("ChangeConnectors(%q, expect %d) = %d, %v, want %d", doc, i, rev, err, i+1)
		}
	}
	cur, err = st.Connectors(ctx)
	if err != nil || cur.Revision != 3 || cur.Document != "c" || cur.Actor != "user:alice" || cur.Summary != "s c" {
		t.Fatalf("Connectors = %+v, %v, want revision 3 \"c\" by user:alice", cur, err)
	}
	if n, err := st.ConnectorsRevisionNumber(ctx); n != 3 || err != nil {
		t.Errorf("ConnectorsRevisionNumber = %d, %v, want 3", n, err)
	}
	old, err := st.ConnectorsAt(ctx, 1)
	if err != nil || old.Document != "a" {
		t.Errorf("ConnectorsAt(1) = %+v, %v, want \"a\"", old, err)
	}
	if _, err := st.ConnectorsAt(ctx, 9); !errors.Is(err, postgres.ErrConnectorsRevisionNotFound) {
		t.Errorf("ConnectorsAt(9) = %v, want ErrConnectorsRevisionNotFound", err)
	}

	// Stale: made against revision 2, the document is at 3.
	_, err = st.ChangeConnectors(ctx, connectorsChange("stale", 2))
	if !errors.Is(err, postgres.ErrConnectorsConflict) {
		t.Fatalf("ChangeConnectors(expect 2 at 3) = %v, want ErrConnectorsConflict", err)
	}
	// A restore over whatever is stored.
	c := connectorsChange("a", postgres.AnyRevision)
	c.RestoredFrom = 1
	c.Audit.Action = "connectors.restore"
	if rev, err := st.ChangeConnectors(ctx, c); rev != 4 || err != nil {
		t.Fatalf("ChangeConnectors(restore 1, any) = %d, %v, want 4", rev, err)
	}

	hist, err := st.ConnectorsHistory(ctx, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	var revs []int64
	for _, h := range hist {
		revs = append(revs, h.Revision)
	}
	if len(revs) != 4 || revs[0] != 4 || revs[3] != 1 || hist[0].RestoredFrom != 1 || hist[0].Document != "" {
		t.Errorf("ConnectorsHistory = %+v, want revisions 4..1, 4 restored from 1, no documents", hist)
	}
	if page, _ := st.ConnectorsHistory(ctx, 2, 3); len(page) != 2 || page[0].Revision != 2 {
		t.Errorf("ConnectorsHistory(2, before 3) = %+v, want revisions 2 and 1", page)
	}

	audit, err := st.AuditLog(ctx, postgres.AuditQuery{Target: "connectors"})
	if err != nil {
		t.Fatal(err)
	}
	if len(audit) != 4 {
		t.Fatalf("audit entries = %d, want 4 (the stale change writes none): %+v", len(audit), audit)
	}
	a := audit[0]
	if a.Action != "connectors.restore" || a.Actor != "user:alice" || a.Remote != "192.0.2.7" ||
		a.Detail["revision"] != float64(4) || a.Detail["from_revision"] != float64(3) || a.Detail["restored_from"] != float64(1) {
		t.Errorf("audit entry of the restore = %+v, want connectors.restore by user:alice, revision 4 from 3, restored_from 1", a)
	}
}

// TestConnectorsConcurrentChanges: of changes made at once against the
// same revision, exactly one is stored.
func TestConnectorsConcurrentChanges(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.ChangeConnectors(ctx, connectorsChange("x", 0))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, postgres.ErrConnectorsConflict):
			t.Errorf("ChangeConnectors = %v, want nil or ErrConnectorsConflict", err)
		}
	}
	if rev, _ := st.ConnectorsRevisionNumber(ctx); ok != 1 || rev != 1 {
		t.Errorf("%d of %d concurrent changes stored, revision %d; want exactly 1", ok, n, rev)
	}
}

// TestListenConnectors: a listener is woken once listening and after a
// committed change, not after a refused one.
func TestListenConnectors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	st := pgtest.Store(t)
	wakes := make(chan struct{}, 100)
	done := make(chan error, 1)
	go func() { done <- st.ListenConnectors(ctx, func() { wakes <- struct{}{} }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ListenConnectors after cancel = %v, want nil", err)
		}
	})
	expectWake := func(what string) {
		t.Helper()
		select {
		case <-wakes:
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: not woken within 2s", what)
		}
	}
	expectWake("listening")
	if _, err := st.ChangeConnectors(context.Background(), connectorsChange("a", 0)); err != nil {
		t.Fatal(err)
	}
	expectWake("change")
	if _, err := st.ChangeConnectors(context.Background(), connectorsChange("b", 0)); !errors.Is(err, postgres.ErrConnectorsConflict) {
		t.Fatalf("stale change = %v, want ErrConnectorsConflict", err)
	}
	// A committed change after the refused one: exactly one wake is
	// owed, so a second means the refused change notified.
	if _, err := st.ChangeConnectors(context.Background(), connectorsChange("c", 1)); err != nil {
		t.Fatal(err)
	}
	expectWake("second change")
	select {
	case <-wakes:
		t.Errorf("a wake more than the committed changes: the refused change notified")
	case <-time.After(500 * time.Millisecond):
	}
}

// TestServedConnectors: a replica's recorded revision is listed, and
// updated by the next record.
func TestServedConnectors(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := st.RecordServedConnectors(ctx, "r1", 1, at); err != nil {
		t.Fatal(err)
	}
	if err := st.RecordServedConnectors(ctx, "r1", 2, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := st.ServedConnectors(ctx, time.Minute)
	if err != nil || len(got) != 1 || got[0].Identity != "r1" || got[0].Revision != 2 || !got[0].AppliedAt.Equal(at.Add(time.Second)) {
		t.Fatalf("ServedConnectors = %+v, %v, want r1 at revision 2", got, err)
	}
	if partners, _ := st.ServedRevisions(ctx, time.Minute); len(partners) != 0 {
		t.Errorf("ServedRevisions (partners) = %+v, want none: the tables are apart", partners)
	}
}
