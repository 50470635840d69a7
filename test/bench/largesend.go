package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// largeSendBench sends one large message (o.largeBytes of payload) from
// a sender child process to a partner in this process that writes the
// body to a file: queued from a file (stored in pieces), built
// compressed (zlib), signed (SHA-256) and encrypted (AES-256-CBC) as a
// stream into the spool, frozen in pieces and posted with its
// Content-Length. It reports the child's peak RSS above idle (target
// < 64 MiB) and the send's throughput against openssl signing and
// encrypting the same file in the same run (openssl cms -sign | openssl
// cms -encrypt, streamed; openssl has no zlib, so it does not compress),
// and has openssl decrypt the body the partner got.
func largeSendBench(ctx context.Context, out io.Writer, o options, partner, st *identity) error {
	keys, err := writeKeys(partner, st)
	if err != nil {
		return err
	}
	defer os.RemoveAll(keys)
	work, err := os.MkdirTemp("", "edihub-bench-send-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	payload := filepath.Join(work, "catalogue.edi")
	if err := writeCatalogue(payload, o.largeBytes); err != nil {
		return err
	}
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	fmt.Fprintf(out, "Large send: %.0f MiB payload from a file, compressed (zlib level %d), signed (SHA-256) and encrypted (AES-256-CBC) as a stream\n",
		mib(o.largeBytes), as2.StreamCompressionLevel)
	ref, refSize, err := opensslSend(ctx, payload, keys, work)
	if err != nil {
		return err
	}
	refRate := mib(o.largeBytes) / ref.Seconds()
	fmt.Fprintf(out, "  %-40s %10s  (%.1f MiB/s of payload; file to file, no compression: body %.0f MiB)\n",
		"openssl cms -sign | cms -encrypt", ref.Round(10*time.Millisecond), refRate, mib(refSize))
	// The figure (compressed), then the same send without
	// compression: what openssl does, for a like-for-like ratio.
	for _, compress := range []bool{true, false} {
		res, err := largeSend(ctx, o, keys, payload, work, compress)
		if err != nil {
			return err
		}
		checked := "openssl decrypted the body sent"
		if res.bodySize < opensslMaxDER {
			if b, err := exec.CommandContext(ctx, "openssl", "cms", "-decrypt", "-binary", "-inform", "DER", "-in", res.bodyPath,
				"-recip", filepath.Join(keys, "partner.crt"), "-inkey", filepath.Join(keys, "partner.key"), "-out", os.DevNull).CombinedOutput(); err != nil {
				return fmt.Errorf("openssl cannot decrypt the body edihub sent: %w: %s", err, b)
			}
		} else {
			checked = "not decrypted: openssl reads a DER/BER input whole, up to 2 GiB"
		}
		os.Remove(res.bodyPath)
		layers, what := "compressed+signed+encrypted", "compressed, signed, encrypted"
		if !compress {
			layers, what = "signed+encrypted", "signed, encrypted (no compression)"
		}
		rate := mib(o.largeBytes) / res.send.Seconds()
		above := res.hwm - res.before
		fmt.Fprintf(out, "  %-40s %10s  (%.1f MiB/s of payload; the payload copied into PostgreSQL in pieces, as POST /messages does)\n",
			"edihub queue", res.enqueue.Round(10*time.Millisecond), mib(o.largeBytes)/res.enqueue.Seconds())
		fmt.Fprintf(out, "  %-40s %10s  (%.1f MiB/s of payload; read from PostgreSQL, %s, frozen in PostgreSQL, posted: body %.0f MiB)\n",
			"edihub send, "+layers, res.send.Round(10*time.Millisecond), rate, what, mib(res.bodySize))
		fmt.Fprintf(out, "  %-40s %10.1f  (VmHWM %.1f MiB, RSS before %.1f MiB; %s)\n", "peak RSS above idle, MiB", mib(above), mib(res.hwm), mib(res.before), checked)
		name := fmt.Sprintf("%.0f MiB %s send", mib(o.largeBytes), layers)
		o.sum.add(below("peak RSS above idle, "+name, fmt.Sprintf("%.1f MiB", mib(above)),
			fmt.Sprintf("payload %.0f MiB", mib(o.largeBytes)), float64(above)/float64(o.largeBytes), above < maxRSSAboveIdle, "< 64 MiB"))
		o.sum.add(ratioAtLeast("throughput, "+name, fmt.Sprintf("%.1f MiB/s", rate),
			fmt.Sprintf("openssl sign, encrypt %.1f MiB/s", refRate), rate/refRate, 0.80, true))
	}
	fmt.Fprintln(out)
	return nil
}

// opensslMaxDER is the largest input openssl cms -decrypt -inform DER
// reads: it reads the structure whole into one buffer (asn1_d2i_read_bio),
// which fails with "malloc failure" at 2 GiB.
const opensslMaxDER = 2<<30 - 1

// writeCatalogue writes size bytes of X12-like lines
// (openssltest.WriteCatalogue) to path.
func writeCatalogue(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := openssltest.WriteCatalogue(f, size); err != nil {
		return err
	}
	return f.Close()
}

// opensslSend times openssl signing (detached, S/MIME multipart/signed,
// streamed) and encrypting (DER, streamed) the payload file, piped, and
// returns the time and the body's size.
func opensslSend(ctx context.Context, payload, keys, work string) (time.Duration, int64, error) {
	body := filepath.Join(work, "openssl-body.p7m")
	defer os.Remove(body)
	script := `openssl cms -sign -binary -stream -md sha256 -in "$1" -signer "$2/station.crt" -inkey "$2/station.key" |
openssl cms -encrypt -binary -stream -aes256 -outform DER -out "$3" "$2/partner.crt"`
	start := time.Now()
	if b, err := exec.CommandContext(ctx, "sh", "-ec", script, "sh", payload, keys, body).CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("openssl reference: %w: %s", err, b)
	}
	took := time.Since(start)
	fi, err := os.Stat(body)
	if err != nil {
		return 0, 0, err
	}
	return took, fi.Size(), nil
}

// sendResult is what the sender child reports.
type sendResult struct {
	before, hwm      int64
	enqueue, send    time.Duration
	bodyPath         string
	bodySize         int64
	partnerGotLength int64
}

// largeSend runs the sender child, has it queue and send the payload to
// a partner in this process, and returns its RSS before, its peak after
// and the times of the queueing and of the send.
func largeSend(ctx context.Context, o options, keys, payload, work string, compress bool) (*sendResult, error) {
	res := &sendResult{bodyPath: filepath.Join(work, "received.p7m")}
	partnerURL, stopPartner, err := bodyPartner(res)
	if err != nil {
		return nil, err
	}
	defer stopPartner()
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self, "-send-child", keys, "-send-to", partnerURL, "-send-compress="+strconv.FormatBool(compress), "-database-url", o.databaseURL)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	lines := bufio.NewReader(stdout)
	if _, err := lines.ReadString('\n'); err != nil { // ready
		return nil, fmt.Errorf("send child: %w", err)
	}
	res.before, _ = procStatus(cmd.Process.Pid, "VmRSS")
	if _, err := fmt.Fprintln(stdin, payload); err != nil {
		return nil, err
	}
	line, err := lines.ReadString('\n')
	if err != nil {
		return nil, fmt.Errorf("send child: %w", err)
	}
	var enq, snd float64
	var status string
	if _, err := fmt.Sscan(line, &status, &enq, &snd); err != nil || status != "sent" {
		return nil, fmt.Errorf("send child: %q", strings.TrimSpace(line))
	}
	res.enqueue, res.send = time.Duration(enq*float64(time.Second)), time.Duration(snd*float64(time.Second))
	if res.hwm, err = procStatus(cmd.Process.Pid, "VmHWM"); err != nil {
		return nil, err
	}
	if res.partnerGotLength != res.bodySize || res.bodySize == 0 {
		return nil, fmt.Errorf("partner got a body of %d bytes with Content-Length %d", res.bodySize, res.partnerGotLength)
	}
	return res, nil
}

// bodyPartner serves a partner that writes each body to res.bodyPath and
// answers 200.
func bodyPartner(res *sendResult) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := os.Create(res.bodyPath)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer f.Close()
		n, err := io.Copy(f, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		res.bodySize, res.partnerGotLength = n, r.ContentLength
		w.WriteHeader(http.StatusOK)
	})}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String() + "/as2", func() { srv.Close() }, nil
}

// sendChild runs the sender: a dispatcher with a spool, as edihub serve
// runs it. It prints a line when idle, then for the payload path read
// from stdin queues it (from the file, in pieces) and prints "sent",
// the seconds the queueing took and the seconds from then to the
// partner's answer; it exits when stdin closes.
func sendChild(ctx context.Context, o options, to string) error {
	cfgPath := filepath.Join(o.sendChild, "edihub.yaml")
	y := fmt.Sprintf("station: {as2_id: %q, private_key: station.key, certificate: station.crt}\npartners:\n"+
		"  - {as2_id: %q, url: %q, certificate: partner.crt, sign: sha-256, encrypt: aes256-cbc, compress: %t, mdn: none, timeout: 30m}\n",
		stationID, partnerID, to, o.sendCompress)
	if err := os.WriteFile(cfgPath, []byte(y), 0o600); err != nil {
		return err
	}
	cfg, err := config.Load(cfgPath, config.Options{Now: time.Now})
	if err != nil {
		return err
	}
	store, sp, log, closeDeps, err := openChild(ctx, o.databaseURL, 8)
	if err != nil {
		return err
	}
	defer closeDeps()
	d, err := outbox.NewDispatcher(outbox.Options{Store: store, Listener: store, Config: cfg, Logger: log,
		Metrics: outbox.NewMetrics(prometheus.NewRegistry(), store.OutboxStats), Identity: "bench-sender",
		Spool: sp, SpoolFromBytes: outbox.DefaultSpoolFromBytes})
	if err != nil {
		return err
	}
	q, err := outbox.NewQueue(outbox.QueueOptions{Store: store, Config: cfg, Notify: d.Wake})
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() { stop(); <-done }()
	time.Sleep(500 * time.Millisecond) // idle: pools open, first poll done
	fmt.Println("ready")
	in := bufio.NewReader(os.Stdin)
	path, err := in.ReadString('\n')
	if err != nil {
		return err
	}
	f, err := os.Open(strings.TrimSpace(path))
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	start := time.Now()
	m, err := q.Enqueue(ctx, outbox.Document{Partner: partnerID, ContentType: "application/EDI-X12", Filename: "catalogue.edi",
		Open: func() io.Reader { return io.NewSectionReader(f, 0, fi.Size()) }, Size: fi.Size()})
	if err != nil {
		return err
	}
	queued := time.Now()
	for {
		info, err := store.Message(ctx, m.ID)
		if err != nil {
			return err
		}
		switch info.Status {
		case "sent":
			fmt.Printf("sent %.3f %.3f\n", queued.Sub(start).Seconds(), time.Since(queued).Seconds())
			_, _ = io.Copy(io.Discard, in)
			return nil
		case "failed", "retrying":
			return errors.New("send " + info.Status + ": " + info.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
