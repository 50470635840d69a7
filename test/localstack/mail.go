package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/edihub/edihub/test/cluster"
)

// Mailpit, the stack's SMTP catcher: scripts/mailpit-build.sh builds it
// into .cache/mailpit/bin (or $EDIHUB_MAILPIT_BIN); without it the stack
// runs without a catcher and the replicas store reports without mailing.

// mailpitBinary is where scripts/mailpit-build.sh put Mailpit.
func mailpitBinary() string {
	dir := os.Getenv("EDIHUB_MAILPIT_BIN")
	if dir == "" {
		dir = filepath.Join(".cache", "mailpit", "bin")
	}
	return filepath.Join(dir, "mailpit")
}

// Mailpit's loopback ports, shifted by offset like the stack's others.
func smtpAddr(offset int) string   { return fmt.Sprintf("127.0.0.1:%d", 1025+offset) }
func mailUIAddr(offset int) string { return fmt.Sprintf("127.0.0.1:%d", 8025+offset) }

// startMailpit starts Mailpit when its binary is there and returns the
// report mail settings for the hub's replicas (nil without a catcher) and
// how to stop it.
func startMailpit(ctx context.Context, state string, offset int) ([]string, func()) {
	nothing := func() {}
	bin := mailpitBinary()
	if _, err := os.Stat(bin); err != nil {
		say("no Mailpit at %s (scripts/mailpit-build.sh builds it): no mail catcher", bin)
		return nil, nothing
	}
	smtp, ui := smtpAddr(offset), mailUIAddr(offset)
	if err := cluster.CheckFree(smtp, ui); err != nil {
		say("Mailpit not started: %v", err)
		return nil, nothing
	}
	dir := filepath.Join(state, "mailpit")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		say("Mailpit not started: %v", err)
		return nil, nothing
	}
	logf, err := os.Create(filepath.Join(dir, "mailpit.log"))
	if err != nil {
		say("Mailpit not started: %v", err)
		return nil, nothing
	}
	cmd := exec.Command(bin, "--smtp", smtp, "--listen", ui, "--database", filepath.Join(dir, "mailpit.db"),
		"--smtp-auth-accept-any", "--smtp-auth-allow-insecure")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		say("Mailpit not started: %v", err)
		return nil, nothing
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	stop := func() {
		say("stopping Mailpit")
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = logf.Close()
	}
	for deadline := time.Now().Add(15 * time.Second); ; {
		if conn, err := net.DialTimeout("tcp", smtp, time.Second); err == nil {
			_ = conn.Close()
			break
		}
		if time.Now().After(deadline) {
			say("Mailpit did not listen on %s within 15s; see %s", smtp, logf.Name())
			return nil, stop
		}
		select {
		case <-done:
			say("Mailpit exited at start; see %s", logf.Name())
			return nil, func() { _ = logf.Close() }
		case <-ctx.Done():
			return nil, stop
		case <-time.After(100 * time.Millisecond):
		}
	}
	say("Mailpit: SMTP on %s, web UI on http://%s", smtp, ui)
	return []string{
		"EDIHUB_SMTP_URL=smtp://" + smtp + "?tls=none",
		"EDIHUB_REPORT_FROM=edihub <edihub@localhost>",
		"EDIHUB_REPORT_TO=managers@localhost",
	}, stop
}

// sayMail prints where the report mails are and the command that mails
// today's report now.
func sayMail(mailEnv []string, binary, dbURL, cfgPath string, offset int) {
	if mailEnv == nil {
		say("  mail       no mail catcher (scripts/mailpit-build.sh builds Mailpit; needs npm): reports are stored, not mailed")
		return
	}
	var env []string
	for _, kv := range append([]string{"EDIHUB_DATABASE_URL=" + dbURL, "EDIHUB_CONFIG=" + cfgPath}, mailEnv...) {
		k, v, _ := strings.Cut(kv, "=")
		env = append(env, k+"='"+strings.ReplaceAll(v, "'", `'\''`)+"'")
	}
	say("  mail       Mailpit web UI http://%s shows the report mails; today's so far, now:", mailUIAddr(offset))
	say("               %s %s report -date today -send", strings.Join(env, " "), binary)
}

// exchangeCount is how many documents the hub and the demo partner each
// send the other at start.
const exchangeCount = 3

// exchange has the hub and the demo partner send each other a few
// documents (edihub send queues them in each station's outbox; the
// replicas and the demo station send them), so that today's report has
// traffic both ways. Failures are reported, not fatal.
func exchange(ctx context.Context, binary, state, hubURL, hubCfg, demoURL string) {
	dir := filepath.Join(state, "samples")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		say("no demo exchange: %v", err)
		return
	}
	docs, err := writeDemoDocuments(dir, exchangeCount, time.Now())
	if err != nil {
		say("no demo exchange: %v", err)
		return
	}
	demoCfg := filepath.Join(state, "demo", "edihub.yaml")
	for _, d := range docs {
		dbURL, cfg := hubURL, hubCfg
		if d.From == demoAS2ID {
			dbURL, cfg = demoURL, demoCfg
		}
		cmd := exec.CommandContext(ctx, binary, "send", "-partner", d.To, "-content-type", "application/EDI-X12", d.Path)
		cmd.Env = append(os.Environ(), "EDIHUB_DATABASE_URL="+dbURL, "EDIHUB_CONFIG="+cfg)
		if out, err := cmd.CombinedOutput(); err != nil {
			say("demo exchange: %s could not queue a document: %v: %s", d.From, err, strings.TrimSpace(string(out)))
			return
		}
	}
	say("demo exchange: the hub and DEMO PARTNER queued %d documents each for the other", exchangeCount)
}
