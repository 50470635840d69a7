package connectors

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
)

// Store is what Service reads and writes; *postgres.Store implements it.
type Store interface {
	Connectors(ctx context.Context) (postgres.ConnectorsRevision, error)
	ConnectorsAt(ctx context.Context, revision int64) (postgres.ConnectorsRevision, error)
	ChangeConnectors(ctx context.Context, c postgres.ConnectorsChange) (int64, error)
	ConnectorsHistory(ctx context.Context, limit int, before int64) ([]postgres.ConnectorsRevision, error)
}

// Service changes the connectors document: for the REST API and edihub
// connectors. A document is validated (config.ParseConnectors with
// Options) before anything is stored; one that does not validate stores
// nothing.
type Service struct {
	Store Store
	// Options are the checks of a document: the secrets and folders
	// directories it is checked against, and whether it is checked away
	// from the replicas (the command line). Name is set per call.
	Options config.ConnectorsOptions
}

// Change ops.
const (
	OpCreate  = "create"
	OpUpdate  = "update"
	OpDelete  = "delete"
	OpReorder = "reorder"
)

// Change is one difference between the stored document and a new one.
type Change struct {
	// Kind is destination, source, route, or routes (their order).
	Kind string `json:"kind"`
	Name string `json:"name,omitempty"`
	Op   string `json:"op"`
	// Fields are the settings an update changes ("sftp.host").
	Fields []string `json:"fields,omitempty"`
}

// String is the change in one line, as the history's summary lists it.
func (c Change) String() string {
	s := c.Op + " " + c.Kind
	if c.Name != "" {
		s += " " + c.Name
	}
	if len(c.Fields) > 0 {
		s += ": " + strings.Join(c.Fields, ", ")
	}
	return s
}

// Plan is what applying a document would do.
type Plan struct {
	// From is the revision the plan was made against.
	From     int64    `json:"from_revision"`
	Changes  []Change `json:"changes"`
	Warnings []string `json:"warnings,omitempty"`
	// Layout is true when the text differs from the stored one while
	// the connectors and routes do not (comments, order of keys).
	Layout bool `json:"layout_only,omitempty"`

	document string
}

// Changed reports whether applying the plan stores a new revision.
func (p Plan) Changed() bool { return len(p.Changes) > 0 || p.Layout }

// Summary is the plan's changes, one per line.
func (p Plan) Summary() string {
	if len(p.Changes) == 0 && p.Layout {
		return "comments or layout only\n"
	}
	var b strings.Builder
	for _, c := range p.Changes {
		b.WriteString(c.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Plan validates data, a connectors document called name (in errors),
// and compares it with the stored one. An invalid document is a
// *config.Error and plans nothing.
func (s *Service) Plan(ctx context.Context, data []byte, name string) (Plan, error) {
	o := s.Options
	o.Name = name
	next, err := config.ParseConnectors(data, o)
	if err != nil {
		return Plan{}, err
	}
	cur, err := s.Store.Connectors(ctx)
	if err != nil {
		return Plan{}, err
	}
	// The stored document was valid when it was stored; parsed here only
	// to compare, so its secrets are not looked up again.
	prev, err := config.ParseConnectors([]byte(cur.Document), config.ConnectorsOptions{Name: fmt.Sprintf("revision %d", cur.Revision), Away: true})
	if err != nil {
		prev = &config.Connectors{}
	}
	p := Plan{From: cur.Revision, Changes: Diff(prev, next), Warnings: next.Warnings, document: string(data)}
	if p.Changes == nil {
		p.Changes = []Change{}
	}
	p.Layout = len(p.Changes) == 0 && string(data) != cur.Document
	return p, nil
}

// Apply stores the plan's document as the next revision, when the
// stored one is still expect (postgres.AnyRevision: whatever it is),
// and returns its number: postgres.ErrConnectorsConflict when it is
// not. audit (its Actor, Remote and Detail; Action and Target are set
// here) is recorded in the same transaction. A plan that changes
// nothing stores nothing and returns its From.
func (s *Service) Apply(ctx context.Context, p Plan, expect int64, audit postgres.AuditEntry) (int64, error) {
	return s.apply(ctx, p, expect, 0, audit)
}

func (s *Service) apply(ctx context.Context, p Plan, expect, restoredFrom int64, audit postgres.AuditEntry) (int64, error) {
	if expect != postgres.AnyRevision && expect != p.From {
		return 0, fmt.Errorf("%w: the change was made against revision %d, the plan against revision %d", postgres.ErrConnectorsConflict, expect, p.From)
	}
	if !p.Changed() && restoredFrom == 0 {
		return p.From, nil
	}
	audit.Action, audit.Target = "connectors.apply", "connectors"
	if restoredFrom > 0 {
		audit.Action = "connectors.restore"
	}
	audit.Detail = maps.Clone(audit.Detail)
	if audit.Detail == nil {
		audit.Detail = map[string]any{}
	}
	changes := []string{}
	for _, c := range p.Changes {
		changes = append(changes, c.String())
	}
	audit.Detail["changes"] = changes
	// The plan's From guards the change: a document stored since the
	// plan was made refuses it even when the caller gave no revision.
	return s.Store.ChangeConnectors(ctx, postgres.ConnectorsChange{Document: p.document, Summary: p.Summary(), Expect: p.From, RestoredFrom: restoredFrom, Audit: audit})
}

// Restore makes revision (from the history) the current document again,
// as a new revision, validated as any change is: a revision that names
// a secret no longer there is refused. expect is as Apply's.
func (s *Service) Restore(ctx context.Context, revision, expect int64, audit postgres.AuditEntry) (int64, Plan, error) {
	old, err := s.Store.ConnectorsAt(ctx, revision)
	if err != nil {
		return 0, Plan{}, err
	}
	p, err := s.Plan(ctx, []byte(old.Document), fmt.Sprintf("revision %d", revision))
	if err != nil {
		return 0, Plan{}, err
	}
	rev, err := s.apply(ctx, p, expect, revision, audit)
	return rev, p, err
}

// History lists the stored revisions, newest first (see
// postgres.Store.ConnectorsHistory).
func (s *Service) History(ctx context.Context, limit int, before int64) ([]postgres.ConnectorsRevision, error) {
	return s.Store.ConnectorsHistory(ctx, limit, before)
}

// Diff lists what changes from prev to next: destinations, sources and
// routes created, updated (with the settings changed) and deleted, in
// next's order then prev's, and a reorder of the routes that both hold
// (first match wins, so order matters).
func Diff(prev, next *config.Connectors) []Change {
	var out []Change
	out = append(out, diffEntries("destination", entries(prev.Destinations, func(d config.Destination) string { return d.Name }),
		entries(next.Destinations, func(d config.Destination) string { return d.Name }))...)
	out = append(out, diffEntries("source", entries(prev.Sources, func(s config.PickupSource) string { return s.Name }),
		entries(next.Sources, func(s config.PickupSource) string { return s.Name }))...)
	pr := entries(prev.Routes, func(r config.Route) string { return r.Name })
	nr := entries(next.Routes, func(r config.Route) string { return r.Name })
	out = append(out, diffEntries("route", pr, nr)...)
	if !slices.Equal(common(pr, nr), common(nr, pr)) {
		out = append(out, Change{Kind: "routes", Op: OpReorder})
	}
	return out
}

// entry is one named entry of a document, flattened to its settings.
type entry struct {
	name     string
	settings map[string]string
}

func entries[T any](list []T, name func(T) string) []entry {
	out := make([]entry, 0, len(list))
	for _, v := range list {
		out = append(out, entry{name: name(v), settings: flatten(v)})
	}
	return out
}

// flatten is v's settings as JSON paths and values.
func flatten(v any) map[string]string {
	b, _ := json.Marshal(v)
	var m any
	_ = json.Unmarshal(b, &m)
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if o, ok := v.(map[string]any); ok {
			for k, x := range o {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, x)
			}
			return
		}
		b, _ := json.Marshal(v)
		out[prefix] = string(b)
	}
	walk("", m)
	return out
}

func diffEntries(kind string, prev, next []entry) []Change {
	old := map[string]entry{}
	for _, e := range prev {
		old[e.name] = e
	}
	var out []Change
	seen := map[string]bool{}
	for _, e := range next {
		seen[e.name] = true
		o, ok := old[e.name]
		if !ok {
			out = append(out, Change{Kind: kind, Name: e.name, Op: OpCreate})
			continue
		}
		var fields []string
		for k, v := range e.settings {
			if o.settings[k] != v {
				fields = append(fields, k)
			}
		}
		for k := range o.settings {
			if _, ok := e.settings[k]; !ok {
				fields = append(fields, k)
			}
		}
		if len(fields) > 0 {
			slices.Sort(fields)
			out = append(out, Change{Kind: kind, Name: e.name, Op: OpUpdate, Fields: fields})
		}
	}
	for _, e := range prev {
		if !seen[e.name] {
			out = append(out, Change{Kind: kind, Name: e.name, Op: OpDelete})
		}
	}
	return out
}

// common is the names of a, in a's order, that b holds too.
func common(a, b []entry) []string {
	in := map[string]bool{}
	for _, e := range b {
		in[e.name] = true
	}
	var out []string
	for _, e := range a {
		if in[e.name] {
			out = append(out, e.name)
		}
	}
	return out
}
