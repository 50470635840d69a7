package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// commandFlags defines the flags of the command named path ("report",
// "partners apply") on a flagSet reading getenv.
func commandFlags(t *testing.T, path string, getenv func(string) string) *flagSet {
	t.Helper()
	words := strings.Fields(path)
	for _, c := range commands() {
		if c.name != words[0] {
			continue
		}
		if len(words) > 1 {
			var err error
			if c, _, err = verb(c, words[1:], &bytes.Buffer{}); err != nil {
				t.Fatalf("verb %q: %v", path, err)
			}
		}
		fs := newFlagSet(c.name, getenv, &bytes.Buffer{})
		if c.flags != nil {
			c.flags(fs)
		}
		return fs
	}
	t.Fatalf("no command %q", path)
	return nil
}

// allCommands lists every command and subcommand by its path.
func allCommands() []string {
	var out []string
	for _, c := range commands() {
		if c.verbs == nil {
			out = append(out, c.name)
			continue
		}
		for _, v := range c.verbs {
			out = append(out, c.name+" "+v.name)
		}
	}
	return out
}

// TestEveryFlagIsSettingOrAction: a flag defined on the embedded
// flag.FlagSet, neither a setting nor an action, is refused.
func TestEveryFlagIsSettingOrAction(t *testing.T) {
	for _, path := range allCommands() {
		fs := commandFlags(t, path, env())
		if bad := fs.unclassified(); len(bad) > 0 {
			t.Errorf("edihub %s: flags %v are neither settings nor actions", path, bad)
		}
		if err := fs.parse(nil); err != nil {
			t.Errorf("edihub %s: parse(nil) = %v", path, err)
		}
	}
	fs := newFlagSet("x", env(), &bytes.Buffer{})
	var b bool
	fs.BoolVar(&b, "stray", false, "defined on the flag.FlagSet")
	if err := fs.parse(nil); err == nil || !strings.Contains(err.Error(), "stray") {
		t.Errorf("parse with an unclassified flag = %v, want an error naming it", err)
	}
}

// TestActionFlagsHaveNoVariable: what one invocation does (its files,
// dates, output, -send, -force, a dry run) is never read from the
// environment, whatever is set there.
func TestActionFlagsHaveNoVariable(t *testing.T) {
	tests := []struct {
		give string // command
		want []string
	}{
		{"report", []string{"date", "format", "o", "send", "force"}},
		{"send", []string{"partner", "content-type", "filename"}},
		{"cancel", []string{"reason"}},
		{"status", []string{"output", "o"}},
		{"partners apply", []string{"f", "dry-run", "prune"}},
		{"partners diff", []string{"f", "prune"}},
		{"partners delete", []string{"version"}},
		{"partners history", []string{"limit"}},
		{"partners restore", []string{"version"}},
		{"partners test", []string{"json"}},
		{"users add", []string{"role", "password-file"}},
		{"users role", []string{"role"}},
		{"users passwd", []string{"password-file"}},
		{"users token", []string{"name", "role", "expires"}},
	}
	for _, tt := range tests {
		read := map[string]bool{}
		getenv := func(k string) string { read[k] = true; return "" }
		fs := commandFlags(t, tt.give, getenv)
		if err := fs.parse(nil); err != nil {
			t.Fatalf("edihub %s: parse(nil) = %v", tt.give, err)
		}
		for _, name := range tt.want {
			if fs.Lookup(name) == nil {
				t.Errorf("edihub %s has no flag -%s", tt.give, name)
				continue
			}
			if !fs.isAction(name) {
				t.Errorf("edihub %s: -%s is not an action flag", tt.give, name)
			}
			if envs, ok := fs.envs[name]; ok {
				t.Errorf("edihub %s: -%s reads %v, want no variable", tt.give, name, envs)
			}
			if read[envName(name)] {
				t.Errorf("edihub %s: parse read %s, want it ignored (-%s is an action)", tt.give, envName(name), name)
			}
		}
		var help bytes.Buffer
		fs.printDefaults(&help)
		for _, name := range tt.want {
			if regexp.MustCompile(`\b` + envName(name) + `\b`).MatchString(help.String()) {
				t.Errorf("edihub help %s names %s:\n%s", tt.give, envName(name), help.String())
			}
		}
	}
}

// TestActionVariablesIgnored: EDIHUB_FORCE, EDIHUB_SEND and the like left
// in a shell do not change what edihub report or edihub send do.
func TestActionVariablesIgnored(t *testing.T) {
	dbURL := pgtest.URL(t)
	cfg := writeConfig(t, "")
	mails, smtpURL := startCatcher(t)
	settings := []string{"EDIHUB_DATABASE_URL", dbURL, "EDIHUB_CONFIG", cfg, "EDIHUB_REPORT_TZ", "Europe/Berlin",
		"EDIHUB_SMTP_URL", smtpURL, "EDIHUB_REPORT_FROM", "edihub@hub.example", "EDIHUB_REPORT_TO", "a@hub.example"}
	out := filepath.Join(t.TempDir(), "report.json")
	stray := env(append(settings, "EDIHUB_FORCE", "true", "EDIHUB_SEND", "true", "EDIHUB_DATE", "today",
		"EDIHUB_FORMAT", "json", "EDIHUB_O", out, "EDIHUB_PARTNER", "ACME CORP")...)

	if _, errOut, err := runCmd(t, env(settings...), "report", "-date", "2026-11-30", "-send"); err != nil {
		t.Fatalf("report -date 2026-11-30 -send = %v: %s", err, errOut)
	}
	if _, _, err := runCmd(t, stray, "report", "-date", "2026-11-30", "-send"); err == nil || !strings.Contains(err.Error(), "already mailed") {
		t.Errorf("report -send again with EDIHUB_FORCE=true = %v, want already mailed (the variable ignored)", err)
	}
	stdout, errOut, err := runCmd(t, stray, "report", "-date", "2026-11-30")
	if err != nil {
		t.Fatalf("report with EDIHUB_SEND=true = %v: %s", err, errOut)
	}
	if json.Valid([]byte(stdout)) || !strings.Contains(stdout, "2026-11-30") {
		t.Errorf("report with EDIHUB_FORMAT=json wrote %.200q, want the text report of 2026-11-30 on standard output", stdout)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("report wrote %s, the file of EDIHUB_O", out)
	}
	if ids := mails.ids(t); len(ids) != 1 {
		t.Errorf("mails %v, want the one of the first -send", ids)
	}

	doc := filepath.Join(t.TempDir(), "order.x12")
	if err := os.WriteFile(doc, []byte("ST*850*0001~\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCmd(t, stray, "send", doc); err == nil || !strings.Contains(err.Error(), "no partner") {
		t.Errorf("send without -partner, EDIHUB_PARTNER set = %v, want no partner", err)
	}
}
