package main

import (
	"crypto/rand"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/interchange"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/receiver"
	"github.com/edihub/edihub/internal/spool"
)

// newReceiver builds the POST /as2 handler: AS2 messages and async MDNs;
// acks queues the functional acknowledgements partners ask for; sp takes
// the bodies too large for memory.
func newReceiver(log *zap.Logger, reg prometheus.Registerer, store *postgres.Store, cfg config.Source, o serveOptions, acks *outbox.Queue, sp *spool.Spool) (http.Handler, error) {
	tracker, err := interchange.NewTracker(interchange.Options{Store: store, Acker: acks, Logger: log, Registerer: reg, Now: time.Now, PartnerIDs: partnerNames(cfg.Current())})
	if err != nil {
		return nil, err
	}
	var restart receiver.RestartStore
	if o.as2Restart {
		restart = store
	}
	return receiver.New(receiver.Options{
		EDI:    tracker,
		Store:  store,
		Config: cfg,
		// A certificate switched on first use: recorded for all replicas.
		CertificateUses: store,
		PartnerIDs:      partnerNames(cfg.Current()),
		Logger:          log,
		Registerer:      reg,
		Now:             time.Now,
		Rand:            rand.Reader,
		MaxBodyBytes:    o.maxBodyBytes,
		MaxMDNBytes:     o.maxMDNBytes,
		ReadTimeout:     o.as2ReadTimeout,
		Limits:          as2.Limits{MaxDecompressedSize: o.decompressionLimit()},
		ReportingUA:     "edihub " + version(),

		MaxInFlightBytes:        o.inFlightLimit(debug.SetMemoryLimit(-1)),
		MaxConcurrentPerPartner: o.maxConcurrentPerPartner,
		Spool:                   sp,
		SpoolFromBytes:          o.spoolFromBytes,
		RetryWindow:             o.outbound.retryWindow,
		Restart:                 restart,
		RestartLimits:           postgres.RestartLimits{PartnerBytes: o.as2RestartPartnerMaxBytes, TotalBytes: o.as2RestartMaxBytes},
	})
}
