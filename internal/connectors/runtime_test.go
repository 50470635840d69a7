package connectors_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/connector"
	"github.com/edihub/edihub/internal/connectors"
)

// runtimeOf serves the documents put into it, as Live's Current would.
type runtimeOf struct {
	cur atomic.Pointer[connectors.Snapshot]
}

func (r *runtimeOf) put(t *testing.T, rev int64, doc, folders string) {
	t.Helper()
	c, err := config.ParseConnectors([]byte(doc), config.ConnectorsOptions{Name: "c.yaml", FoldersDir: folders, SecretsDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	r.cur.Store(&connectors.Snapshot{Revision: rev, Connectors: c})
}

// TestRuntime: a destination is built once per version of its entry, with
// its template, sidecar and marker; a changed entry is rebuilt (writing
// to its new folder), a removed one is unknown, and a secret missing on
// the replica is refused naming the setting.
func TestRuntime(t *testing.T) {
	folders := t.TempDir()
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(folders, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var src runtimeOf
	src.put(t, 1, "destinations:\n  - name: drop\n    type: folder\n    folder: {path: a}\n    file_name: \"{partner}-{id}.{ext}\"\n    sidecar: true\nroutes:\n  - name: r\n    match: {direction: inbound, partners: [ACME]}\n    to: [drop]\n", folders)
	rt := connectors.NewRuntime(src.cur.Load, "", folders, zap.NewNop())
	t.Cleanup(func() { rt.Close() })

	doc := connector.Document{ID: 7, Partner: "ACME", Direction: "inbound", ContentType: "application/edi-x12"}
	if route, to := rt.Route(doc); route != "r" || len(to) != 1 || to[0] != "drop" {
		t.Fatalf("Route(ACME) = %q, %v; want r, [drop]", route, to)
	}
	if route, to := rt.Route(connector.Document{Partner: "OTHER", Direction: "inbound"}); route != "" || len(to) != 0 {
		t.Errorf("Route(OTHER) = %q, %v; want none", route, to)
	}
	d1, opts, err := rt.Destination("drop")
	if err != nil || !opts.Sidecar {
		t.Fatalf("Destination(drop) = %v, %+v, %v; want the folder with a sidecar", d1, opts, err)
	}
	if again, _, _ := rt.Destination("drop"); again != d1 {
		t.Error("Destination(drop) built again for the same entry")
	}
	name, err := connector.Deliver(context.Background(), d1, doc, opts, bytes.NewReader([]byte("ISA*")))
	if err != nil || name != "ACME-7.edi" {
		t.Fatalf("Deliver = %q, %v; want ACME-7.edi", name, err)
	}
	if _, err := os.Stat(filepath.Join(folders, "a", "ACME-7.edi.json")); err != nil {
		t.Errorf("sidecar: %v", err)
	}

	src.put(t, 2, "destinations:\n  - name: drop\n    type: folder\n    folder: {path: b}\n", folders)
	d2, opts, err := rt.Destination("drop")
	if err != nil || d2 == d1 || opts.Sidecar {
		t.Fatalf("Destination(drop) after the change = %v, %+v, %v; want a new folder without a sidecar", d2, opts, err)
	}
	if err := d2.Write(context.Background(), connector.Put{Name: "x", Body: bytes.NewReader([]byte("1")), Size: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(folders, "b", "x")); err != nil {
		t.Errorf("the rebuilt destination did not write to its new folder: %v", err)
	}

	src.put(t, 3, "destinations:\n  - name: other\n    type: folder\n    folder: {path: b}\n", folders)
	if _, _, err := rt.Destination("drop"); !errors.Is(err, connectors.ErrUnknown) {
		t.Errorf("Destination(drop) removed = %v, want ErrUnknown", err)
	}

	c, err := config.ParseConnectors([]byte("destinations:\n  - name: app\n    type: http\n    http: {url: \"https://app.example/edi\", secret: app-hook}\n"),
		config.ConnectorsOptions{Name: "c.yaml", Away: true})
	if err != nil {
		t.Fatal(err)
	}
	src.cur.Store(&connectors.Snapshot{Revision: 4, Connectors: c})
	if _, _, err := rt.Destination("app"); !errors.Is(err, connector.ErrRefused) || !bytes.Contains([]byte(err.Error()), []byte("EDIHUB_SECRETS_DIR")) {
		t.Errorf("Destination(app) without a secrets directory = %v, want ErrRefused naming EDIHUB_SECRETS_DIR", err)
	}
}
