package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/auth"
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
}

// PartnerService changes a stored partner with the checks of the
// configuration file, as the REST API does; *partners.Service implements
// it. A profile that does not validate is a *config.Error; a change on a
// version that is no longer the stored one is postgres.ErrPartnerConflict.
type PartnerService interface {
	Put(ctx context.Context, actor string, entry []byte, expect int64) (postgres.StoredPartner, error)
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
	d := partnersData{Revision: set.Revision}
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

// historyView is one change of a partner.
type historyView struct {
	postgres.PartnerHistoryEntry
	Lines []string
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
	MessagesAt string
}

// partnerID is the AS2 ID of the path.
func partnerID(r *http.Request) string { return r.PathValue("as2id") }

// partnerPath is the console path of a partner's page.
func partnerPath(id string) string { return Prefix + "/partners/" + url.PathEscape(id) }

// loadPartner fills the page of partner id; false when it answered.
func (c *Console) loadPartner(w http.ResponseWriter, r *http.Request, id string) (partnerData, bool) {
	ctx := r.Context()
	sp, err := c.o.PartnerStore.Partner(ctx, id)
	if errors.Is(err, postgres.ErrPartnerNotFound) {
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no partner %q (AS2 IDs are case-sensitive).", id))
		return partnerData{}, false
	}
	if err != nil {
		c.internal(w, r, "Reading the partner", err)
		return partnerData{}, false
	}
	d := partnerData{P: sp, YAML: sp.Spec, Version: sp.Version, CanTest: c.o.TestPartner != nil,
		MessagesAt: Prefix + "/messages?" + url.Values{"partner": {id}}.Encode()}
	h, err := c.o.PartnerStore.PartnersHealth(ctx, []string{id})
	if err != nil {
		c.internal(w, r, "Reading the partner", err)
		return partnerData{}, false
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
	hist, err := c.o.PartnerStore.PartnerHistory(ctx, id, historyLimit)
	if err != nil {
		c.internal(w, r, "Reading the partner", err)
		return partnerData{}, false
	}
	for _, e := range hist {
		hv := historyView{PartnerHistoryEntry: e}
		for _, line := range strings.Split(strings.TrimRight(e.Diff, "\n"), "\n") {
			if line != "" {
				hv.Lines = append(hv.Lines, line)
			}
		}
		d.History = append(d.History, hv)
	}
	return d, true
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

// maxProfile bounds a profile sent from the partner page.
const maxProfile = 1 << 20

// partnerUpdate stores a profile an admin edited, checked as the API
// checks it, against the version the admin read (hidden in the form): a
// change made meanwhile by someone else is not overwritten.
func (c *Console) partnerUpdate(w http.ResponseWriter, r *http.Request) {
	id := partnerID(r)
	r.Body = http.MaxBytesReader(w, r.Body, maxProfile)
	text, versionField := r.PostFormValue("profile"), r.PostFormValue("version")
	refuse := func(status int, msg, field string, line int, fix string) {
		d, ok := c.loadPartner(w, r, id)
		if !ok {
			return
		}
		d.YAML, d.Error, d.Field, d.Line, d.Fix = text, msg, field, line, fix
		if v, err := strconv.ParseInt(versionField, 10, 64); err == nil {
			d.Version = v
		}
		c.render(w, r, status, "partner", c.view(r, d.P.AS2ID, "partners", d))
	}
	expect, err := strconv.ParseInt(versionField, 10, 64)
	if err != nil || expect <= 0 {
		refuse(http.StatusBadRequest, "The form lacks the version it was made from: reload the page and make the change again.", "", 0, "")
		return
	}
	if strings.TrimSpace(text) == "" {
		refuse(http.StatusBadRequest, "The profile is empty.", "", 0, "Write the partner's keys: as2_id, url, certificate, ...")
		return
	}
	spec, err := config.DecodeSpec("profile", text)
	var ce *config.Error
	switch {
	case errors.As(err, &ce):
		refuse(http.StatusUnprocessableEntity, ce.Msg, ce.Field, ce.Line, ce.Fix)
		return
	case err != nil:
		refuse(http.StatusUnprocessableEntity, err.Error(), "", 0, "")
		return
	case spec.AS2ID != id:
		refuse(http.StatusUnprocessableEntity, fmt.Sprintf("The profile's as2_id %q is not this partner's, %q.", spec.AS2ID, id), "as2_id", 0,
			"An AS2 ID is not renamed: create the new partner and delete the old one.")
		return
	}
	actor := auth.AuditFromRequest(r)
	sp, err := c.o.PartnerService.Put(r.Context(), actor.Actor+" from "+actor.Remote, []byte(text), expect)
	switch {
	case errors.As(err, &ce):
		// The entry was checked as the one item of a partners list: its
		// lines are one further down than in the text area.
		line := ce.Line
		if line > 1 {
			line--
		}
		refuse(http.StatusUnprocessableEntity, ce.Msg, strings.TrimPrefix(ce.Field, "partners[0]."), line, ce.Fix)
		return
	case errors.Is(err, postgres.ErrPartnerConflict):
		refuse(http.StatusConflict, "Someone changed this partner since you opened the page: your change was not stored. "+
			"The profile below is yours; copy what you need, reload the page, and make the change on the current version.", "", 0, "")
		return
	case errors.Is(err, postgres.ErrPartnerNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no partner %q (it was deleted meanwhile).", id))
		return
	case err != nil:
		c.internal(w, r, "Storing the partner", err)
		return
	}
	if sp.Version != expect {
		c.audit(r, "partner.update", sp.AS2ID, map[string]any{"version": sp.Version, "revision": sp.Revision})
		c.flash(r, fmt.Sprintf("%s is stored as version %d; every replica serves it within seconds.", sp.AS2ID, sp.Version))
	} else {
		c.flash(r, "Nothing changed: the profile is the one stored.")
	}
	http.Redirect(w, r, partnerPath(sp.AS2ID), http.StatusSeeOther)
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
