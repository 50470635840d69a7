package connectors_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/connectors"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

var alice = postgres.AuditEntry{Actor: "user:alice", Remote: "192.0.2.7"}

func newService(t *testing.T, st *postgres.Store) *connectors.Service {
	secrets, folders := dirs(t)
	return &connectors.Service{Store: st, Options: config.ConnectorsOptions{SecretsDir: secrets, FoldersDir: folders}}
}

// TestServicePlanApply: a plan lists what a document changes against
// the stored one; applying it stores a revision with that summary and
// an audit entry; a plan of the same text changes nothing.
func TestServicePlanApply(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	svc := newService(t, st)

	p, err := svc.Plan(ctx, []byte(docV1), "v1.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []connectors.Change{{Kind: "destination", Name: "erp-inbox", Op: "create"}, {Kind: "route", Name: "all", Op: "create"}}
	if diff := cmp.Diff(want, p.Changes); diff != "" || p.From != 0 {
		t.Fatalf("Plan(v1) from %d, changes (-want +got):\n%s", p.From, diff)
	}
	rev, err := svc.Apply(ctx, p, 0, alice)
	if err != nil || rev != 1 {
		t.Fatalf("Apply(v1) = %d, %v, want 1", rev, err)
	}

	p, err = svc.Plan(ctx, []byte(docV2), "v2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want = []connectors.Change{
		{Kind: "destination", Name: "erp-inbox", Op: "update", Fields: []string{"folder.path"}},
		{Kind: "destination", Name: "erp-sftp", Op: "create"},
		{Kind: "route", Name: "acme", Op: "create"},
	}
	if diff := cmp.Diff(want, p.Changes); diff != "" || p.From != 1 {
		t.Fatalf("Plan(v2) from %d, changes (-want +got):\n%s", p.From, diff)
	}
	if rev, err := svc.Apply(ctx, p, 1, alice); err != nil || rev != 2 {
		t.Fatalf("Apply(v2) = %d, %v, want 2", rev, err)
	}
	cur, err := st.Connectors(ctx)
	if err != nil || cur.Document != docV2 || cur.Actor != "user:alice" {
		t.Fatalf("stored = %+v, %v, want v2's text by user:alice", cur, err)
	}
	if wantSum := "update destination erp-inbox: folder.path\ncreate destination erp-sftp\ncreate route acme\n"; cur.Summary != wantSum {
		t.Errorf("summary = %q, want %q", cur.Summary, wantSum)
	}
	audit, err := st.AuditLog(ctx, postgres.AuditQuery{Action: "connectors.apply"})
	if err != nil || len(audit) != 2 || audit[0].Detail["revision"] != float64(2) || audit[0].Remote != "192.0.2.7" {
		t.Errorf("audit = %+v, %v, want two connectors.apply entries, the last of revision 2", audit, err)
	}

	// The same text again: nothing to store.
	p, err = svc.Plan(ctx, []byte(docV2), "v2.yaml")
	if err != nil || p.Changed() {
		t.Fatalf("Plan(v2 again) = %+v, %v, want no change", p, err)
	}
	if rev, err := svc.Apply(ctx, p, 2, alice); rev != 2 || err != nil {
		t.Errorf("Apply(no change) = %d, %v, want 2 and nothing stored", rev, err)
	}
	// A comment only: a revision, said to be layout only.
	p, err = svc.Plan(ctx, []byte("# the ERP\n"+docV2), "v2.yaml")
	if err != nil || !p.Changed() || len(p.Changes) != 0 || !p.Layout {
		t.Errorf("Plan(v2 with a comment) = %+v, %v, want a layout-only change", p, err)
	}
}

// TestServiceReorderAndDelete: moving a route is a change (first match
// wins); removing entries deletes them.
func TestServiceReorderAndDelete(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	svc := newService(t, st)
	apply(t, svc, docV2, 0)
	reordered := `destinations:
  - name: erp-sftp
    type: sftp
    sftp: {host: sftp.example.com, user: edi, key_secret: sftp-key, host_key: "` + hostKey + `"}
routes:
  - name: all
    to: [erp-sftp]
  - name: acme
    match: {partners: [acme]}
    to: [erp-sftp]
`
	p, err := svc.Plan(ctx, []byte(reordered), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []connectors.Change{
		{Kind: "destination", Name: "erp-inbox", Op: "delete"},
		{Kind: "route", Name: "all", Op: "update", Fields: []string{"to"}},
		{Kind: "routes", Op: "reorder"},
	}
	if diff := cmp.Diff(want, p.Changes); diff != "" {
		t.Errorf("Plan(reordered) changes (-want +got):\n%s", diff)
	}
}

// TestServiceConflict: a change made against a revision that is no
// longer the stored one is refused and stores nothing, whether the
// caller's revision or the plan's is stale.
func TestServiceConflict(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	svc := newService(t, st)
	apply(t, svc, docV1, 0)

	p, err := svc.Plan(ctx, []byte(docV2), "v2.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Apply(ctx, p, 0, alice); !errors.Is(err, postgres.ErrConnectorsConflict) {
		t.Errorf("Apply(expect 0 at 1) = %v, want ErrConnectorsConflict", err)
	}
	// Someone else applies between this plan and its apply.
	other, err := svc.Plan(ctx, []byte("# other\n"+docV1), "o.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Apply(ctx, other, 1, alice); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Apply(ctx, p, postgres.AnyRevision, alice); !errors.Is(err, postgres.ErrConnectorsConflict) {
		t.Errorf("Apply(a plan made at 1, document at 2) = %v, want ErrConnectorsConflict", err)
	}
	if n, _ := st.ConnectorsRevisionNumber(ctx); n != 2 {
		t.Errorf("revision = %d, want 2: the refused changes stored nothing", n)
	}
}

// TestServiceInvalid: a document that does not validate plans nothing
// and says why; a secret missing from the secrets directory is named
// with the setting.
func TestServiceInvalid(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	svc := newService(t, st)
	_, err := svc.Plan(ctx, []byte(strings.Replace(docV2, "sftp-key", "gone-key", 1)), "bad.yaml")
	var ce *config.Error
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `"gone-key": not found in the secrets directory`) || !strings.Contains(err.Error(), "EDIHUB_SECRETS_DIR") {
		t.Fatalf("Plan(missing secret) = %v, want a *config.Error naming gone-key and EDIHUB_SECRETS_DIR", err)
	}
	if ce.Field != "destinations[1].sftp.key_secret" {
		t.Errorf("Field = %q, want destinations[1].sftp.key_secret", ce.Field)
	}
}

// TestServiceRestore: restoring an old revision stores its document as a
// new revision, audited as a restore; an unknown revision is not found.
func TestServiceRestore(t *testing.T) {
	ctx := context.Background()
	st := pgtest.Store(t)
	svc := newService(t, st)
	apply(t, svc, docV1, 0)
	apply(t, svc, docV2, 1)
	rev, p, err := svc.Restore(ctx, 1, 2, alice)
	if err != nil || rev != 3 {
		t.Fatalf("Restore(1) = %d, %v, want 3", rev, err)
	}
	if len(p.Changes) == 0 {
		t.Errorf("Restore(1) plan = %+v, want v2 → v1's changes", p)
	}
	cur, _ := st.Connectors(ctx)
	if cur.Document != docV1 || cur.RestoredFrom != 1 {
		t.Errorf("stored after restore = %+v, want v1's text restored from 1", cur)
	}
	audit, err := st.AuditLog(ctx, postgres.AuditQuery{Action: "connectors.restore"})
	if err != nil || len(audit) != 1 || audit[0].Detail["restored_from"] != float64(1) {
		t.Errorf("audit = %+v, %v, want one connectors.restore from 1", audit, err)
	}
	if _, _, err := svc.Restore(ctx, 42, postgres.AnyRevision, alice); !errors.Is(err, postgres.ErrConnectorsRevisionNotFound) {
		t.Errorf("Restore(42) = %v, want ErrConnectorsRevisionNotFound", err)
	}
	hist, err := svc.History(ctx, 10, 0)
	if err != nil || len(hist) != 3 {
		t.Errorf("History = %+v, %v, want 3 revisions", hist, err)
	}
}

// apply plans and applies doc against expect.
func apply(t *testing.T, svc *connectors.Service, doc string, expect int64) int64 {
	t.Helper()
	p, err := svc.Plan(context.Background(), []byte(doc), "doc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rev, err := svc.Apply(context.Background(), p, expect, alice)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}
