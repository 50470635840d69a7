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
	"runtime"
	"runtime/pprof"
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
// stream into the spool (the build's inputs, size and SHA-256 recorded
// in the outbox row, not its bytes) and posted with its Content-Length; then the same without compression. It reports the
// child's peak RSS above idle (target < 64 MiB), where the send's time
// and CPU went, and each send's throughput (target: at least 80 %)
// against standard tools doing the same work on the same file in the
// same run, the faster of a run before the sends and one after: for the
// uncompressed send openssl cms -sign | openssl cms -encrypt, streamed;
// for the compressed one gzip -1 first (deflate at level 1, SHA-256,
// AES-256-CBC, each in a process of its own), since Debian's openssl has
// no zlib and cannot compress. The compressed send is also shown against
// the pipeline without compression, and the sender's CPU time against
// the tools' for the same layers: added references without a target.
// openssl decrypts the body the partner got.
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
	var refs [2][]refRun // [0] openssl sign | encrypt, [1] gzip -1 | the same
	measureRefs := func(when string) error {
		for i, gz := range []bool{false, true} {
			r, err := opensslSend(ctx, payload, keys, work, gz)
			if err != nil {
				return err
			}
			refs[i] = append(refs[i], r)
			name, what := "openssl cms -sign | cms -encrypt", "no compression"
			if gz {
				name, what = "gzip -1 | openssl sign | encrypt", "compressed by gzip, then signed and encrypted"
			}
			fmt.Fprintf(out, "  %-40s %10s  (%s; %.1f MiB/s of payload; file to file, %s: body %.0f MiB; CPU %.1fs)\n",
				name, r.took.Round(10*time.Millisecond), when, mib(o.largeBytes)/r.took.Seconds(), what, mib(r.size), r.cpu.Seconds())
		}
		return nil
	}
	if err := measureRefs("before"); err != nil {
		return err
	}
	// The figure (compressed), then the same send without
	// compression: what openssl does, for a like-for-like ratio.
	var results [2]*sendResult
	for i, compress := range []bool{true, false} {
		res, err := largeSend(ctx, o, keys, payload, work, compress)
		if err != nil {
			return err
		}
		res.checked = "openssl decrypted the body sent"
		if res.bodySize < opensslMaxDER {
			if b, err := exec.CommandContext(ctx, "openssl", "cms", "-decrypt", "-binary", "-inform", "DER", "-in", res.bodyPath,
				"-recip", filepath.Join(keys, "partner.crt"), "-inkey", filepath.Join(keys, "partner.key"), "-out", os.DevNull).CombinedOutput(); err != nil {
				return fmt.Errorf("openssl cannot decrypt the body edihub sent: %s: %w", b, err)
			}
		} else {
			res.checked = "not written, not decrypted: openssl reads a DER/BER input whole, up to 2 GiB"
		}
		os.Remove(res.bodyPath)
		results[i] = res
	}
	if err := measureRefs("after"); err != nil {
		return err
	}
	fastest := func(rs []refRun) refRun {
		best := rs[0]
		for _, r := range rs[1:] {
			if r.took < best.took {
				best = r
			}
		}
		return best
	}
	ref, gzRef := fastest(refs[0]), fastest(refs[1])
	refRate, gzRate := mib(o.largeBytes)/ref.took.Seconds(), mib(o.largeBytes)/gzRef.took.Seconds()
	for i, res := range results {
		compress := i == 0
		layers, what := "compressed+signed+encrypted", "compressed, signed, encrypted"
		if !compress {
			layers, what = "signed+encrypted", "signed, encrypted (no compression)"
		}
		rate := mib(o.largeBytes) / res.send.Seconds()
		above := res.hwm - res.before
		fmt.Fprintf(out, "  %-40s %10s  (%.1f MiB/s of payload; the payload copied into PostgreSQL in pieces, as POST /messages does)\n",
			"edihub queue", res.enqueue.Round(10*time.Millisecond), mib(o.largeBytes)/res.enqueue.Seconds())
		fmt.Fprintf(out, "  %-40s %10s  (%.1f MiB/s of payload; read from PostgreSQL, %s, its inputs recorded, posted: body %.0f MiB)\n",
			"edihub send, "+layers, res.send.Round(10*time.Millisecond), rate, what, mib(res.bodySize))
		res.printSplit(out)
		fmt.Fprintf(out, "  %-40s %10.1f  (VmHWM %.1f MiB, RSS before %.1f MiB; %s)\n", "peak RSS above idle, MiB", mib(above), mib(res.hwm), mib(res.before), res.checked)
		name := fmt.Sprintf("%.0f MiB %s send", mib(o.largeBytes), layers)
		o.sum.add(below("peak RSS above idle, "+name, fmt.Sprintf("%.1f MiB", mib(above)),
			fmt.Sprintf("payload %.0f MiB", mib(o.largeBytes)), float64(above)/float64(o.largeBytes), above < maxRSSAboveIdle, "< 64 MiB"))
		// The target's reference does the same work: a compressed send
		// against gzip -1 before openssl, this openssl having no zlib.
		ref, refWhat, refCPU := refRate, "openssl sign, encrypt", leastCPU(refs[0])
		if compress {
			ref, refWhat, refCPU = gzRate, "gzip -1, openssl sign, encrypt", leastCPU(refs[1])
		}
		o.sum.add(ratioAtLeast("throughput, "+name, fmt.Sprintf("%.1f MiB/s", rate),
			fmt.Sprintf("%s %.1f MiB/s", refWhat, ref), rate/ref, 0.80, true))
		if compress {
			o.sum.add(figure{name: "throughput, " + name + " (added reference: no compression)", value: fmt.Sprintf("%.1f MiB/s", rate),
				reference: fmt.Sprintf("openssl sign, encrypt %.1f MiB/s", refRate), ratio: rate / refRate, ratioValid: true, percent: true})
		}
		// The sender's own CPU against the tools' for the same layers:
		// what the throughput's ratio leaves out on a machine that the
		// sender shares with PostgreSQL and the partner.
		o.sum.add(figure{name: "sender CPU, " + name + " (added reference)", value: fmt.Sprintf("%.1f s", res.cpu.child.Seconds()),
			reference: fmt.Sprintf("%s CPU %.1f s", refWhat, refCPU.Seconds()), ratio: float64(res.cpu.child) / float64(refCPU), ratioValid: true})
	}
	fmt.Fprintln(out)
	return nil
}

// leastCPU is the least CPU time of rs.
func leastCPU(rs []refRun) time.Duration {
	least := rs[0].cpu
	for _, r := range rs[1:] {
		least = min(least, r.cpu)
	}
	return least
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

// refRun is one run of a reference: its time, the body's size and its
// CPU time (every process of the pipeline).
type refRun struct {
	took, cpu time.Duration
	size      int64
}

// opensslSend times openssl signing (detached, S/MIME multipart/signed,
// streamed) and encrypting (DER, streamed) the payload file, piped, or
// with gzip, the payload compressed by gzip -1 first (gzip's deflate at
// level 1: zlib's, but with a CRC-32 for the Adler-32), and returns the
// time, the body's size and the CPU time.
func opensslSend(ctx context.Context, payload, keys, work string, gzip bool) (refRun, error) {
	body := filepath.Join(work, "openssl-body.p7m")
	defer os.Remove(body)
	script := `openssl cms -sign -binary -stream -md sha256 -in "$1" -signer "$2/station.crt" -inkey "$2/station.key" |
openssl cms -encrypt -binary -stream -aes256 -outform DER -out "$3" "$2/partner.crt"`
	if gzip {
		script = `gzip -1 -c "$1" | openssl cms -sign -binary -stream -md sha256 -signer "$2/station.crt" -inkey "$2/station.key" |
openssl cms -encrypt -binary -stream -aes256 -outform DER -out "$3" "$2/partner.crt"`
	}
	cmd := exec.CommandContext(ctx, "sh", "-ec", script, "sh", payload, keys, body)
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		return refRun{}, fmt.Errorf("openssl reference: %s: %w", b, err)
	}
	r := refRun{took: time.Since(start), cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	fi, err := os.Stat(body)
	if err != nil {
		return refRun{}, err
	}
	r.size = fi.Size()
	return r, nil
}

// sendResult is what the sender child reports.
type sendResult struct {
	before, hwm      int64
	enqueue, send    time.Duration
	bodyPath         string
	bodySize         int64
	partnerGotLength int64
	checked          string // what openssl made of the body
	// phases is the sender's split of the send (phase name, duration),
	// cpu the CPU time spent during it.
	phases []phase
	cpu    sendCPU
}

// phase is one named duration of the send's split.
type phase struct {
	name string
	d    time.Duration
}

// sendCPU is the CPU time spent from the message queued to sent: by the
// sender child, PostgreSQL, this process (the partner) and the rest of
// the machine, and the machine's capacity over that window.
type sendCPU struct {
	child, pg, bench, rest, capacity time.Duration
	pgKnown                          bool
}

// largeSend runs the sender child, has it queue and send the payload to
// a partner in this process, and returns its RSS before, its peak after,
// the times of the queueing and of the send, the send's phases and the
// CPU time it took.
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
	args := []string{"-send-child", keys, "-send-to", partnerURL, "-send-compress=" + strconv.FormatBool(compress), "-database-url", o.databaseURL}
	if o.sendProfile != "" {
		suffix := ".plain"
		if compress {
			suffix = ".compressed"
		}
		args = append(args, "-send-cpuprofile", o.sendProfile+suffix)
	}
	cmd := exec.CommandContext(ctx, self, args...)
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
	var enq float64
	if _, err := fmt.Sscanf(line, "queued %f", &enq); err != nil {
		return nil, fmt.Errorf("send child: %q", strings.TrimSpace(line))
	}
	pid := strconv.Itoa(cmd.Process.Pid)
	c0, child0 := readCPU(o.pgDataDir), procTicks(pid)
	if line, err = lines.ReadString('\n'); err != nil {
		return nil, fmt.Errorf("send child: %w", err)
	}
	c1, child1 := readCPU(o.pgDataDir), procTicks(pid)
	f := strings.Fields(line)
	var snd float64
	if len(f) < 2 || f[0] != "sent" {
		return nil, fmt.Errorf("send child: %q", strings.TrimSpace(line))
	}
	if snd, err = strconv.ParseFloat(f[1], 64); err != nil {
		return nil, fmt.Errorf("send child: %q", strings.TrimSpace(line))
	}
	for _, kv := range f[2:] {
		k, v, _ := strings.Cut(kv, "=")
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("send child: phase %q", kv)
		}
		res.phases = append(res.phases, phase{k, d})
	}
	res.enqueue, res.send = time.Duration(enq*float64(time.Second)), time.Duration(snd*float64(time.Second))
	tick := func(n int64) time.Duration { return time.Duration(n) * time.Second / 100 } // USER_HZ
	res.cpu = sendCPU{child: tick(child1 - child0), pg: tick(c1.pg - c0.pg), bench: tick(c1.self - c0.self), pgKnown: c1.pgKnown,
		capacity: time.Duration(float64(res.send) * float64(runtime.NumCPU()))}
	res.cpu.rest = tick(c1.busy-c0.busy) - res.cpu.child - res.cpu.pg - res.cpu.bench
	if res.hwm, err = procStatus(cmd.Process.Pid, "VmHWM"); err != nil {
		return nil, err
	}
	if res.partnerGotLength != res.bodySize || res.bodySize == 0 {
		return nil, fmt.Errorf("partner got a body of %d bytes with Content-Length %d", res.bodySize, res.partnerGotLength)
	}
	return res, nil
}

// printSplit prints where the send's time and CPU went.
func (r *sendResult) printSplit(out io.Writer) {
	var b strings.Builder
	for i, p := range r.phases {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", p.name, p.d.Round(10*time.Millisecond))
	}
	fmt.Fprintf(out, "  %-40s %10s  (%s)\n", "  phases (sender's split)", "", b.String())
	s := func(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
	pg := "PostgreSQL ?"
	if r.cpu.pgKnown {
		pg = "PostgreSQL " + s(r.cpu.pg)
	}
	fmt.Fprintf(out, "  %-40s %10s  (sender %s, %s, partner (this process) %s, rest of the machine %s, of %s: %d CPUs)\n",
		"  CPU time during the send", s(r.cpu.child+r.cpu.pg+r.cpu.bench+r.cpu.rest), s(r.cpu.child), pg, s(r.cpu.bench), s(r.cpu.rest), s(r.cpu.capacity), runtime.NumCPU())
}

// bodyPartner serves a partner that writes each body openssl can read
// to res.bodyPath, counts the bytes of a larger one, and answers 200.
// A partner is another machine: writing a body that nothing reads to
// this machine's disk would charge the send with the partner's work.
func bodyPartner(res *sendResult) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var dst io.Writer = struct{ io.Writer }{io.Discard} // not its ReadFrom: 8 KiB reads
		if r.ContentLength < opensslMaxDER {
			f, err := os.Create(res.bodyPath)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			defer f.Close()
			dst = struct{ io.Writer }{f}
		}
		// Large reads (net/http's and the file's own copy would go 32 KiB
		// at a time): the partner is not what is measured.
		n, err := io.CopyBuffer(dst, r.Body, make([]byte, 1<<20))
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
// from stdin queues it (from the file, in pieces) and prints "queued"
// and the seconds the queueing took, then "sent", the seconds from then
// to the partner's answer and the phases the dispatcher logged (each
// duration field of its "built as a stream" line, and post: from that
// line to "sent"); it exits when stdin closes.
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
	phases := newLogCapture(builtMessage, sentMessage)
	log = phases.logger(log)
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
	if o.sendProfile != "" {
		pf, err := os.Create(o.sendProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	fmt.Printf("queued %.3f\n", queued.Sub(start).Seconds())
	for {
		info, err := store.Message(ctx, m.ID)
		if err != nil {
			return err
		}
		switch info.Status {
		case "sent":
			took := time.Since(queued)
			pprof.StopCPUProfile()
			fmt.Printf("sent %.3f%s\n", took.Seconds(), phases.sendPhases())
			_, _ = io.Copy(io.Discard, in)
			return nil
		case "failed", "retrying":
			return errors.New("send " + info.Status + ": " + info.Error)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
