// Command loadgen is an AS2 load generator in a process of its own, for
// measuring a served edihub from outside (issue 22): it builds a few
// signed and encrypted messages with openssl, the independent peer, and
// posts them from N concurrent senders, each request under a fresh
// Message-ID, for a while; then it prints the throughput, the latency
// percentiles, the dispositions of the synchronous MDNs and the CPU time
// the given processes and the whole machine spent per message.
//
//	go run ./test/loadgen -url http://127.0.0.1:8080/as2 -from "DEMO PARTNER" -to EDIHUB \
//	    -key .local/demo/demo.key -cert .local/demo/demo.crt -recipient .local/station/station.crt
//
// The messages are built once, before the timed window (-variants of
// them, each with its own payload): the same signed content then reaches
// the hub under many Message-IDs, which a partner profile with a replay
// window (replay_window, default 24h) answers as replays. Measure with a
// partner whose replay_window is 0s, or with as many variants as
// requests. Figures are printed, never asserted.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// options are the command's flags.
type options struct {
	url, from, to            string
	key, cert, recipient     string
	senders, variants, size  int
	duration, warmup         time.Duration
	mdn                      string
	pids                     string
	payloadType, messageHost string
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", "", "the hub's AS2 URL (required), e.g. http://127.0.0.1:8080/as2; several, comma-separated (replicas without a load balancer), share the senders in turn")
	flag.StringVar(&o.from, "from", "", "AS2-From: the partner's AS2 ID (required)")
	flag.StringVar(&o.to, "to", "", "AS2-To: the hub's AS2 ID (required)")
	flag.StringVar(&o.key, "key", "", "the partner's private key (PEM) to sign with (required)")
	flag.StringVar(&o.cert, "cert", "", "the partner's certificate (PEM) (required)")
	flag.StringVar(&o.recipient, "recipient", "", "the hub's certificate (PEM) to encrypt to (required)")
	flag.IntVar(&o.senders, "senders", 16, "concurrent senders")
	flag.IntVar(&o.variants, "variants", 32, "distinct messages built with openssl, sent in turn")
	flag.IntVar(&o.size, "size", 4096, "payload bytes")
	flag.DurationVar(&o.duration, "duration", 20*time.Second, "timed window")
	flag.DurationVar(&o.warmup, "warmup", 2*time.Second, "sending before the timed window, not counted")
	flag.StringVar(&o.mdn, "mdn", "signed", "synchronous MDN asked for: signed, unsigned or none")
	flag.StringVar(&o.pids, "pids", "", "comma-separated process IDs whose CPU time per message to report (edihub, postgres, ...)")
	flag.StringVar(&o.payloadType, "content-type", "application/edi-x12", "the payload's content type")
	flag.StringVar(&o.messageHost, "message-host", "loadgen", "the right-hand side of the Message-IDs")
	flag.Parse()
	if err := run(context.Background(), o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options, out io.Writer) error {
	if o.url == "" || o.from == "" || o.to == "" || o.key == "" || o.cert == "" || o.recipient == "" {
		return errors.New("-url, -from, -to, -key, -cert and -recipient are required (see -h)")
	}
	if o.senders < 1 || o.variants < 1 || o.size < 1 {
		return errors.New("-senders, -variants and -size must be at least 1")
	}
	dir, err := os.MkdirTemp("", "loadgen-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	msgs := make([]message, o.variants)
	for i := range msgs {
		if msgs[i], err = build(ctx, dir, i, o); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "built %d messages of %d payload bytes with openssl in %v (%d bytes each on the wire)\n",
		len(msgs), o.size, time.Since(start).Round(time.Millisecond), len(msgs[0].body))
	pids, err := parsePIDs(o.pids)
	if err != nil {
		return err
	}
	res, err := load(ctx, o, msgs, pids)
	if err != nil {
		return err
	}
	res.print(out, o)
	return nil
}

// message is one AS2 request body built by openssl, with its header.
type message struct {
	contentType []string // the Content-Type field's value
	body        []byte
}

// build signs (SHA-256, detached, multipart/signed) and encrypts
// (AES-256-CBC to the recipient's RSA key) a payload of o.size bytes.
// The payload is an opaque document, not EDI, as in the bench's
// in-process run: it began with "ISA" once, which the hub took for an
// X12 interchange it could not read, so each message also cost a failed
// envelope parse and a warning line (about 1% of the hub's CPU).
func build(ctx context.Context, dir string, n int, o options) (message, error) {
	payload := make([]byte, o.size)
	filler := []byte(fmt.Sprintf("LOADGEN DOCUMENT %06d ", n))
	for i := range payload {
		payload[i] = filler[i%len(filler)]
	}
	entity := append([]byte("Content-Type: "+o.payloadType+"\r\nContent-Transfer-Encoding: binary\r\n\r\n"), payload...)
	in := filepath.Join(dir, fmt.Sprintf("entity-%d", n))
	if err := os.WriteFile(in, entity, 0o600); err != nil {
		return message{}, err
	}
	signed, err := openssl(ctx, "cms", "-sign", "-in", in, "-signer", o.cert, "-inkey", o.key, "-md", "sha256", "-binary", "-crlfeol")
	if err != nil {
		return message{}, err
	}
	sf := filepath.Join(dir, fmt.Sprintf("signed-%d", n))
	if err := os.WriteFile(sf, signed, 0o600); err != nil {
		return message{}, err
	}
	der, err := openssl(ctx, "cms", "-encrypt", "-in", sf, "-binary", "-outform", "DER", "-aes256", o.recipient)
	if err != nil {
		return message{}, err
	}
	return message{contentType: []string{`application/pkcs7-mime; smime-type=enveloped-data; name="smime.p7m"`}, body: der}, nil
}

func openssl(ctx context.Context, args ...string) ([]byte, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "openssl", args...)
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("openssl %s: %s: %w", strings.Join(args[:2], " "), strings.TrimSpace(stderr.String()), err)
	}
	return b, nil
}

// result is what the timed window measured.
type result struct {
	sent         int
	window       time.Duration
	latencies    []time.Duration
	dispositions map[string]int
	failures     map[string]int
	cpu          []cpuUse
	machine      cpuUse
	// self is loadgen's own CPU time in the window.
	self cpuUse
}

// load posts the messages from o.senders goroutines: first for o.warmup,
// uncounted, then for o.duration.
func load(ctx context.Context, o options, msgs []message, pids []int) (result, error) {
	client := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: o.senders, MaxConnsPerHost: o.senders}}
	var seq atomic.Int64
	var counting atomic.Bool
	stop := make(chan struct{})
	var mu sync.Mutex
	res := result{dispositions: map[string]int{}, failures: map[string]int{}}
	var wg sync.WaitGroup
	urls := senderURLs(o.url, o.senders)
	// Everything but the Message-ID and the body is the same in every
	// request: built once, so that loadgen's own CPU (it shares the
	// machine with the hub) goes to sending and reading, not to
	// building header fields.
	parsed := map[string]*url.URL{}
	for _, u := range urls {
		if parsed[u] == nil {
			pu, err := url.Parse(u)
			if err != nil {
				return result{}, fmt.Errorf("-url %q: %w", u, err)
			}
			parsed[u] = pu
		}
	}
	base := requestHeader(o)
	run := runID()
	for i := range o.senders {
		s := &sender{client: client, url: parsed[urls[i]], header: base, run: run, mdn: o.mdn, host: o.messageHost}
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				n := seq.Add(1)
				t0 := time.Now()
				disp, err := s.post(ctx, msgs[int(n)%len(msgs)], n)
				took := time.Since(t0)
				if !counting.Load() {
					continue
				}
				mu.Lock()
				if err != nil {
					res.failures[err.Error()]++
				} else {
					res.sent++
					res.latencies = append(res.latencies, took)
					res.dispositions[disp]++
				}
				mu.Unlock()
			}
		})
	}
	time.Sleep(o.warmup)
	self := os.Getpid()
	snap0, machine0 := takeSnapshot(), machineCPU()
	counting.Store(true)
	t0 := time.Now()
	time.Sleep(o.duration)
	counting.Store(false)
	res.window = time.Since(t0)
	snap1, machine1 := takeSnapshot(), machineCPU()
	close(stop)
	roots := append([]int{self}, pids...)
	before, after := snap0.cpuOf(roots), snap1.cpuOf(roots)
	wg.Wait()
	res.self = cpuUse{pid: self, name: "loadgen", busy: after[0].busy - before[0].busy}
	for i := range pids {
		res.cpu = append(res.cpu, cpuUse{pid: pids[i], name: after[i+1].name, busy: after[i+1].busy - before[i+1].busy,
			parts: parts(snap0, snap1, pids[i])})
	}
	res.machine = cpuUse{name: "machine", busy: machine1.busy - machine0.busy, total: machine1.total - machine0.total}
	return res, nil
}

// requestHeader is the header fields every request carries, in canonical
// form; each request adds its Message-ID.
func requestHeader(o options) http.Header {
	h := http.Header{}
	h.Set("AS2-Version", "1.2")
	h.Set("AS2-From", quoteAS2(o.from))
	h.Set("AS2-To", quoteAS2(o.to))
	h.Set("MIME-Version", "1.0")
	switch o.mdn {
	case "signed":
		h.Set("Disposition-Notification-To", "loadgen@"+o.messageHost)
		h.Set("Disposition-Notification-Options", "signed-receipt-protocol=optional, pkcs7-signature; signed-receipt-micalg=optional, sha-256")
	case "unsigned":
		h.Set("Disposition-Notification-To", "loadgen@"+o.messageHost)
	}
	return h
}

// runID tells this run's Message-IDs from those of other runs: 16 random
// hex digits, drawn once.
func runID() string {
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	return hex.EncodeToString(id)
}

// sender is one of the concurrent senders, with what it reuses from one
// request to the next.
type sender struct {
	client    *http.Client
	url       *url.URL
	header    http.Header // shared, never written
	run       string
	mdn, host string
	answer    bytes.Buffer
	id        []byte
}

// senderURLs gives each of n senders one of the comma-separated URLs of
// list, in turn.
func senderURLs(list string, n int) []string {
	var urls []string
	for _, u := range strings.Split(list, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = urls[i%len(urls)]
	}
	return out
}

// post sends message m as the n-th request and returns the disposition
// of its synchronous MDN ("" when none was asked).
func (s *sender) post(ctx context.Context, m message, n int64) (string, error) {
	h := make(http.Header, len(s.header)+2)
	for k, v := range s.header {
		h[k] = v
	}
	h["Content-Type"] = m.contentType
	s.id = append(s.id[:0], '<')
	s.id = strconv.AppendInt(s.id, n, 10)
	s.id = append(s.id, '.')
	s.id = append(s.id, s.run...)
	s.id = append(s.id, '@')
	s.id = append(s.id, s.host...)
	s.id = append(s.id, '>')
	h["Message-Id"] = []string{string(s.id)}
	req := (&http.Request{
		Method: http.MethodPost, URL: s.url, Host: s.url.Host, Header: h,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Body: io.NopCloser(bytes.NewReader(m.body)), ContentLength: int64(len(m.body)),
	}).WithContext(ctx)
	resp, err := s.client.Do(req)
	if err != nil {
		return "", errors.New("transport: " + shorten(err.Error()))
	}
	defer resp.Body.Close()
	s.answer.Reset()
	if _, err := s.answer.ReadFrom(io.LimitReader(resp.Body, 1<<20)); err != nil {
		return "", errors.New("reading the answer: " + shorten(err.Error()))
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if s.mdn == "none" {
		return "", nil
	}
	return disposition(s.answer.Bytes()), nil
}

// disposition reads the Disposition field of an MDN's body (a signed
// MDN's machine-readable part is in the clear): "processed", "processed/
// error: …", or "no disposition" when there is none.
func disposition(body []byte) string {
	const name = "disposition:"
	var line []byte
	for rest := body; ; {
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			return "no disposition"
		}
		rest = rest[nl+1:]
		if len(rest) >= len(name) && strings.EqualFold(string(rest[:len(name)]), name) {
			line = rest[len(name):]
			break
		}
	}
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	v := strings.TrimSpace(string(line))
	if _, after, ok := strings.Cut(v, ";"); ok {
		v = strings.TrimSpace(after)
	}
	return v
}

// quoteAS2 quotes an AS2 name with spaces (RFC 4130 §6.2).
func quoteAS2(s string) string {
	if strings.ContainsAny(s, " \t\"\\") {
		return strconv.Quote(s)
	}
	return s
}

func shorten(s string) string {
	if len(s) > 120 {
		return s[:120] + "…"
	}
	return s
}

// print writes the figures of the window.
func (r result) print(out io.Writer, o options) {
	secs := r.window.Seconds()
	fmt.Fprintf(out, "%d senders, %v: %d messages answered 200, %.1f msg/s\n", o.senders, r.window.Round(time.Millisecond), r.sent, float64(r.sent)/secs)
	if len(r.latencies) > 0 {
		slices.Sort(r.latencies)
		q := func(p float64) time.Duration {
			return r.latencies[min(len(r.latencies)-1, int(p*float64(len(r.latencies))))]
		}
		fmt.Fprintf(out, "latency p50 %v, p95 %v, p99 %v, max %v\n", q(0.50).Round(time.Microsecond*10), q(0.95).Round(time.Microsecond*10),
			q(0.99).Round(time.Microsecond*10), r.latencies[len(r.latencies)-1].Round(time.Microsecond*10))
	}
	for _, k := range sortedKeys(r.dispositions) {
		fmt.Fprintf(out, "  disposition %q: %d\n", k, r.dispositions[k])
	}
	for _, k := range sortedKeys(r.failures) {
		fmt.Fprintf(out, "  failed (%s): %d\n", k, r.failures[k])
	}
	if r.sent == 0 {
		return
	}
	per := func(busy float64) string { return fmt.Sprintf("%.3f ms", busy/float64(r.sent)*1000) }
	for _, c := range r.cpu {
		fmt.Fprintf(out, "CPU of %d (%s): %s per message\n", c.pid, c.name, per(c.busy))
		if len(c.parts) > 1 {
			fmt.Fprintf(out, "CPU of %d by kind of process, per message: %s\n", c.pid, c.partsList(per))
		}
	}
	fmt.Fprintf(out, "CPU of loadgen itself: %s per message\n", per(r.self.busy))
	if r.machine.total > 0 {
		fmt.Fprintf(out, "CPU of the machine: %s per message (busy %.0f%% of its %d cores)\n", per(r.machine.busy),
			100*r.machine.busy/r.machine.total, cores())
	}
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
