package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/probe"
)

// PartnerStore reads the stored partners and their health;
// *postgres.Store implements it.
type PartnerStore interface {
	Partners(ctx context.Context) (postgres.PartnerSet, error)
	Partner(ctx context.Context, as2ID string) (postgres.StoredPartner, error)
	PartnerHistory(ctx context.Context, as2ID string, limit int) ([]postgres.PartnerHistoryEntry, error)
	PartnersHealth(ctx context.Context, partners []string) ([]postgres.PartnerHealth, error)
	DeletedPartners(ctx context.Context, limit int) ([]postgres.PartnerHistoryEntry, error)
}

// PartnerService changes a stored partner with the checks of the
// configuration file, as the REST API does; *partners.Service implements
// it. A profile that does not validate is a *config.Error; a change on a
// version that is no longer the stored one is postgres.ErrPartnerConflict.
type PartnerService interface {
	Put(ctx context.Context, actor string, entry []byte, expect int64) (postgres.StoredPartner, error)
	Delete(ctx context.Context, actor, as2ID string, expect int64) (int64, error)
	Restore(ctx context.Context, actor, as2ID string, version, expect int64) (postgres.StoredPartner, error)
}

// historyLimit is how many changes a partner's page lists.
const historyLimit = 20

// partnerRow is one partner of the list.
type partnerRow struct {
	postgres.StoredPartner
	URL    string
	Health postgres.PartnerHealth
	// Expiry is the nearest end of validity of the partner's
	// certificates; zero without one.
	Expiry time.Time
	// ExpiryClass is ok, warn (within 30 days) or bad (expired).
	ExpiryClass string
}

// partnersData is the partner list's.
type partnersData struct {
	Revision int64
	Partners []partnerRow
	// Deleted are the partners deleted lately and not stored again.
	Deleted []postgres.PartnerHistoryEntry
	CanEdit bool
}

// certExpiry is the nearest certificate expiry of each partner served.
func (c *Console) certExpiry(now time.Time) map[string]time.Time {
	out := map[string]time.Time{}
	if c.o.Certificates == nil {
		return out
	}
	for _, ci := range c.o.Certificates(now) {
		if ci.Owner != "partner" {
			continue
		}
		if t, ok := out[ci.Partner]; !ok || ci.NotAfter.Before(t) {
			out[ci.Partner] = ci.NotAfter
		}
	}
	return out
}

func expiryClass(now, t time.Time) string {
	switch {
	case t.IsZero():
		return ""
	case !t.After(now):
		return "bad"
	case t.Sub(now) < 30*24*time.Hour:
		return "warn"
	}
	return "ok"
}

// partnerList shows the stored partners with their health.
func (c *Console) partnerList(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	set, err := c.o.PartnerStore.Partners(ctx)
	if err != nil {
		c.internal(w, r, "Reading the partners", err)
		return
	}
	names := make([]string, len(set.Partners))
	for i, sp := range set.Partners {
		names[i] = sp.AS2ID
	}
	health, err := c.o.PartnerStore.PartnersHealth(ctx, names)
	if err != nil {
		c.internal(w, r, "Reading the partners", err)
		return
	}
	now := c.now()
	expiry := c.certExpiry(now)
	d := partnersData{Revision: set.Revision, CanEdit: c.o.PartnerService != nil}
	if d.Deleted, err = c.o.PartnerStore.DeletedPartners(ctx, deletedLimit); err != nil {
		c.internal(w, r, "Reading the partners", err)
		return
	}
	for i, sp := range set.Partners {
		row := partnerRow{StoredPartner: sp, Expiry: expiry[sp.AS2ID]}
		row.ExpiryClass = expiryClass(now, row.Expiry)
		if i < len(health) {
			row.Health = health[i]
		}
		if spec, err := config.DecodeSpec("stored", sp.Spec); err == nil {
			row.URL = spec.URL
		}
		d.Partners = append(d.Partners, row)
	}
	c.render(w, r, http.StatusOK, "partners", c.view(r, "Partners", "partners", d))
}

// deletedLimit is how many deleted partners the list shows.
const deletedLimit = 20

// historyView is one change of a partner; Restorable when its profile
// can be made the current one again (it has one, and is not the current).
type historyView struct {
	postgres.PartnerHistoryEntry
	Lines      []string
	Restorable bool
}

// partnerData is a partner's page's.
type partnerData struct {
	P      postgres.StoredPartner
	Health postgres.PartnerHealth
	Certs  []config.CertificateInfo
	// YAML is the profile shown, or the one an admin sent back with an
	// error.
	YAML    string
	Version int64
	History []historyView
	// Error, Field, Line and Fix explain a change refused.
	Error, Field, Fix string
	Line              int
	// Test is the report of a connectivity test just run.
	Test       *probe.Report
	CanTest    bool
	CanEdit    bool
	MessagesAt string
	// Deleted is the partner's deletion when it is no longer stored: the
	// page shows its history, to restore a version.
	Deleted *postgres.PartnerHistoryEntry
}

// partnerID is the AS2 ID of the path.
func partnerID(r *http.Request) string { return r.PathValue("as2id") }

// partnerPath is the console path of a partner's page.
func partnerPath(id string) string { return Prefix + "/partners/" + url.PathEscape(id) }

// loadPartner fills the page of partner id; false when it answered.
func (c *Console) loadPartner(w http.ResponseWriter, r *http.Request, id string) (partnerData, bool) {
	ctx := r.Context()
	d := partnerData{CanTest: c.o.TestPartner != nil, CanEdit: c.o.PartnerService != nil,
		MessagesAt: Prefix + "/messages?" + url.Values{"partner": {id}}.Encode()}
	hist, err := c.o.PartnerStore.PartnerHistory(ctx, id, historyLimit)
	if err != nil {
		c.internal(w, r, "Reading the partner", err)
		return partnerData{}, false
	}
	sp, err := c.o.PartnerStore.Partner(ctx, id)
	switch {
	case errors.Is(err, postgres.ErrPartnerNotFound) && len(hist) > 0 && hist[0].Op == postgres.PartnerDelete:
		d.Deleted, d.P.AS2ID, d.CanTest = &hist[0], id, false
	case errors.Is(err, postgres.ErrPartnerNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no partner %q (AS2 IDs are case-sensitive).", id))
		return partnerData{}, false
	case err != nil:
		c.internal(w, r, "Reading the partner", err)
		return partnerData{}, false
	default:
		d.P, d.YAML, d.Version = sp, sp.Spec, sp.Version
		if !c.partnerHealth(w, r, &d) {
			return partnerData{}, false
		}
	}
	for _, e := range hist {
		hv := historyView{PartnerHistoryEntry: e, Restorable: e.Spec != nil && (d.Deleted != nil || e.Version != d.Version)}
		for _, line := range strings.Split(strings.TrimRight(e.Diff, "\n"), "\n") {
			if line != "" {
				hv.Lines = append(hv.Lines, line)
			}
		}
		d.History = append(d.History, hv)
	}
	return d, true
}

// partnerHealth fills in the health and certificates of a stored
// partner; false when it answered.
func (c *Console) partnerHealth(w http.ResponseWriter, r *http.Request, d *partnerData) bool {
	id := d.P.AS2ID
	h, err := c.o.PartnerStore.PartnersHealth(r.Context(), []string{id})
	if err != nil {
		c.internal(w, r, "Reading the partner", err)
		return false
	}
	if len(h) == 1 {
		d.Health = h[0]
	}
	if c.o.Certificates != nil {
		for _, ci := range c.o.Certificates(c.now()) {
			if ci.Owner == "partner" && ci.Partner == id {
				d.Certs = append(d.Certs, ci)
			}
		}
	}
	return true
}

// partnerPage shows a partner: its profile (an admin edits it), health,
// certificates and history.
func (c *Console) partnerPage(w http.ResponseWriter, r *http.Request) {
	d, ok := c.loadPartner(w, r, partnerID(r))
	if !ok {
		return
	}
	c.render(w, r, http.StatusOK, "partner", c.view(r, d.P.AS2ID, "partners", d))
}

// partnerTest runs the connectivity test against a partner and shows its
// report on the partner's page.
func (c *Console) partnerTest(w http.ResponseWriter, r *http.Request) {
	id := partnerID(r)
	rep, found := c.o.TestPartner(r.Context(), id)
	if !found {
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("No partner %q is served (AS2 IDs are case-sensitive).", id))
		return
	}
	c.audit(r, "partner.test", id, map[string]any{"ok": rep.OK})
	d, ok := c.loadPartner(w, r, id)
	if !ok {
		return
	}
	d.Test = &rep
	c.render(w, r, http.StatusOK, "partner", c.view(r, d.P.AS2ID, "partners", d))
}
