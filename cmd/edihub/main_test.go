package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/devpki"
	"github.com/edihub/edihub/internal/testenv/freeport"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

var update = flag.Bool("update", false, "rewrite the settings reference docs/settings.md")

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(testenv.Main(m))
}

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func runCmd(t *testing.T, getenv func(string) string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := run(ctx, args, getenv, &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

func TestHelpListsCommandsAndSettings(t *testing.T) {
	out, _, err := runCmd(t, env(), "help")
	if err != nil {
		t.Fatalf("edihub help = %v", err)
	}
	for _, c := range commands() {
		if !strings.Contains(out, c.name) {
			t.Errorf("edihub help does not list %q", c.name)
		}
	}
	out, _, err = runCmd(t, env(), "help", "serve")
	if err != nil {
		t.Fatalf("edihub help serve = %v", err)
	}
	for _, want := range []string{"-database-url", "EDIHUB_DATABASE_URL", "-config", "EDIHUB_CONFIG", "-http-addr", "EDIHUB_HTTP_ADDR", "default :8080", "EDIHUB_OPS_ADDR", "default :9090", "EDIHUB_LOG_FORMAT", "EDIHUB_LOG_LEVEL", "EDIHUB_MIGRATE", "EDIHUB_API_TOKEN", "EDIHUB_MAX_MDN_BYTES", "docs/settings.md"} {
		if !strings.Contains(out, want) {
			t.Errorf("edihub help serve lacks %q", want)
		}
	}
	if _, _, err := runCmd(t, env(), "frobnicate"); err == nil {
		t.Error("edihub frobnicate = nil error, want a usage error")
	}
}

// TestSettingsReference keeps docs/settings.md equal to the flag
// definitions and settingDetails. Run
// go test ./cmd/edihub -run TestSettingsReference -update to rewrite it.
func TestSettingsReference(t *testing.T) {
	path := filepath.Join("..", "..", "docs", "settings.md")
	want := settingsMarkdown()
	got, err := os.ReadFile(path)
	if err != nil && !(*update && errors.Is(err, fs.ErrNotExist)) {
		t.Fatal(err)
	}
	if string(got) == want {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/settings.md is out of date; run go test ./cmd/edihub -run TestSettingsReference -update\n got:\n%s\nwant:\n%s", got, want)
}

// TestFlagUsageIsOneLine keeps every flag's usage short enough for one
// line of edihub help; the details of a setting go to settingDetails.
func TestFlagUsageIsOneLine(t *testing.T) {
	for _, c := range commandsAndVerbs() {
		fs := newFlagSet(c.name, env(), &bytes.Buffer{})
		c.flags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			if n := utf8.RuneCountInString(f.Usage); n > maxUsage || strings.Contains(f.Usage, "\n") {
				t.Errorf("edihub %s -%s: usage is %d characters (at most %d, one line): %q", c.name, f.Name, n, maxUsage, f.Usage)
			}
		})
	}
}

// TestSettingDetailsNameSettings keeps settingDetails free of entries for
// flags that are no settings (renamed, removed, or action flags), which
// docs/settings.md would otherwise print for nothing.
func TestSettingDetailsNameSettings(t *testing.T) {
	settings := map[string]bool{}
	for _, c := range commandsAndVerbs() {
		fs := newFlagSet(c.name, env(), &bytes.Buffer{})
		c.flags(fs)
		for _, name := range fs.order {
			settings[name] = true
		}
	}
	for name := range settingDetails {
		if !settings[name] {
			t.Errorf("settingDetails[%q]: no command has a setting -%s", name, name)
		}
	}
}

// commandsAndVerbs lists the commands with flags: each verb of a command
// with verbs, named "partners apply".
func commandsAndVerbs() []command {
	var out []command
	for _, c := range commands() {
		if c.verbs == nil {
			out = append(out, c)
			continue
		}
		for _, v := range c.verbs {
			v.name = c.name + " " + v.name
			out = append(out, v)
		}
	}
	return out
}

const settingsHeader = `# Settings

<!-- Generated from the flag definitions in cmd/edihub: do not edit. Regenerate with
go test ./cmd/edihub -run TestSettingsReference -update -->

This page is generated from the flag definitions of ` + "`cmd/edihub`" + ` (the one-line
meanings) and ` + "`settingDetails`" + ` in ` + "`cmd/edihub/settingdocs.go`" + ` (the details);
a test fails while it is out of date. Regenerate it with
` + "`go test ./cmd/edihub -run TestSettingsReference -update`" + `.

Every setting is a flag whose default comes from its environment variable;
` + "`edihub help <command>`" + ` prints the same list. What one command does is never
read from the environment: its arguments and the flags of the invocation
(` + "`-send`, `-force`, `-date`, `-format`, `-o`, `-f`, `-dry-run`, `-partner`, `-reason`, `-role`" + `, ...)
have no variable, so a value left in a shell cannot make the next command mail
a finished day again; ` + "`edihub help <command>`" + ` lists them apart from the
settings.
`

func settingsMarkdown() string {
	var b strings.Builder
	b.WriteString(settingsHeader)
	var detailed []string // flags with details, in order of first appearance
	for _, c := range commands() {
		name := c.name
		if c.verbs != nil {
			// The subcommands share their settings: shown once.
			c, name = c.verbs[0], c.name+" …"
		}
		fs := newFlagSet(c.name, env(), &bytes.Buffer{})
		c.flags(fs)
		docs := fs.docs()
		if len(docs) == 0 {
			continue
		}
		b.WriteString("\n## edihub " + name + "\n\n| variable | flag | default | meaning |\n|---|---|---|---|\n")
		for _, d := range docs {
			def := d.Default
			if def == "" {
				def = "—"
			} else {
				def = "`" + def + "`"
			}
			meaning := strings.ReplaceAll(d.Usage, "|", "\\|")
			if flagName := strings.TrimPrefix(d.Flag, "-"); settingDetails[flagName] != "" {
				meaning += " ([details](#" + d.Flag + "))"
				if !slices.Contains(detailed, flagName) {
					detailed = append(detailed, flagName)
				}
			}
			b.WriteString("| `" + d.Env + "` | `" + d.Flag + "` | " + def + " | " + meaning + " |\n")
		}
	}
	if len(detailed) > 0 {
		b.WriteString("\n## Details\n")
		for _, name := range detailed {
			b.WriteString("\n### -" + name + "\n\n" + settingDetails[name] + "\n")
		}
	}
	return b.String()
}

func TestServeRejectsBadSettings(t *testing.T) {
	cfg := writeConfig(t, "")
	tests := []struct {
		name string
		env  []string
		want []string // substrings of the error
	}{
		{"no database", []string{"EDIHUB_CONFIG", cfg}, []string{"EDIHUB_DATABASE_URL"}},
		{"no config", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x"}, []string{"EDIHUB_CONFIG"}},
		{"bad duration", []string{"EDIHUB_SHUTDOWN_TIMEOUT", "soon"}, []string{"EDIHUB_SHUTDOWN_TIMEOUT", "-shutdown-timeout"}},
		{"bad bool", []string{"EDIHUB_MIGRATE", "perhaps"}, []string{"EDIHUB_MIGRATE"}},
		{"negative decompression limit", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_MAX_DECOMPRESSED_BYTES", "-1"}, []string{"EDIHUB_MAX_DECOMPRESSED_BYTES", "-max-decompressed-bytes"}},
		{"negative heap floor", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_GC_HEAP_FLOOR_BYTES", "-1"}, []string{"EDIHUB_GC_HEAP_FLOOR_BYTES", "-gc-heap-floor-bytes"}},
		{"zero MDN limit", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_MAX_MDN_BYTES", "0"}, []string{"EDIHUB_MAX_MDN_BYTES", "-max-mdn-bytes", "positive"}},
		{"zero AS2 read timeout", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_AS2_READ_TIMEOUT", "0s"}, []string{"EDIHUB_AS2_READ_TIMEOUT", "-as2-read-timeout", "positive"}},
		{"folders dir not a directory", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_FOLDERS_DIR", cfg}, []string{"EDIHUB_FOLDERS_DIR", "-folders-dir", "not a directory"}},
		{"bad log format", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_LOG_FORMAT", "xml"}, []string{"EDIHUB_LOG_FORMAT", "json or console"}},
		{"zero worker stuck-after", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_WORKER_STUCK_AFTER", "0s"}, []string{"EDIHUB_WORKER_STUCK_AFTER", "-worker-stuck-after", "positive"}},
		{"zero MDN poll interval", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_MDN_POLL_INTERVAL", "0s"}, []string{"EDIHUB_MDN_POLL_INTERVAL", "-mdn-poll-interval", "positive"}},
		{"zero ack watch interval", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_ACK_WATCH_INTERVAL", "0s"}, []string{"EDIHUB_ACK_WATCH_INTERVAL", "-ack-watch-interval", "positive"}},
		{"zero MDN batch", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_MDN_BATCH_SIZE", "0"}, []string{"EDIHUB_MDN_BATCH_SIZE", "-mdn-batch-size"}},
		{"negative retry window", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_RETRY_WINDOW", "-1h"}, []string{"EDIHUB_RETRY_WINDOW", "-retry-window"}},
		{"webhook without secret", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_WEBHOOK_URL", "https://b.example/hook"}, []string{"EDIHUB_WEBHOOK_SECRET_FILE", "-webhook-secret-file"}},
		{"webhook URL not absolute", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_WEBHOOK_URL", "/hook", "EDIHUB_WEBHOOK_SECRET_FILE", cfg}, []string{"EDIHUB_WEBHOOK_URL", "-webhook-url"}},
		{"audit retention shorter", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_AUDIT_RETENTION", "24h"}, []string{"EDIHUB_AUDIT_RETENTION", "-audit-retention", "EDIHUB_RETENTION"}},
		{"zero purge interval", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_PURGE_INTERVAL", "0s"}, []string{"EDIHUB_PURGE_INTERVAL", "-purge-interval"}},
		{"bad report zone", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_REPORT_TZ", "Mars/Olympus"}, []string{"EDIHUB_REPORT_TZ", "-report-tz", "IANA"}},
		{"bad report time", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_REPORT_AT", "25:00"}, []string{"EDIHUB_REPORT_AT", "-report-at", "HH:MM"}},
		{"zero catch-up days", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_REPORT_CATCHUP_DAYS", "0"}, []string{"EDIHUB_REPORT_CATCHUP_DAYS", "-report-catchup-days"}},
		{"bad SMTP URL", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_SMTP_URL", "smtp://u:hunter2@mail.example"}, []string{"EDIHUB_SMTP_URL", "-smtp-url", "password file"}},
		{"SMTP user without password file", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_SMTP_URL", "smtp://u@mail.example", "EDIHUB_REPORT_FROM", "a@b.example", "EDIHUB_REPORT_TO", "c@d.example"}, []string{"EDIHUB_SMTP_PASSWORD_FILE", "-smtp-password-file"}},
		{"no recipients", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_SMTP_URL", "smtp://mail.example", "EDIHUB_REPORT_FROM", "a@b.example"}, []string{"EDIHUB_REPORT_TO", "-report-to"}},
		{"recipients without SMTP", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_REPORT_TO", "c@d.example"}, []string{"EDIHUB_SMTP_URL", "-smtp-url"}},
		{"OIDC settings without an issuer", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_OIDC_CLIENT_ID", "edihub"}, []string{"EDIHUB_OIDC_ISSUER", "-oidc-issuer"}},
		{"OIDC without roles and secret", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_OIDC_ISSUER", "http://127.0.0.1:1"}, []string{"EDIHUB_OIDC_ROLES", "EDIHUB_OIDC_CLIENT_SECRET_FILE"}},
		{"OIDC issuer in clear", []string{"EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg, "EDIHUB_OIDC_ISSUER", "http://idp.example",
			"EDIHUB_OIDC_CLIENT_ID", "edihub", "EDIHUB_OIDC_CLIENT_SECRET_FILE", cfg, "EDIHUB_OIDC_REDIRECT_URL", "http://127.0.0.1:8080/console/oidc/callback",
			"EDIHUB_OIDC_ROLES", "edi-ops=operator"}, []string{"EDIHUB_OIDC_ISSUER", "plain http"}},
		{"secret not echoed", []string{"EDIHUB_DB_MAX_CONNS", "many", "EDIHUB_API_TOKEN", "tok3n"}, []string{"EDIHUB_DB_MAX_CONNS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := runCmd(t, env(tt.env...), "serve")
			if err == nil {
				t.Fatal("serve = nil error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("serve error = %q, want it to name %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "tok3n") || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("serve error leaks a secret: %q", err)
			}
		})
	}
}

func TestDecompressionLimit(t *testing.T) {
	tests := []struct {
		give serveOptions
		want int64
	}{
		{serveOptions{maxBodyBytes: 100 << 20}, 400 << 20},
		{serveOptions{maxBodyBytes: 100 << 20, maxDecompressedBytes: 1 << 30}, 1 << 30},
	}
	for _, tt := range tests {
		if got := tt.give.decompressionLimit(); got != tt.want {
			t.Errorf("decompressionLimit(body %d, set %d) = %d, want %d", tt.give.maxBodyBytes, tt.give.maxDecompressedBytes, got, tt.want)
		}
	}
}

func TestServeBrokenConfigNamesField(t *testing.T) {
	cfg := writeConfig(t, "    colour: blue\n")
	_, _, err := runCmd(t, env("EDIHUB_DATABASE_URL", "postgres://x@127.0.0.1:1/x", "EDIHUB_CONFIG", cfg), "serve")
	if err == nil || !strings.Contains(err.Error(), "colour") || !strings.Contains(err.Error(), "edihub.yaml") {
		t.Fatalf("serve with an unknown config key = %v, want an error naming the file and the key", err)
	}
}

func TestServeRefusesOutdatedSchema(t *testing.T) {
	url := pgtest.EmptyURL(t)
	cfg := writeConfig(t, "")
	_, _, err := runCmd(t, env("EDIHUB_DATABASE_URL", url, "EDIHUB_CONFIG", cfg, "EDIHUB_HTTP_ADDR", "127.0.0.1:0", "EDIHUB_OPS_ADDR", "127.0.0.1:0"), "serve")
	if err == nil || !strings.Contains(err.Error(), "edihub migrate") || !strings.Contains(err.Error(), "EDIHUB_MIGRATE=true") {
		t.Fatalf("serve on an empty database = %v, want an error telling to run edihub migrate", err)
	}
}

func TestMigrateCommand(t *testing.T) {
	url := pgtest.EmptyURL(t)
	out, _, err := runCmd(t, env("EDIHUB_DATABASE_URL", url), "migrate")
	if err != nil {
		t.Fatalf("migrate = %v", err)
	}
	if !strings.Contains(out, "applied") || !strings.Contains(out, "schema now at version") {
		t.Errorf("migrate output = %q, want applied migrations and the version", out)
	}
	out, _, err = runCmd(t, env("EDIHUB_DATABASE_URL", url), "migrate")
	if err != nil || !strings.Contains(out, "up to date") {
		t.Errorf("second migrate = %q, %v; want up to date", out, err)
	}
}

var (
	keyOnce sync.Once
	keyPEM  []byte
	certPEM []byte
)

// writeConfig writes a valid station+partner config whose one partner gets
// extra (already indented) YAML lines, and returns its path.
func writeConfig(t *testing.T, partnerExtra string) string {
	t.Helper()
	keyOnce.Do(func() {
		id, err := devpki.New("test", devpki.Options{})
		if err != nil {
			panic(err)
		}
		keyPEM, certPEM = id.KeyPEM(), id.CertPEM()
	})
	dir := t.TempDir()
	for name, b := range map[string][]byte{"station.key": keyPEM, "station.crt": certPEM, "partner.crt": certPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := `station: {as2_id: "EDIHUB", private_key: station.key, certificate: station.crt}
partners:
  - as2_id: "ACME CORP"
    url: http://127.0.0.1:1/as2
    certificate: partner.crt
    sign: sha-256
    encrypt: aes256-cbc
    mdn: sync
    mdn_signed: true
` + partnerExtra
	path := filepath.Join(dir, "edihub.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeBusyAddressClosesListeners: when a listener cannot be bound
// (the ops address is taken), serve fails naming the setting, and the
// listeners it bound before are closed again: their ports are free.
func TestServeBusyAddressClosesListeners(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ports, err := freeport.Ports(2)
	if err != nil {
		t.Fatal(err)
	}
	as2Addr, apiAddr := fmt.Sprintf("127.0.0.1:%d", ports[0]), fmt.Sprintf("127.0.0.1:%d", ports[1])
	_, _, err = runCmd(t, env("EDIHUB_DATABASE_URL", pgtest.URL(t), "EDIHUB_CONFIG", writeConfig(t, ""), "EDIHUB_LEADER_BACKEND", "postgres",
		"EDIHUB_HTTP_ADDR", as2Addr, "EDIHUB_API_ADDR", apiAddr, "EDIHUB_OPS_ADDR", taken.Addr().String()), "serve")
	if err == nil || !strings.Contains(err.Error(), "EDIHUB_OPS_ADDR") {
		t.Fatalf("serve with the ops address taken = %v, want an error naming EDIHUB_OPS_ADDR", err)
	}
	for _, addr := range []string{as2Addr, apiAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("%s is still bound after serve failed: %v", addr, err)
			continue
		}
		ln.Close()
	}
}

// TestFlagsAfterArguments: flags may follow positional arguments (edihub
// users add NAME -role admin), up to "--", after which everything is an
// argument.
func TestFlagsAfterArguments(t *testing.T) {
	tests := []struct {
		give     []string
		wantRole string
		wantArgs []string
	}{
		{[]string{"alice", "-role", "admin"}, "admin", []string{"alice"}},
		{[]string{"-role", "admin", "alice"}, "admin", []string{"alice"}},
		{[]string{"alice", "-role", "admin", "ci"}, "admin", []string{"alice", "ci"}},
		{[]string{"alice", "--", "-role", "admin"}, "", []string{"alice", "-role", "admin"}},
		{[]string{"-", "x"}, "", []string{"-", "x"}},
	}
	for _, tt := range tests {
		fs := newFlagSet("test", env(), io.Discard)
		var role string
		fs.ActionString(&role, "role", "", "")
		if err := fs.parse(tt.give); err != nil {
			t.Fatalf("parse(%q) = %v", tt.give, err)
		}
		if role != tt.wantRole || strings.Join(fs.args, "|") != strings.Join(tt.wantArgs, "|") {
			t.Errorf("parse(%q): -role %q, arguments %q; want %q, %q", tt.give, role, fs.args, tt.wantRole, tt.wantArgs)
		}
	}
}
