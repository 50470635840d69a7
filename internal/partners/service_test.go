package partners_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// newService is a Service on a fresh database, checking partners against
// a station directory without partners; it returns the directory too.
func newService(t *testing.T) (*partners.Service, *postgres.Store, string) {
	t.Helper()
	path := stationDir(t)
	base := loadBase(t, path)
	st := pgtest.Store(t)
	return &partners.Service{Store: st, Base: func() *config.File { return base }}, st, filepath.Dir(path)
}

// doc is a partners document of entries.
func doc(entries ...string) []byte { return []byte("partners:\n" + strings.Join(entries, "")) }

// storedState is the partner set and its whole history: what a refused
// change must leave as it was.
type storedState struct {
	Set     postgres.PartnerSet
	History []postgres.PartnerHistoryEntry
}

func stored(t *testing.T, st *postgres.Store) storedState {
	t.Helper()
	set, err := st.Partners(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return storedState{Set: set, History: history(t, st, "")}
}

// TestServicePlan: a document is compared with the stored partners:
// partners not stored are created, changed ones updated from their stored
// version with the diff, equal ones left; with prune, stored partners the
// document does not list are deleted. Apply stores exactly the plan.
func TestServicePlan(t *testing.T) {
	ctx := context.Background()
	svc, st, dir := newService(t)

	seed, err := svc.Plan(ctx, doc(acmeYAML), dir, "seed.yaml", false)
	if err != nil {
		t.Fatalf("Plan(seed) = %v", err)
	}
	if _, err := svc.Apply(ctx, "seed", seed); err != nil {
		t.Fatalf("Apply(seed) = %v", err)
	}
	before := stored(t, st)

	acmeChanged := strings.Replace(acmeYAML, "sign: sha-256", "sign: sha-512\n    compress: true", 1)
	tests := []struct {
		name  string
		give  []byte
		prune bool
		want  []partners.Planned
	}{
		{"unchanged and created", doc(acmeYAML, betaYAML), false, []partners.Planned{
			{AS2ID: "ACME CORP", Op: partners.OpUnchanged, From: 1},
			{AS2ID: "BETA", Op: postgres.PartnerCreate},
		}},
		{"updated and created", doc(acmeChanged, betaYAML), false, []partners.Planned{
			{AS2ID: "ACME CORP", Op: postgres.PartnerUpdate, From: 1, Diff: "+ compress: true\n~ sign: \"sha-256\" → \"sha-512\"\n"},
			{AS2ID: "BETA", Op: postgres.PartnerCreate},
		}},
		{"not listed, kept", doc(betaYAML), false, []partners.Planned{
			{AS2ID: "BETA", Op: postgres.PartnerCreate},
		}},
		{"not listed, pruned", doc(betaYAML), true, []partners.Planned{
			{AS2ID: "BETA", Op: postgres.PartnerCreate},
			{AS2ID: "ACME CORP", Op: postgres.PartnerDelete, From: 1},
		}},
		{"everything listed, nothing pruned", doc(acmeYAML), true, []partners.Planned{
			{AS2ID: "ACME CORP", Op: partners.OpUnchanged, From: 1},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan, err := svc.Plan(ctx, tt.give, dir, "partners.yaml", tt.prune)
			if err != nil {
				t.Fatalf("Plan = %v", err)
			}
			// Creates and deletes list every key; their lines are checked
			// for the keys and against PEM text, the rest exactly.
			for i := range plan.Changes {
				c := &plan.Changes[i]
				switch c.Op {
				case postgres.PartnerCreate:
					if !strings.Contains(c.Diff, "+ as2_id: \""+c.AS2ID+"\"\n") || !strings.Contains(c.Diff, "+ certificate: [certificate ") {
						t.Errorf("Plan create %s diff = %q, want every key added, the certificate described", c.AS2ID, c.Diff)
					}
					c.Diff = ""
				case postgres.PartnerDelete:
					if !strings.Contains(c.Diff, "- as2_id: \""+c.AS2ID+"\"\n") || !strings.Contains(c.Diff, "- certificate: [certificate ") {
						t.Errorf("Plan delete %s diff = %q, want every key removed", c.AS2ID, c.Diff)
					}
					c.Diff = ""
				}
				if strings.Contains(c.Diff, "BEGIN") {
					t.Errorf("Plan %s %s diff = %q holds PEM", c.Op, c.AS2ID, c.Diff)
				}
			}
			if diff := cmp.Diff(tt.want, plan.Changes, cmpopts.IgnoreUnexported(partners.Planned{})); diff != "" {
				t.Errorf("Plan changes mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(before, stored(t, st)); diff != "" {
				t.Errorf("Plan changed the store (-before +after):\n%s", diff)
			}
		})
	}

	// Apply stores the plan: ACME updated to version 2, BETA created.
	plan, err := svc.Plan(ctx, doc(acmeChanged, betaYAML), dir, "partners.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	if n := plan.Changed(); n != 2 {
		t.Errorf("Plan.Changed() = %d, want 2", n)
	}
	rev, err := svc.Apply(ctx, "alice", plan)
	if err != nil {
		t.Fatalf("Apply = %v", err)
	}
	got := stored(t, st)
	if got.Set.Revision != rev || len(got.Set.Partners) != 2 {
		t.Fatalf("after Apply: revision %d, %d partners; want %d, 2", got.Set.Revision, len(got.Set.Partners), rev)
	}
	acme, beta := got.Set.Partners[0], got.Set.Partners[1]
	if acme.Version != 2 || beta.Version != 1 || acme.UpdatedBy != "alice" || !strings.Contains(acme.Spec, "sign: sha-512") || !strings.Contains(beta.Spec, "-----BEGIN CERTIFICATE-----") {
		t.Errorf("after Apply: ACME v%d by %q %q, BETA v%d %q; want ACME v2 by alice signing sha-512, BETA v1 with its certificate inline",
			acme.Version, acme.UpdatedBy, acme.Spec, beta.Version, beta.Spec)
	}
	for i, e := range got.History[:2] {
		if e.Actor != "alice" || e.Revision > rev || e.Diff != plan.Changes[1-i].Diff || e.Op != plan.Changes[1-i].Op {
			t.Errorf("history[%d] = %s %s by %q diff %q; want %s by alice with the planned diff %q", i, e.Op, e.AS2ID, e.Actor, e.Diff, plan.Changes[1-i].Op, plan.Changes[1-i].Diff)
		}
	}
	// Applying the same plan again: ACME is no longer at version 1, and
	// BETA exists. Nothing changes.
	before = stored(t, st)
	if _, err := svc.Apply(ctx, "alice", plan); !errors.Is(err, postgres.ErrPartnerConflict) {
		t.Errorf("Apply(stale plan) = %v, want ErrPartnerConflict", err)
	}
	if diff := cmp.Diff(before, stored(t, st)); diff != "" {
		t.Errorf("stale Apply changed the store (-before +after):\n%s", diff)
	}
}

// TestServicePlanInvalid: a document with a problem anywhere is a
// *config.Error naming the field and line, plans nothing, and so stores
// nothing, even when the partners before the problem are valid.
func TestServicePlanInvalid(t *testing.T) {
	ctx := context.Background()
	svc, st, dir := newService(t)
	seed, err := svc.Plan(ctx, doc(acmeYAML), dir, "seed.yaml", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Apply(ctx, "seed", seed); err != nil {
		t.Fatal(err)
	}
	before := stored(t, st)
	tests := []struct {
		name      string
		give      []byte
		wantField string
		wantLine  int
	}{
		// Line 1 is "partners:", acmeYAML lines 2-5, betaYAML from 6.
		{"bad sign of the second partner", doc(strings.Replace(acmeYAML, "sha-256", "sha-512", 1), betaYAML+"    sign: md5\n"), "partners[1].sign", 9},
		{"unknown key of the second partner", doc(acmeYAML, betaYAML+"    colour: blue\n"), "partners[1].colour", 9},
		{"certificate file missing in the first", doc(strings.Replace(acmeYAML, "acme.crt", "nope.crt", 1), betaYAML), "partners[0].certificate", 4},
		{"the same AS2 ID twice", doc(betaYAML, betaYAML), "partners[1].as2_id", 5},
		{"the station's AS2 ID", doc(acmeYAML, strings.Replace(betaYAML, "BETA", "EDIHUB", 1)), "partners[1].as2_id", 6},
		{"a secret file missing", doc(acmeYAML, betaYAML+"    auth: {user: edi, password_file: beta.pw}\n"), "partners[1].auth.password_file", 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, prune := range []bool{false, true} {
				plan, err := svc.Plan(ctx, tt.give, dir, "partners.yaml", prune)
				var ce *config.Error
				if !errors.As(err, &ce) {
					t.Fatalf("Plan(prune %v) = %+v, %v; want a *config.Error", prune, plan, err)
				}
				if ce.Field != tt.wantField || ce.Line != tt.wantLine || ce.File != "partners.yaml" || ce.Fix == "" {
					t.Errorf("Plan(prune %v) error = %s:%d %s (fix %q); want partners.yaml:%d %s with a fix", prune, ce.File, ce.Line, ce.Field, ce.Fix, tt.wantLine, tt.wantField)
				}
				if len(plan.Changes) != 0 {
					t.Errorf("Plan(prune %v) with an error planned %+v, want nothing", prune, plan.Changes)
				}
				// A caller that applied what it got anyway stores nothing.
				if _, err := svc.Apply(ctx, "mallory", plan); err != nil {
					t.Errorf("Apply(empty plan) = %v", err)
				}
			}
			if diff := cmp.Diff(before, stored(t, st)); diff != "" {
				t.Errorf("an invalid document changed the store (-before +after):\n%s", diff)
			}
		})
	}
}

// TestServicePut: Put creates at expect 0 and updates at the version
// read; a version that is no longer the stored one is a conflict, and
// changes nothing.
func TestServicePut(t *testing.T) {
	ctx := context.Background()
	svc, st, _ := newService(t)
	entry := func(sign string) []byte {
		return inline("as2_id: ACME CORP\nurl: https://as2.acme.example/as2\ncertificate: acme.crt\nsign: " + sign + "\n")
	}
	tests := []struct {
		name        string
		give        []byte
		expect      int64
		wantErr     error
		wantVersion int64 // of ACME after the step
		wantSign    string
	}{
		{"create", entry("sha-256"), 0, nil, 1, "sha-256"},
		{"create again", entry("sha-384"), 0, postgres.ErrPartnerConflict, 1, "sha-256"},
		{"update", entry("sha-512"), 1, nil, 2, "sha-512"},
		{"stale update", entry("sha-384"), 1, postgres.ErrPartnerConflict, 2, "sha-512"},
		{"stale, same profile", entry("sha-512"), 1, postgres.ErrPartnerConflict, 2, "sha-512"},
		{"future version", entry("sha-384"), 7, postgres.ErrPartnerConflict, 2, "sha-512"},
		{"current, same profile: no new version", entry("sha-512"), 2, nil, 2, "sha-512"},
		{"any version", entry("sha-384"), postgres.AnyVersion, nil, 3, "sha-384"},
	}
	for _, tt := range tests {
		before := stored(t, st)
		got, err := svc.Put(ctx, "alice", tt.give, tt.expect)
		if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
			t.Errorf("%s: Put(expect %d) = %v, want %v", tt.name, tt.expect, err, tt.wantErr)
		}
		if err == nil && got.Version != tt.wantVersion {
			t.Errorf("%s: Put(expect %d) returned version %d, want %d", tt.name, tt.expect, got.Version, tt.wantVersion)
		}
		sp, err := st.Partner(ctx, "ACME CORP")
		if err != nil || sp.Version != tt.wantVersion || !strings.Contains(sp.Spec, "sign: "+tt.wantSign+"\n") {
			t.Errorf("%s: stored ACME = v%d %q, %v; want v%d signing %s", tt.name, sp.Version, sp.Spec, err, tt.wantVersion, tt.wantSign)
		}
		if tt.wantErr != nil {
			if diff := cmp.Diff(before, stored(t, st)); diff != "" {
				t.Errorf("%s: a refused Put changed the store (-before +after):\n%s", tt.name, diff)
			}
		}
	}
	if n := len(history(t, st, "ACME CORP")); n != 3 {
		t.Errorf("ACME history = %d entries, want 3", n)
	}

	// An entry with a problem is a *config.Error, and stores nothing.
	before := stored(t, st)
	_, err := svc.Put(ctx, "alice", inline("as2_id: BETA\nurl: https://b.example/as2\ncertificate: beta.crt\nsign: md5\n"), 0)
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Field != "partners[0].sign" {
		t.Errorf("Put(bad sign) = %v, want a *config.Error for partners[0].sign", err)
	}
	if diff := cmp.Diff(before, stored(t, st)); diff != "" {
		t.Errorf("an invalid Put changed the store (-before +after):\n%s", diff)
	}
}

// TestServiceDeleteAndRestore: Restore makes an older version current as
// a new version recorded as a restore, with the diff from the version it
// replaces; a deleted partner comes back the same way. Stale versions are
// conflicts.
func TestServiceDeleteAndRestore(t *testing.T) {
	ctx := context.Background()
	svc, st, _ := newService(t)
	entry := func(sign string) []byte {
		return inline("as2_id: ACME CORP\nurl: https://as2.acme.example/as2\ncertificate: acme.crt\nsign: " + sign + "\n")
	}
	if _, err := svc.Put(ctx, "alice", entry("sha-256"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Put(ctx, "alice", entry("sha-512"), 1); err != nil {
		t.Fatal(err)
	}
	v1, err := st.PartnerVersion(ctx, "ACME CORP", 1)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := svc.Restore(ctx, "bob", "ACME CORP", 1, 1); !errors.Is(err, postgres.ErrPartnerConflict) {
		t.Errorf("Restore(v1, expect stale 1) = %v, want ErrPartnerConflict", err)
	}
	got, err := svc.Restore(ctx, "bob", "ACME CORP", 1, postgres.AnyVersion)
	if err != nil {
		t.Fatalf("Restore(v1) = %v", err)
	}
	if got.Version != 3 || got.Spec != v1 || got.UpdatedBy != "bob" {
		t.Errorf("Restore(v1) = v%d by %q %q; want v3 by bob, the spec of v1 %q", got.Version, got.UpdatedBy, got.Spec, v1)
	}
	h := history(t, st, "ACME CORP")
	want := postgres.PartnerHistoryEntry{Revision: got.Revision, AS2ID: "ACME CORP", Version: 3, Op: postgres.PartnerRestore, Spec: &v1,
		Diff: "~ sign: \"sha-512\" → \"sha-256\"\n", Actor: "bob"}
	if diff := cmp.Diff(want, h[0], cmpopts.IgnoreFields(postgres.PartnerHistoryEntry{}, "ChangedAt")); diff != "" {
		t.Errorf("history after Restore mismatch (-want +got):\n%s", diff)
	}

	// Delete: a stale version is a conflict; the current one deletes.
	if _, err := svc.Delete(ctx, "carol", "ACME CORP", 2); !errors.Is(err, postgres.ErrPartnerConflict) {
		t.Errorf("Delete(expect stale 2) = %v, want ErrPartnerConflict", err)
	}
	if _, err := svc.Delete(ctx, "carol", "ACME CORP", 3); err != nil {
		t.Fatalf("Delete(expect 3) = %v", err)
	}
	if _, err := st.Partner(ctx, "ACME CORP"); !errors.Is(err, postgres.ErrPartnerNotFound) {
		t.Errorf("Partner after Delete = %v, want ErrPartnerNotFound", err)
	}
	if _, err := svc.Delete(ctx, "carol", "ACME CORP", postgres.AnyVersion); !errors.Is(err, postgres.ErrPartnerNotFound) {
		t.Errorf("Delete(deleted) = %v, want ErrPartnerNotFound", err)
	}
	if h := history(t, st, "ACME CORP"); h[0].Op != postgres.PartnerDelete || h[0].Version != 4 || h[0].Spec != nil || h[0].Actor != "carol" ||
		!strings.Contains(h[0].Diff, "- sign: \"sha-256\"\n") {
		t.Errorf("history after Delete = %s v%d spec %v by %q diff %q; want delete v4 without a spec by carol, every key removed", h[0].Op, h[0].Version, h[0].Spec, h[0].Actor, h[0].Diff)
	}

	// A delete's version has no profile to restore; the version before it
	// brings the partner back, as version 5.
	if _, err := svc.Restore(ctx, "dave", "ACME CORP", 4, postgres.AnyVersion); !errors.Is(err, postgres.ErrPartnerNotFound) {
		t.Errorf("Restore(the delete) = %v, want ErrPartnerNotFound", err)
	}
	v2, err := st.PartnerVersion(ctx, "ACME CORP", 2)
	if err != nil {
		t.Fatal(err)
	}
	got, err = svc.Restore(ctx, "dave", "ACME CORP", 2, 0)
	if err != nil {
		t.Fatalf("Restore(v2 of a deleted partner) = %v", err)
	}
	if got.Version != 5 || got.Spec != v2 {
		t.Errorf("Restore(v2 of a deleted partner) = v%d %q; want v5 with the spec of v2", got.Version, got.Spec)
	}
	if h := history(t, st, "ACME CORP"); h[0].Op != postgres.PartnerRestore || h[0].Version != 5 {
		t.Errorf("history after restoring a deleted partner = %s v%d, want restore v5", h[0].Op, h[0].Version)
	}
}
