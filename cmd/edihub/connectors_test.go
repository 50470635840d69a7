package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

const cliConnectorsV1 = `destinations:
  - name: erp-inbox
    type: folder
    folder: {path: erp/inbox}
  - name: app
    type: http
    http: {url: "https://app.example/edi", secret: app-hook}
routes:
  - name: all
    to: [erp-inbox]
`

// TestConnectorsCLI: edihub connectors apply -dry-run stores nothing;
// apply stores the document, audited as the OS user; get prints it back
// as written and as a summary; history lists the revisions; restore
// brings one back; a broken document is refused naming the field.
func TestConnectorsCLI(t *testing.T) {
	dir, secrets, folders := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(secrets, "app-hook"), []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	dbURL := pgtest.URL(t)
	getenv := env("EDIHUB_DATABASE_URL", dbURL, "EDIHUB_SECRETS_DIR", secrets, "EDIHUB_FOLDERS_DIR", folders)
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1 := write("v1.yaml", cliConnectorsV1)
	v2 := write("v2.yaml", strings.Replace(cliConnectorsV1, "to: [erp-inbox]", "to: [erp-inbox, app]", 1))

	out, _, err := runCmd(t, getenv, "connectors", "apply", "-dry-run", "-f", v1)
	if err != nil || !strings.Contains(out, "create destination erp-inbox") || !strings.Contains(out, "dry run: 3 change(s) against revision 0") {
		t.Fatalf("connectors apply -dry-run = %v\n%s\nwant three creates checked", err, out)
	}
	st, err := postgres.Open(context.Background(), dbURL, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if n, _ := st.ConnectorsRevisionNumber(context.Background()); n != 0 {
		t.Fatalf("revision after a dry run = %d, want 0", n)
	}

	out, _, err = runCmd(t, getenv, "connectors", "apply", "-f", v1)
	if err != nil || !strings.Contains(out, "applied: connectors revision 1") {
		t.Fatalf("connectors apply = %v\n%s", err, out)
	}
	out, _, err = runCmd(t, getenv, "connectors", "apply", "-f", v1)
	if err != nil || !strings.Contains(out, "nothing to apply: revision 1") {
		t.Errorf("connectors apply (same document) = %v\n%s\nwant nothing to apply", err, out)
	}
	out, _, err = runCmd(t, getenv, "connectors", "apply", "-revision", "0", "-f", v2)
	if err == nil || !strings.Contains(err.Error(), "changed meanwhile") {
		t.Errorf("connectors apply -revision 0 at revision 1 = %v, want refused as changed meanwhile\n%s", err, out)
	}
	if _, _, err = runCmd(t, getenv, "connectors", "apply", "-revision", "1", "-f", v2); err != nil {
		t.Fatalf("connectors apply -revision 1 = %v", err)
	}

	out, _, err = runCmd(t, getenv, "connectors", "get", "-o", "yaml")
	if err != nil || out != strings.Replace(cliConnectorsV1, "to: [erp-inbox]", "to: [erp-inbox, app]", 1) {
		t.Errorf("connectors get -o yaml = %v\n%s\nwant v2 as written", err, out)
	}
	out, _, err = runCmd(t, getenv, "connectors", "get")
	for _, want := range []string{"connectors revision 2", "by cli:", "destination  erp-inbox  folder   erp/inbox", "https://app.example/edi", "route        all"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("connectors get = %v\n%s\nwant it to contain %q", err, out, want)
		}
	}
	out, _, err = runCmd(t, getenv, "connectors", "history")
	if err != nil || !strings.Contains(out, "revision 2") || !strings.Contains(out, "    update route all: to") || !strings.Contains(out, "revision 1") {
		t.Errorf("connectors history = %v\n%s", err, out)
	}
	out, _, err = runCmd(t, getenv, "connectors", "restore", "-revision", "1")
	if err != nil || !strings.Contains(out, "restored revision 1 as revision 3") {
		t.Errorf("connectors restore -revision 1 = %v\n%s", err, out)
	}

	audit, err := st.AuditLog(context.Background(), postgres.AuditQuery{Target: "connectors"})
	if err != nil || len(audit) != 3 || !strings.HasPrefix(audit[0].Actor, "cli:") || audit[0].Action != "connectors.restore" || audit[2].Detail["file"] != v1 {
		t.Errorf("audit = %+v, %v, want apply, apply, restore by cli:<os user>", audit, err)
	}

	bad := write("bad.yaml", strings.Replace(cliConnectorsV1, "erp/inbox", "/etc", 1))
	_, _, err = runCmd(t, getenv, "connectors", "apply", "-f", bad)
	if err == nil || !strings.Contains(err.Error(), "bad.yaml:4: destinations[0].folder.path") {
		t.Errorf("connectors apply of an absolute folder = %v, want refused naming bad.yaml:4 and the field", err)
	}
}

// TestConnectorsCLIAway: away from the replicas (no secrets or folders
// directory here) a document is checked with warnings, not refused.
func TestConnectorsCLIAway(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(p, []byte(cliConnectorsV1), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCmd(t, env("EDIHUB_DATABASE_URL", pgtest.URL(t)), "connectors", "apply", "-dry-run", "-f", p)
	if err != nil || !strings.Contains(out, "warning: ") || !strings.Contains(out, "EDIHUB_SECRETS_DIR") || !strings.Contains(out, "EDIHUB_FOLDERS_DIR") {
		t.Errorf("connectors apply -dry-run away = %v\n%s\nwant warnings naming both directories", err, out)
	}
}
