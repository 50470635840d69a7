package partners

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
)

// Store is what Service reads and writes; *postgres.Store implements it.
type Store interface {
	Partners(ctx context.Context) (postgres.PartnerSet, error)
	Partner(ctx context.Context, as2ID string) (postgres.StoredPartner, error)
	ChangePartners(ctx context.Context, actor string, changes []postgres.PartnerChange) (int64, error)
	PartnerHistory(ctx context.Context, as2ID string, limit int) ([]postgres.PartnerHistoryEntry, error)
	PartnerVersion(ctx context.Context, as2ID string, version int64) (string, error)
	ServedRevisions(ctx context.Context, seenWithin time.Duration) ([]postgres.ReplicaRevision, error)
}

// Service changes the stored partners: for the REST API and edihub
// partners. Every change is validated with the checks of the
// configuration file against the station file (Base) first; a change that
// does not validate stores nothing.
type Service struct {
	Store Store
	// Base is the configuration file the partners are checked against:
	// its stations and the directory its secrets are read from.
	Base func() *config.File
	// SecretsOptional accepts secret files missing on this machine (the
	// CLI away from the replicas) with a warning.
	SecretsOptional bool
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Planned is one change a document makes.
type Planned struct {
	AS2ID string `json:"as2_id"`
	// Op is create, update, delete or unchanged.
	Op string `json:"op"`
	// From is the stored version changed (0 for a create).
	From int64  `json:"from_version,omitempty"`
	Diff string `json:"diff,omitempty"`

	spec *string
}

// OpUnchanged is the Op of a partner a document leaves as it is.
const OpUnchanged = "unchanged"

// Plan is what applying a document would do.
type Plan struct {
	Changes  []Planned `json:"changes"`
	Warnings []string  `json:"warnings,omitempty"`
}

// Changed counts the changes that are not OpUnchanged.
func (p Plan) Changed() int {
	n := 0
	for _, c := range p.Changes {
		if c.Op != OpUnchanged {
			n++
		}
	}
	return n
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Plan validates a partners document (see config.ParsePartnerDoc) and
// compares it with the stored partners: creates, updates and, with prune,
// deletes of the partners the document does not list. An invalid document
// is a *config.Error and plans nothing.
func (s *Service) Plan(ctx context.Context, data []byte, dir, name string, prune bool) (Plan, error) {
	return s.plan(ctx, data, dir, name, prune, false)
}

// plan is Plan; inlineOnly refuses certificates given as paths.
func (s *Service) plan(ctx context.Context, data []byte, dir, name string, prune, inlineOnly bool) (Plan, error) {
	doc, err := config.ParsePartnerDoc(data, dir, name, s.Base(), config.PartnerDocOptions{Now: s.Now, SecretsOptional: s.SecretsOptional, InlineOnly: inlineOnly})
	if err != nil {
		return Plan{}, err
	}
	set, err := s.Store.Partners(ctx)
	if err != nil {
		return Plan{}, err
	}
	stored := make(map[string]postgres.StoredPartner, len(set.Partners))
	for _, sp := range set.Partners {
		stored[sp.AS2ID] = sp
	}
	plan := Plan{Changes: []Planned{}, Warnings: doc.Warnings}
	listed := map[string]bool{}
	for i := range doc.Specs {
		spec := doc.Specs[i]
		listed[spec.AS2ID] = true
		text, err := config.EncodeSpec(spec)
		if err != nil {
			return Plan{}, err
		}
		sp, ok := stored[spec.AS2ID]
		switch {
		case !ok:
			plan.Changes = append(plan.Changes, Planned{AS2ID: spec.AS2ID, Op: postgres.PartnerCreate, Diff: Diff(nil, &spec), spec: &text})
		case sp.Spec == text:
			plan.Changes = append(plan.Changes, Planned{AS2ID: spec.AS2ID, Op: OpUnchanged, From: sp.Version, spec: &text})
		default:
			old, err := config.DecodeSpec(fmt.Sprintf("stored partner %q", sp.AS2ID), sp.Spec)
			if err != nil {
				return Plan{}, err
			}
			plan.Changes = append(plan.Changes, Planned{AS2ID: spec.AS2ID, Op: postgres.PartnerUpdate, From: sp.Version, Diff: Diff(&old, &spec), spec: &text})
		}
	}
	if prune {
		for _, sp := range set.Partners {
			if listed[sp.AS2ID] {
				continue
			}
			old, _ := config.DecodeSpec(fmt.Sprintf("stored partner %q", sp.AS2ID), sp.Spec)
			plan.Changes = append(plan.Changes, Planned{AS2ID: sp.AS2ID, Op: postgres.PartnerDelete, From: sp.Version, Diff: Diff(&old, nil)})
		}
	}
	return plan, nil
}

// Apply stores the changes of plan in one transaction, by actor, and
// returns the new revision. A partner changed by someone else since the
// plan was made refuses the whole plan (postgres.ErrPartnerConflict).
func (s *Service) Apply(ctx context.Context, actor string, plan Plan) (int64, error) {
	var changes []postgres.PartnerChange
	for _, c := range plan.Changes {
		if c.Op == OpUnchanged {
			continue
		}
		changes = append(changes, postgres.PartnerChange{AS2ID: c.AS2ID, Op: c.Op, Spec: c.spec, Expect: c.From, Diff: c.Diff})
	}
	return s.Store.ChangePartners(ctx, actor, changes)
}

// Put creates (version 0) or updates (the version the caller read) one
// partner from its entry in YAML or JSON, whose certificates must be PEM
// text (a path would be read on this replica). It returns the stored
// partner. Errors of validation are *config.Error, their lines counted
// in a document "partners:" followed by entry as its one item (one more
// than entry's own).
func (s *Service) Put(ctx context.Context, actor string, entry []byte, expect int64) (postgres.StoredPartner, error) {
	return s.put(ctx, actor, config.EntryDoc(string(entry)), expect, "")
}

func (s *Service) put(ctx context.Context, actor string, doc []byte, expect int64, op string) (postgres.StoredPartner, error) {
	plan, err := s.plan(ctx, doc, s.Base().Dir(), "request", false, true)
	if err != nil {
		return postgres.StoredPartner{}, err
	}
	if len(plan.Changes) != 1 {
		return postgres.StoredPartner{}, &config.Error{File: "request", Msg: fmt.Sprintf("%d partner entries, want one", len(plan.Changes)), Fix: "send one partner's keys"}
	}
	c := plan.Changes[0]
	if c.Op == OpUnchanged && expect == c.From {
		return s.Store.Partner(ctx, c.AS2ID)
	}
	if c.Op == OpUnchanged {
		// Same profile, but the caller's version is not the stored one:
		// a conflict all the same.
		c.Op, c.Diff = postgres.PartnerUpdate, ""
	}
	if op != "" {
		c.Op = op
	}
	if _, err := s.Store.ChangePartners(ctx, actor, []postgres.PartnerChange{{AS2ID: c.AS2ID, Op: c.Op, Spec: c.spec, Expect: expect, Diff: c.Diff}}); err != nil {
		return postgres.StoredPartner{}, err
	}
	return s.Store.Partner(ctx, c.AS2ID)
}

// Delete removes a partner; expect is the version the caller read, or
// postgres.AnyVersion.
func (s *Service) Delete(ctx context.Context, actor, as2ID string, expect int64) (int64, error) {
	sp, err := s.Store.Partner(ctx, as2ID)
	if err != nil {
		return 0, err
	}
	old, _ := config.DecodeSpec("stored", sp.Spec)
	return s.Store.ChangePartners(ctx, actor, []postgres.PartnerChange{{AS2ID: as2ID, Op: postgres.PartnerDelete, Expect: expect, Diff: Diff(&old, nil)}})
}

// Restore makes version of a partner (from its history) the current one,
// as a new version, validated like any change. expect is the version the
// caller read, or postgres.AnyVersion; 0 brings back a deleted partner.
func (s *Service) Restore(ctx context.Context, actor, as2ID string, version, expect int64) (postgres.StoredPartner, error) {
	text, err := s.Store.PartnerVersion(ctx, as2ID, version)
	if err != nil {
		return postgres.StoredPartner{}, err
	}
	if expect == postgres.AnyVersion {
		sp, err := s.Store.Partner(ctx, as2ID)
		switch {
		case errors.Is(err, postgres.ErrPartnerNotFound):
			expect = 0
		case err != nil:
			return postgres.StoredPartner{}, err
		default:
			expect = sp.Version
		}
	}
	return s.put(ctx, actor, config.EntryDoc(text), expect, postgres.PartnerRestore)
}
