package main

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/hub"
	"github.com/edihub/edihub/internal/leader"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/postgres"
)

// pollerBench measures the leader's MDN poller on a backlog: n outbound
// messages awaiting their async MDN and one signed MDN for each in the
// inbox (stored before the poller starts), then the time one poller takes
// to apply them all (parse, verify the signature against the partner's
// certificate, judge disposition and MIC, apply in fenced batches) and
// the rate. The backlog is built through the store's own methods: enqueue,
// claim, freeze the built message (as2.Wrap, unsigned and unencrypted, so
// that building 10,000 is quick; signed receipts requested) and record it
// as awaiting its MDN; the MDNs are built by mdn.Build and signed with the
// partner's key.
func pollerBench(ctx context.Context, out io.Writer, o options, store *postgres.Store, partner, st *identity) error {
	n := o.pollerMDNs
	cfg, err := pollerConfig(partner, st)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "MDN poller: building a backlog of %d outbound messages awaiting signed async MDNs...\n", n)
	t0 := time.Now()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	type sent struct{ messageID, mic string }
	sents := make([]sent, n)
	var next atomic.Int64
	workers := max(2, runtime.GOMAXPROCS(0))
	parallel := func(fn func(ctx context.Context, i int) error) error {
		next.Store(0)
		g, gctx := errgroup.WithContext(ctx)
		for range workers {
			g.Go(func() error {
				for {
					i := int(next.Add(1)) - 1
					if i >= n {
						return nil
					}
					if err := fn(gctx, i); err != nil {
						return err
					}
				}
			})
		}
		return g.Wait()
	}
	prefix := "<poller-" + run + "-"
	err = parallel(func(ctx context.Context, i int) error {
		_, err := store.EnqueueOutbound(ctx, postgres.NewOutbound{
			Partner: partnerID, AS2From: stationID, AS2To: partnerID, MessageID: fmt.Sprintf("%s%d@%s>", prefix, i, stationID),
			ContentType: "application/EDI-X12", MDNMode: config.MDNAsync, MDNSigned: true, MDNURL: "https://edihub.example/as2",
			URL: "http://127.0.0.1:1/as2", MaxAttempts: 1, Payload: []byte(fmt.Sprintf("ISA*00*bench poller %d~", i)),
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("poller backlog: %w", err)
	}
	// Each worker claims rows until none is due and records each as built
	// and sent, awaiting its MDN.
	g, gctx := errgroup.WithContext(ctx)
	for range workers {
		g.Go(func() error {
			for {
				items, err := store.ClaimOutbox(gctx, "bench", time.Hour, 50)
				if err != nil || len(items) == 0 {
					return err
				}
				for _, it := range items {
					src, err := store.OutboundSource(gctx, it.MessageID)
					if err != nil {
						return err
					}
					k, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(src.MessageID, prefix), "@"+stationID+">"))
					if err != nil || k < 0 || k >= n {
						return fmt.Errorf("outbox holds message %q, not of this bench run: use an empty database", src.MessageID)
					}
					w, err := as2.Wrap(src.Payload, src.ContentType, "", as2.WrapOptions{})
					if err != nil {
						return err
					}
					h := w.Header.Clone()
					h["Message-ID"] = []string{src.MessageID}
					h["Disposition-Notification-To"] = []string{stationID}
					h["Disposition-Notification-Options"] = []string{mdn.RequestOptions(crypto.SHA256)}
					h["Receipt-Delivery-Option"] = []string{"https://edihub.example/as2"}
					b := postgres.OutboundBuild{Headers: h, Body: w.Body, MIC: w.MIC.String(), MICAlg: as2.MICAlgName(w.MIC.Alg)}
					if err := store.SaveOutboundBuild(gctx, it, b); err != nil {
						return err
					}
					if err := store.FinishOutbox(gctx, it, postgres.OutboxResult{State: postgres.OutboxDone, HTTPStatus: http.StatusOK,
						Message: &postgres.MessageUpdate{Status: "awaiting-mdn", MDNDueIn: 24 * time.Hour}}); err != nil {
						return err
					}
					sents[k] = sent{src.MessageID, b.MIC}
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("poller backlog: %w", err)
	}
	for i, s := range sents {
		if s.messageID == "" {
			return fmt.Errorf("poller backlog: message %d was not built", i)
		}
	}
	err = parallel(func(ctx context.Context, i int) error {
		h, body, err := mdn.Build(mdn.Report{
			ReportingUA: "bench partner", OriginalRecipient: partnerID, FinalRecipient: partnerID,
			OriginalMessageID: sents[i].messageID, Disposition: mdn.Processed(), MIC: sents[i].mic,
		}, mdn.BuildOptions{Sign: true, Key: partner.key, Cert: partner.cert})
		if err != nil {
			return err
		}
		h.Set("AS2-From", `"`+partnerID+`"`)
		h.Set("AS2-To", stationID)
		_, err = store.SaveInboxMDN(ctx, &postgres.InboxMDN{AS2From: partnerID, AS2To: stationID, Header: h, Body: body, OriginalMessageID: sents[i].messageID})
		return err
	})
	if err != nil {
		return fmt.Errorf("poller backlog MDNs: %w", err)
	}
	fmt.Fprintf(out, "  backlog built in %.1fs\n", time.Since(t0).Seconds())

	f := hub.Fence{Lease: "edihub-bench-poller-" + run, Token: 1}
	if err := store.OpenTerm(ctx, f, "bench"); err != nil {
		return err
	}
	done := &firstPoll{Store: store, done: make(chan struct{})}
	p, err := mdn.NewPoller(mdn.PollerOptions{
		Store: done, Config: cfg, Logger: zap.NewNop(), Registerer: prometheus.NewRegistry(),
		PollInterval: time.Hour, BatchSize: o.pollerBatch,
	})
	if err != nil {
		return err
	}
	pctx, stop := context.WithCancel(leader.WithFence(ctx, f))
	defer stop()
	runErr := make(chan error, 1)
	start := time.Now()
	go func() { runErr <- p.Run(pctx) }()
	select {
	case <-done.done:
	case err := <-runErr:
		return fmt.Errorf("poller stopped: %v", err)
	}
	elapsed := time.Since(start)
	stop()
	if err := <-runErr; err != nil {
		return err
	}
	processed, err := store.InboxMDNs(ctx, postgres.InboxQuery{State: postgres.InboxProcessed, Limit: n + 1})
	if err != nil {
		return err
	}
	applied := 0
	for _, r := range processed {
		if r.Result == "delivered" {
			applied++
		}
	}
	if applied != n {
		return fmt.Errorf("poller bench: %d of %d MDNs delivered their message", applied, n)
	}
	fmt.Fprintf(out, "  applied %d signed MDNs in %.2fs: %.0f MDNs/s (one poller, batches of %d, one fenced transaction per batch; every message delivered)\n\n",
		n, elapsed.Seconds(), float64(n)/elapsed.Seconds(), o.pollerBatch)
	o.sum.add(figure{name: "MDN poller MDNs/s (signed, one poller)", value: fmt.Sprintf("%.0f", float64(n)/elapsed.Seconds()), reference: "–"})
	return nil
}

// firstPoll signals the end of the poller's first poll (MDNGauges is its
// last step): the whole backlog has been applied by then.
type firstPoll struct {
	*postgres.Store
	once sync.Once
	done chan struct{}
}

func (f *firstPoll) MDNGauges(ctx context.Context) (postgres.MDNGauges, error) {
	g, err := f.Store.MDNGauges(ctx)
	if err == nil {
		f.once.Do(func() { close(f.done) })
	}
	return g, err
}

// pollerConfig is a configuration naming the bench partner with its
// certificate, written to a temporary directory and loaded.
func pollerConfig(partner, st *identity) (*config.File, error) {
	dir, err := os.MkdirTemp("", "edihub-bench-poller-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	write := func(name, typ string, der []byte) error {
		return os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
	}
	kd, err := x509.MarshalPKCS8PrivateKey(st.key)
	if err != nil {
		return nil, err
	}
	if err := errors.Join(write("station.key", "PRIVATE KEY", kd), write("station.crt", "CERTIFICATE", st.cert.Raw),
		write("partner.crt", "CERTIFICATE", partner.cert.Raw)); err != nil {
		return nil, err
	}
	yaml := fmt.Sprintf("station: {as2_id: %q, private_key: station.key, certificate: station.crt}\npartners:\n  - {as2_id: %q, url: \"http://127.0.0.1:1/as2\", certificate: partner.crt, mdn: async, mdn_signed: true, async_mdn_url: \"https://edihub.example/as2\"}\n",
		stationID, partnerID)
	return config.Parse([]byte(yaml), dir, "bench.yaml", config.Options{})
}
