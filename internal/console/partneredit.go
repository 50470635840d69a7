package console

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/postgres"
)

// maxProfile bounds a profile sent from a partner page.
const maxProfile = 1 << 20

// refusal says why a profile was not stored: the answer's status, the
// message, and where and how to fix it when the checks know.
type refusal struct {
	status     int
	msg, field string
	line       int
	fix        string
}

// checkProfile reads a profile sent from a form before it is stored: nil
// when it parses, with its AS2 ID.
func checkProfile(text string) (string, *refusal) {
	if strings.TrimSpace(text) == "" {
		return "", &refusal{status: http.StatusBadRequest, msg: "The profile is empty.", fix: "Write the partner's keys: as2_id, url, certificate, ..."}
	}
	spec, err := config.DecodeSpec("profile", text)
	var ce *config.Error
	switch {
	case errors.As(err, &ce):
		return "", &refusal{status: http.StatusUnprocessableEntity, msg: ce.Msg, field: ce.Field, line: ce.Line, fix: ce.Fix}
	case err != nil:
		return "", &refusal{status: http.StatusUnprocessableEntity, msg: err.Error()}
	}
	return spec.AS2ID, nil
}

// putRefused says why PartnerService.Put refused a profile; nil for an
// error that is not the user's (the caller answers 500). conflict is said
// when the stored version is not the one expected.
func putRefused(err error, conflict string) *refusal {
	switch ce := config.EntryError(err); {
	case ce != nil:
		return &refusal{status: http.StatusUnprocessableEntity, msg: ce.Msg, field: ce.Field, line: ce.Line, fix: ce.Fix}
	case errors.Is(err, postgres.ErrPartnerConflict):
		return &refusal{status: http.StatusConflict, msg: conflict}
	case errors.Is(err, postgres.ErrPartnerNotFound):
		return &refusal{status: http.StatusNotFound, msg: "This partner was deleted meanwhile: your change was not stored. Restore it from its history, or create it again."}
	}
	return nil
}

// actor names who changes a partner from the console, for its history.
func actor(r *http.Request) string {
	a := auth.AuditFromRequest(r)
	return a.Actor + " from " + a.Remote
}

// partnerUpdate stores a profile an admin edited, checked as the API
// checks it, against the version the admin read (hidden in the form): a
// change made meanwhile by someone else is not overwritten.
func (c *Console) partnerUpdate(w http.ResponseWriter, r *http.Request) {
	id := partnerID(r)
	r.Body = http.MaxBytesReader(w, r.Body, maxProfile)
	text, versionField := r.PostFormValue("profile"), r.PostFormValue("version")
	refuse := func(rf *refusal) {
		d, ok := c.loadPartner(w, r, id)
		if !ok {
			return
		}
		d.YAML, d.Error, d.Field, d.Line, d.Fix = text, rf.msg, rf.field, rf.line, rf.fix
		if v, err := strconv.ParseInt(versionField, 10, 64); err == nil {
			d.Version = v
		}
		c.render(w, r, rf.status, "partner", c.view(r, d.P.AS2ID, "partners", d))
	}
	expect, err := strconv.ParseInt(versionField, 10, 64)
	if err != nil || expect <= 0 {
		refuse(&refusal{status: http.StatusBadRequest, msg: "The form lacks the version it was made from: reload the page and make the change again."})
		return
	}
	as2ID, rf := checkProfile(text)
	if rf == nil && as2ID != id {
		rf = &refusal{status: http.StatusUnprocessableEntity, msg: fmt.Sprintf("The profile's as2_id %q is not this partner's, %q.", as2ID, id), field: "as2_id",
			fix: "An AS2 ID is not renamed: create the new partner and delete the old one."}
	}
	if rf != nil {
		refuse(rf)
		return
	}
	sp, err := c.o.PartnerService.Put(r.Context(), actor(r), []byte(text), expect)
	if rf := putRefused(err, "Someone changed this partner since you opened the page: your change was not stored. "+
		"The profile below is yours; copy what you need, reload the page, and make the change on the current version."); rf != nil {
		refuse(rf)
		return
	}
	if err != nil {
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

// newPartnerData is the new partner page's.
type newPartnerData struct {
	YAML              string
	Error, Field, Fix string
	Line              int
}

// newPartnerProfile is the profile the new partner page starts from.
const newPartnerProfile = `as2_id: PARTNER AS2 ID
url: https://as2.partner.example/as2
# The partner's certificate, PEM text (it checks their signatures and
# encrypts to them).
certificate: |
  -----BEGIN CERTIFICATE-----
  -----END CERTIFICATE-----
sign: sha-256
encrypt: aes-256-cbc
mdn: sync
mdn_signed: true
`

// newPartnerForm shows the form of a new partner.
func (c *Console) newPartnerForm(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "newpartner", c.view(r, "New partner", "partners", newPartnerData{YAML: newPartnerProfile}))
}

// partnerCreate stores a new partner, checked as the API checks it; a
// partner of that AS2 ID stored already is not overwritten.
func (c *Console) partnerCreate(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxProfile)
	text := r.PostFormValue("profile")
	refuse := func(rf *refusal) {
		d := newPartnerData{YAML: text, Error: rf.msg, Field: rf.field, Line: rf.line, Fix: rf.fix}
		c.render(w, r, rf.status, "newpartner", c.view(r, "New partner", "partners", d))
	}
	as2ID, rf := checkProfile(text)
	if rf != nil {
		refuse(rf)
		return
	}
	sp, err := c.o.PartnerService.Put(r.Context(), actor(r), []byte(text), 0)
	if rf := putRefused(err, fmt.Sprintf("A partner %q is stored already: open it from the partners to change it.", as2ID)); rf != nil {
		refuse(rf)
		return
	}
	if err != nil {
		c.internal(w, r, "Storing the partner", err)
		return
	}
	c.audit(r, "partner.create", sp.AS2ID, map[string]any{"version": sp.Version, "revision": sp.Revision})
	c.flash(r, fmt.Sprintf("%s is stored as version %d; every replica serves it within seconds.", sp.AS2ID, sp.Version))
	http.Redirect(w, r, partnerPath(sp.AS2ID), http.StatusSeeOther)
}

// formVersion reads a version field of a form: a whole number, 0 or more.
func formVersion(r *http.Request, name string) (int64, bool) {
	v, err := strconv.ParseInt(r.PostFormValue(name), 10, 64)
	return v, err == nil && v >= 0
}

// partnerDeleteConfirm asks before a partner is deleted.
func (c *Console) partnerDeleteConfirm(w http.ResponseWriter, r *http.Request) {
	d, ok := c.loadPartner(w, r, partnerID(r))
	if !ok {
		return
	}
	if d.Deleted != nil {
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("%s is deleted already.", d.P.AS2ID))
		return
	}
	page := partnerPath(d.P.AS2ID)
	cd := confirmData{
		Question: fmt.Sprintf("Delete the partner %s?", d.P.AS2ID),
		Detail: []string{fmt.Sprintf("Every replica stops serving version %d within seconds: its messages are refused, and none is sent to it.", d.P.Version),
			"Its history keeps every version: its page can restore it."},
		Action: page + "/delete", Button: "Delete the partner", Back: page, Danger: true,
		Fields: []formField{{"version", strconv.FormatInt(d.P.Version, 10)}},
	}
	c.render(w, r, http.StatusOK, "confirm", c.view(r, "Delete "+d.P.AS2ID, "partners", cd))
}

// partnerDelete deletes a partner at the version the admin confirmed.
func (c *Console) partnerDelete(w http.ResponseWriter, r *http.Request) {
	id := partnerID(r)
	expect, ok := formVersion(r, "version")
	if !ok || expect == 0 {
		c.fail(w, r, http.StatusBadRequest, "The form lacks the version it was made from: open the partner and delete it again.")
		return
	}
	rev, err := c.o.PartnerService.Delete(r.Context(), actor(r), id, expect)
	switch {
	case errors.Is(err, postgres.ErrPartnerConflict):
		c.fail(w, r, http.StatusConflict, fmt.Sprintf("Someone changed %s since you opened it: it was not deleted. Open it again to see the change.", id))
		return
	case errors.Is(err, postgres.ErrPartnerNotFound):
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("There is no partner %q (it was deleted meanwhile).", id))
		return
	case err != nil:
		c.internal(w, r, "Deleting the partner", err)
		return
	}
	c.audit(r, "partner.delete", id, map[string]any{"revision": rev})
	c.flash(r, fmt.Sprintf("%s is deleted; every replica stops serving it within seconds. Its page keeps its history to restore it.", id))
	http.Redirect(w, r, Prefix+"/partners", http.StatusSeeOther)
}

// partnerRestoreConfirm asks before a version of a partner is made the
// current one again (?version=N).
func (c *Console) partnerRestoreConfirm(w http.ResponseWriter, r *http.Request) {
	d, ok := c.loadPartner(w, r, partnerID(r))
	if !ok {
		return
	}
	v, err := strconv.ParseInt(r.URL.Query().Get("version"), 10, 64)
	var from *historyView
	for i := range d.History {
		if h := &d.History[i]; err == nil && h.Version == v && h.Restorable {
			from = h
		}
	}
	page := partnerPath(d.P.AS2ID)
	if from == nil {
		c.fail(w, r, http.StatusNotFound, fmt.Sprintf("%s has no version %q to restore among its last %d changes.", d.P.AS2ID, r.URL.Query().Get("version"), historyLimit))
		return
	}
	// A partner's versions go on counting across deletions: the restored
	// profile is the one after its latest.
	now := fmt.Sprintf("It is at version %d now; the restored profile becomes version %d.", d.Version, d.History[0].Version+1)
	if d.Deleted != nil {
		now = fmt.Sprintf("It was deleted %s by %s; every replica serves it again within seconds.", c.timeText(d.Deleted.ChangedAt), d.Deleted.Actor)
	}
	cd := confirmData{
		Question: fmt.Sprintf("Restore version %d of %s?", v, d.P.AS2ID),
		Detail:   []string{fmt.Sprintf("Version %d was stored %s by %s.", v, c.timeText(from.ChangedAt), from.Actor), now, "It is checked like any change: a profile that no longer validates is refused."},
		Action:   page + "/restore", Button: "Restore", Back: page,
		Fields: []formField{{"version", strconv.FormatInt(v, 10)}, {"expect", strconv.FormatInt(d.Version, 10)}},
	}
	c.render(w, r, http.StatusOK, "confirm", c.view(r, fmt.Sprintf("Restore %s", d.P.AS2ID), "partners", cd))
}

// partnerRestore makes a version of a partner the current one, checked
// like any change, against the version the admin saw (0: deleted).
func (c *Console) partnerRestore(w http.ResponseWriter, r *http.Request) {
	id := partnerID(r)
	v, okV := formVersion(r, "version")
	expect, okE := formVersion(r, "expect")
	if !okV || !okE || v == 0 {
		c.fail(w, r, http.StatusBadRequest, "The form lacks the version to restore: open the partner's history and choose it again.")
		return
	}
	sp, err := c.o.PartnerService.Restore(r.Context(), actor(r), id, v, expect)
	if rf := putRefused(err, fmt.Sprintf("Someone changed %s since you opened it: nothing was restored. Open it again to see the change.", id)); rf != nil {
		msg := rf.msg
		if rf.field != "" {
			msg = fmt.Sprintf("Version %d no longer validates (%s: %s). Fix: %s", v, rf.field, rf.msg, rf.fix)
		}
		c.fail(w, r, rf.status, msg)
		return
	}
	if err != nil {
		c.internal(w, r, "Restoring the partner", err)
		return
	}
	c.audit(r, "partner.restore", sp.AS2ID, map[string]any{"from_version": v, "version": sp.Version, "revision": sp.Revision})
	c.flash(r, fmt.Sprintf("Version %d of %s is restored as version %d; every replica serves it within seconds.", v, sp.AS2ID, sp.Version))
	http.Redirect(w, r, partnerPath(sp.AS2ID), http.StatusSeeOther)
}
