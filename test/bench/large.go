package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/edihub/edihub/internal/as2"
	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// largeBench receives one large message (o.largeBytes of payload,
// compressed, signed and encrypted by openssl; built file to file in a
// temporary directory removed afterwards) in a receiver child process
// with a spool, and reports its peak RSS above idle (target < 64 MiB)
// and its throughput against openssl decrypting and verifying the same
// file in the same run (openssl cms -decrypt | openssl cms -verify;
// target >= 80%).
func largeBench(ctx context.Context, out io.Writer, o options, partner, st *identity) error {
	keys, err := writeKeys(partner, st)
	if err != nil {
		return err
	}
	defer os.RemoveAll(keys)
	work, err := os.MkdirTemp("", "edihub-bench-large-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	id := func(name string) *openssltest.Identity {
		return &openssltest.Identity{KeyPath: filepath.Join(keys, name+".key"), CertPath: filepath.Join(keys, name+".crt")}
	}
	t0 := time.Now()
	m, err := openssltest.BuildLarge(work, openssltest.LargeSpec{Size: o.largeBytes, Compress: true, Signer: id("partner"), Recipient: id("station")})
	if err != nil {
		return fmt.Errorf("build the large message: %w", err)
	}
	mib := func(n int64) float64 { return float64(n) / (1 << 20) }
	fmt.Fprintf(out, "Large message: %.0f MiB payload, compressed (zlib), signed (SHA-256) and encrypted (AES-256-CBC, BER streamed) by openssl; body %.0f MiB; built in %s\n",
		mib(o.largeBytes), mib(m.BodySize), time.Since(t0).Round(time.Second))
	ref, refCPU, err := opensslReceive(ctx, m, keys)
	if err != nil {
		return err
	}
	pg0 := readCPU(o.pgDataDir)
	before, hwm, took, childCPU, phases, err := largeReceive(ctx, o, keys, m)
	if err != nil {
		return err
	}
	pg1 := readCPU(o.pgDataDir)
	rate := mib(m.BodySize) / took.Seconds()
	refRate := mib(m.BodySize) / ref.Seconds()
	above := hwm - before
	fmt.Fprintf(out, "  %-40s %10s  (%.1f MiB/s of body, %.1f MiB/s of payload; spooled, decrypted, decompressed, verified, stored in PostgreSQL, MDN)\n",
		"edihub receive", took.Round(10*time.Millisecond), rate, mib(o.largeBytes)/took.Seconds())
	fmt.Fprintf(out, "  %-40s %10s  (%.1f MiB/s of body; decrypt and verify only, nothing stored)\n",
		"openssl cms -decrypt | cms -verify", ref.Round(10*time.Millisecond), refRate)
	fmt.Fprintf(out, "  %-40s %10.1f  (VmHWM %.1f MiB, RSS before %.1f MiB)\n", "peak RSS above idle, MiB", mib(above), mib(hwm), mib(before))
	// CPU time does not depend on what else the machine runs meanwhile
	// as much as the times above: on a machine shared with other work,
	// compare these too.
	fmt.Fprintf(out, "  %-40s %10s  (receiver process %s + PostgreSQL %s; openssl %s; wall on 2 idle cores at least max(inflate, all/2))\n",
		"CPU time: edihub, openssl", (childCPU + ticksToDuration(pg1.pg-pg0.pg)).Round(10*time.Millisecond),
		childCPU.Round(10*time.Millisecond), ticksToDuration(pg1.pg-pg0.pg).Round(10*time.Millisecond), refCPU.Round(10*time.Millisecond))
	if phases != nil {
		for _, l := range phaseLines(phases) {
			fmt.Fprintf(out, "  %s\n", l)
		}
	}
	fmt.Fprintln(out)
	name := fmt.Sprintf("%.0f MiB compressed+signed+encrypted receive", mib(o.largeBytes))
	o.sum.add(below("peak RSS above idle, "+name, fmt.Sprintf("%.1f MiB", mib(above)),
		fmt.Sprintf("payload %.0f MiB", mib(o.largeBytes)), float64(above)/float64(o.largeBytes), above < maxRSSAboveIdle, "< 64 MiB"))
	o.sum.add(ratioAtLeast("throughput, "+name, fmt.Sprintf("%.1f MiB/s", rate),
		fmt.Sprintf("openssl decrypt, verify %.1f MiB/s", refRate), rate/refRate, 0.80, true))
	return nil
}

// opensslReceive times openssl decrypting the body (to a file, as
// edihub spools) and verifying the signature over the signed entity.
// openssl cannot verify the decrypted multipart/signed as it reads it
// (its S/MIME reader mangles binary content: docs/as2.md), so the
// verification reads the signed entity and the signature as files; the
// split between the two steps is not timed.
func opensslReceive(ctx context.Context, m *openssltest.LargeMessage, keys string) (took, cpu time.Duration, err error) {
	dec := filepath.Join(filepath.Dir(m.BodyPath), "decrypted.mime")
	defer os.Remove(dec)
	start := time.Now()
	decrypt := exec.CommandContext(ctx, "openssl", "cms", "-decrypt", "-binary", "-inform", "DER", "-in", m.BodyPath,
		"-recip", filepath.Join(keys, "station.crt"), "-inkey", filepath.Join(keys, "station.key"), "-out", dec)
	if out, err := decrypt.CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("openssl reference: decrypt: %s: %w", out, err)
	}
	verify := exec.CommandContext(ctx, "openssl", "cms", "-verify", "-binary", "-noverify", "-inform", "DER", "-in", m.SignaturePath,
		"-content", m.SignedPath, "-out", os.DevNull)
	if out, err := verify.CombinedOutput(); err != nil {
		return 0, 0, fmt.Errorf("openssl reference: verify: %s: %w", out, err)
	}
	took = time.Since(start)
	for _, c := range []*exec.Cmd{decrypt, verify} {
		cpu += c.ProcessState.UserTime() + c.ProcessState.SystemTime()
	}
	return took, cpu, nil
}

// largeReceive posts the message from its file to a fresh receiver child
// and returns the child's RSS before, its peak after, the time from the
// request to the MDN, which must be processed with openssl's MIC, and
// the phases the child logged (phases.go; nil when none).
func largeReceive(ctx context.Context, o options, keys string, m *openssltest.LargeMessage) (before, hwm int64, took, cpu time.Duration, phases map[string]any, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, 0, 0, 0, nil, err
	}
	cmd := exec.CommandContext(ctx, self, "-rss-child", keys, "-database-url", o.databaseURL)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, 0, 0, 0, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, 0, 0, nil, err
	}
	if err := cmd.Start(); err != nil {
		return 0, 0, 0, 0, nil, err
	}
	defer func() {
		stdin.Close()
		_ = cmd.Wait()
	}()
	childOut := bufio.NewReader(stdout)
	line, err := childOut.ReadString('\n')
	if err != nil {
		return 0, 0, 0, 0, nil, fmt.Errorf("child: %w", err)
	}
	before, _ = procStatus(cmd.Process.Pid, "VmRSS")
	pid := strconv.Itoa(cmd.Process.Pid)
	cpu0 := procTicks(pid)
	f, err := os.Open(m.BodyPath)
	if err != nil {
		return 0, 0, 0, 0, nil, err
	}
	defer f.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSpace(line), f)
	if err != nil {
		return 0, 0, 0, 0, nil, err
	}
	req.ContentLength = m.BodySize
	req.Header = header(&as2.Wrapped{Header: m.Header}, fmt.Sprintf("<large-%d@bench>", time.Now().UnixNano()))
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, 0, 0, nil, err
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	took = time.Since(start)
	md, err := mdn.Parse(resp.Header, rb, mdn.ParseOptions{Unverified: true})
	if err != nil {
		return 0, 0, 0, 0, nil, fmt.Errorf("reply %d: %.200s: %w", resp.StatusCode, rb, err)
	}
	want, err := as2.ParseMIC(m.MIC)
	if err != nil {
		return 0, 0, 0, 0, nil, err
	}
	if !md.Disposition.Successful() || !md.MICMatches(want) {
		return 0, 0, 0, 0, nil, fmt.Errorf("MDN %s MIC %q, want processed and %q", md.Disposition, md.MIC, m.MIC)
	}
	if hwm, err = procStatus(cmd.Process.Pid, "VmHWM"); err != nil {
		return 0, 0, 0, 0, nil, err
	}
	cpu = ticksToDuration(procTicks(pid) - cpu0)
	// The child prints its phases when its standard input closes.
	stdin.Close()
	return before, hwm, took, cpu, readPhases(childOut), nil
}

// ticksToDuration converts clock ticks (USER_HZ, 100 a second) to a
// duration.
func ticksToDuration(ticks int64) time.Duration { return time.Duration(ticks) * 10 * time.Millisecond }
