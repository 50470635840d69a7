package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestServeAppliesConnectors: a running replica serves a document applied
// from the command line within 2 s, says so in GET /api/v1/connectors
// (its own revision and the list of replicas) and in its metrics, and
// takes a change through its API.
func TestServeAppliesConnectors(t *testing.T) {
	folders := t.TempDir()
	a, peer := newHubStation(t, "HUB CONN"), newHubStation(t, "PEER")
	a.extraEnv = []string{"EDIHUB_FOLDERS_DIR", folders}
	a.start(t, peer)

	doc := "destinations:\n  - name: erp-inbox\n    type: folder\n    folder: {path: erp/inbox}\nroutes:\n  - name: all\n    to: [erp-inbox]\n"
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runCmd(t, env("EDIHUB_DATABASE_URL", a.dbURL, "EDIHUB_FOLDERS_DIR", folders), "connectors", "apply", "-f", p); err != nil {
		t.Fatalf("connectors apply = %v\n%s", err, out)
	}
	applied := time.Now()
	var got struct {
		Revision       int64 `json:"revision"`
		ServedRevision int64 `json:"served_revision"`
		Replicas       []struct {
			Identity string `json:"identity"`
			Revision int64  `json:"revision"`
		} `json:"replicas"`
	}
	for {
		if st := a.api(t, "GET", "/api/v1/connectors", "", nil, &got); st != http.StatusOK {
			t.Fatalf("GET /api/v1/connectors = %d", st)
		}
		if got.ServedRevision == 1 && len(got.Replicas) == 1 && got.Replicas[0].Revision == 1 {
			break
		}
		if time.Since(applied) > 2*time.Second {
			t.Fatalf("GET /api/v1/connectors %v after the apply = %+v, want revision 1 served and recorded within 2s", time.Since(applied), got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Get("http://" + a.opsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), "\nedihub_connectors_revision 1\n") {
		t.Errorf("/metrics lacks edihub_connectors_revision 1")
	}

	// Through the API, against the revision read.
	req, _ := http.NewRequest("PUT", "http://"+a.as2Addr+"/api/v1/connectors?expect=1", strings.NewReader(strings.Replace(doc, "erp/inbox", "erp/in", 1)))
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/yaml")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"folder.path"`) {
		t.Fatalf("PUT /api/v1/connectors?expect=1 = %d %s, want 200 updating folder.path", resp.StatusCode, body)
	}
}

// applyConnectors applies doc to s's database with the CLI, as an
// operator would.
func applyConnectors(t *testing.T, s *hubStation, folders, doc string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runCmd(t, env("EDIHUB_DATABASE_URL", s.dbURL, "EDIHUB_FOLDERS_DIR", folders), "connectors", "apply", "-f", p); err != nil {
		t.Fatalf("%s: connectors apply = %v\n%s", s.name, err, out)
	}
}

// TestConnectorsLastMile runs the last mile both ways through two real
// serve processes: a file an ERP drops into hub OUT's pickup folder is
// taken by its leader-gated pickup poller, sent over AS2 to hub IN, and
// written by hub IN's dispatcher into its drop folder, with the sidecar
// and the done marker; the picked-up file is archived, and each side
// counts exactly one message.
func TestConnectorsLastMile(t *testing.T) {
	out, in := newHubStation(t, "HUB OUT"), newHubStation(t, "HUB IN")
	outDir, inDir := t.TempDir(), t.TempDir()
	for _, d := range []string{filepath.Join(outDir, "erp", "out"), filepath.Join(inDir, "erp", "in")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	out.extraEnv = []string{"EDIHUB_FOLDERS_DIR", outDir}
	in.extraEnv = []string{"EDIHUB_FOLDERS_DIR", inDir}
	out.start(t, in, "sign: sha-256", "encrypt: aes256-cbc", "mdn: sync", "mdn_signed: true")
	in.start(t, out, "sign: sha-256", "encrypt: aes256-cbc", "mdn: sync", "mdn_signed: true")
	applyConnectors(t, out, outDir, fmt.Sprintf("sources:\n  - name: erp-out\n    type: folder\n    folder: {path: erp/out}\n    poll: 1s\nroutes:\n  - name: to-in\n    match: {source: erp-out, path: \"*.x12\"}\n    partner: %q\n", in.name))
	applyConnectors(t, in, inDir, "destinations:\n  - name: erp-in\n    type: folder\n    folder: {path: erp/in}\n    file_name: \"{partner}/{message_id}.{ext}\"\n    sidecar: true\n    done_marker: true\nroutes:\n  - name: all-in\n    match: {direction: inbound}\n    to: [erp-in]\n")

	doc := []byte("ISA*00*          *00*          *ZZ*OUT            *ZZ*IN             *261207*1200*U*00401*000000042*0*P*>~GS*PO*OUT*IN*20261207*1200*42*X*004010~ST*850*0001~BEG*00*SA*PO-42**20261207~SE*3*0001~GE*1*42~IEA*1*000000042~")
	if err := os.WriteFile(filepath.Join(outDir, "erp", "out", "po-42.x12"), doc, 0o644); err != nil {
		t.Fatal(err)
	}

	// Bounded poll: two listings a second apart make the file stable, then
	// the send and the delivery run on their own schedules.
	dropRoot := filepath.Join(inDir, "erp", "in", out.name) // the template keeps the space
	var marker string
	for deadline := time.Now().Add(60 * time.Second); marker == "" && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if m, _ := filepath.Glob(filepath.Join(dropRoot, "*.done")); len(m) == 1 {
			marker = m[0]
		}
	}
	if marker == "" {
		files, _ := filepath.Glob(filepath.Join(inDir, "erp", "in", "*", "*"))
		t.Fatalf("no done marker in %s within 60s; drop folder holds %v", dropRoot, files)
	}
	name := strings.TrimSuffix(marker, ".done")
	if got, err := os.ReadFile(name); err != nil || !bytes.Equal(got, doc) {
		t.Errorf("dropped document %s = %q, %v; want the picked-up file byte for byte", name, got, err)
	}
	var side struct {
		Partner   string `json:"partner"`
		MessageID string `json:"message_id"`
		ICN       string `json:"icn"`
		Type      string `json:"type"`
	}
	if b, err := os.ReadFile(name + ".json"); err != nil || json.Unmarshal(b, &side) != nil {
		t.Fatalf("sidecar %s.json = %q, %v", name, b, err)
	}
	if side.Partner != out.name || side.ICN != "000000042" || side.Type != "850" {
		t.Errorf("sidecar = %+v, want partner %q, ICN 000000042, type 850", side, out.name)
	}
	received := in.received(t, "<"+side.MessageID+">") // the sidecar names it without angle brackets
	if received.Filename != "po-42.x12" {
		t.Errorf("received message %+v, want the original file name po-42.x12", received)
	}

	// The pickup folder: the file archived once, nothing left to take.
	archived, _ := filepath.Glob(filepath.Join(outDir, "erp", "out", "archive", "*"))
	if _, err := os.Stat(filepath.Join(outDir, "erp", "out", "po-42.x12")); !os.IsNotExist(err) || len(archived) != 1 {
		t.Errorf("pickup folder: original stat = %v, archive = %v; want the file moved to the archive once", err, archived)
	}
	var sent struct{ Messages []hubMessage }
	out.api(t, "GET", "/api/v1/messages?direction=outbound&limit=50", "", nil, &sent)
	if len(sent.Messages) != 1 || sent.Messages[0].Status != "delivered" {
		t.Errorf("%s outbound messages = %+v, want exactly one, delivered", out.name, sent.Messages)
	}
	if files, _ := filepath.Glob(filepath.Join(dropRoot, "*")); len(files) != 3 {
		t.Errorf("drop folder holds %v, want the document, its sidecar and its marker", files)
	}
}
