package main

import (
	"database/sql"
	"time"

	"github.com/edihub/edihub/internal/console"
)

// newConsole builds the ops console of a replica: its sessions are kept in
// the replica's database (the returned *sql.DB, to close after the
// listeners stopped and before the store).
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
