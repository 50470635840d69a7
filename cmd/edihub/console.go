package main

import (
	"database/sql"
	"time"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/console"
)

// newConsole builds the ops console of a replica: its sessions are kept in
// the replica's database (the returned *sql.DB, to close after the
// listeners stopped and before the store). It acts through the same
// services as the REST API: the same checks, the same audit log.
func newConsole(r *replica, p *parts, reports console.Reports) (*console.Console, *sql.DB, error) {
	sdb := r.store.SessionDB()
	c, err := console.New(console.Options{
		Auth:      p.auth,
		Messages:  r.store,
		SessionDB: sdb,
		Sessions:  r.store,
		Partners:  func() []string { return partnerNames(r.cfg.Current()) },
		Auditor:   r.store,
		Queue:     p.out.queue,
		Resender:  r.store,
		// A document sent from the console is bounded like one sent to
		// the API.
		MaxUploadBytes: r.o.maxBodyBytes,
		Hub:            r.store,
		LeaseName:      r.o.leader.leaseName,
		Leader:         p.elector.Status,
		Reports:        reports,
		PartnerStore:   r.store,
		PartnerService: p.out.partners,
		Certificates:   p.out.certificates,
		TestPartner:    p.out.testPartner,
		Users:          &auth.Users{Store: r.store, Now: time.Now},
		Audit:          r.store,
		Logger:         r.log,
		Now:            time.Now,
		Location:       r.report.loc,
	})
	if err != nil {
		_ = sdb.Close()
		return nil, nil, err
	}
	return c, sdb, nil
}
