package connector

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const orderBody = "ISA*00*          *00*          *ZZ*ACME*ZZ*EDIHUB*260301*2330*U*00401*000000042*0*P*>~"

// wantSidecar is order's sidecar, byte for byte: the field names are a
// contract with the systems that read it.
const wantSidecar = `{"name":"ACME CORP/2026/03/01/000000042-20260301-0001@edihub.acme.example.edi","id":4711,` +
	`"message_id":"20260301-0001@edihub.acme.example","partner":"ACME CORP","station":"EDIHUB","direction":"inbound",` +
	`"standard":"x12","type":"850","group_type":"PO","icn":"000000042","content_type":"application/edi-x12",` +
	`"file_name":"po-42.x12","mic":"dGVzdA==, sha-256","size":1234,"sha256":"","time":"2026-03-01T22:30:05Z"}` + "\n"

func TestDeliverFolder(t *testing.T) {
	f, dir := newFolder(t, "")
	doc := order
	doc.Size = int64(len(orderBody))
	want := strings.Replace(wantSidecar, `"size":1234`, `"size":86`, 1)
	name := "ACME CORP/2026/03/01/000000042-20260301-0001@edihub.acme.example.edi"
	for attempt := range 2 { // the second is a retry after a lost answer
		got, err := Deliver(t.Context(), f, doc, DeliverOptions{Sidecar: true, DoneMarker: true}, strings.NewReader(orderBody))
		if err != nil || got != name {
			t.Fatalf("Deliver attempt %d = %q, %v, want %q", attempt, got, err, name)
		}
		if got := files(t, dir); !cmp.Equal(got, []string{name, name + ".done", name + ".json"}) {
			t.Errorf("files after attempt %d = %v, want the document, its marker and its sidecar", attempt, got)
		}
		for file, want := range map[string]string{name: orderBody, name + ".json": want, name + ".done": ""} {
			b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(file)))
			if err != nil || string(b) != want {
				t.Errorf("attempt %d: %s = %q, %v, want %q", attempt, file, b, err, want)
			}
		}
	}
}

func TestDeliverPlain(t *testing.T) {
	f, dir := newFolder(t, "")
	tmpl, err := ParseTemplate("{station}/{id}.{ext}")
	if err != nil {
		t.Fatal(err)
	}
	doc := order
	doc.Size = int64(len(orderBody))
	name, err := Deliver(t.Context(), f, doc, DeliverOptions{Template: tmpl}, strings.NewReader(orderBody))
	if err != nil || name != "EDIHUB/4711.edi" {
		t.Fatalf("Deliver = %q, %v, want EDIHUB/4711.edi", name, err)
	}
	if got := files(t, dir); !cmp.Equal(got, []string{"EDIHUB/4711.edi"}) {
		t.Errorf("files = %v, want only the document", got)
	}
}

// recorder is a Destination that records the names written and fails the
// write of one name.
type recorder struct {
	names []string
	fail  string
}

func (r *recorder) Write(_ context.Context, p Put) error {
	if _, err := io.Copy(io.Discard, p.Body); err != nil {
		return err
	}
	if strings.HasSuffix(p.Name, r.fail) {
		return ErrUnavailable
	}
	r.names = append(r.names, p.Name)
	return nil
}
func (r *recorder) Check(context.Context) error { return nil }
func (r *recorder) Close() error                { return nil }

// TestDeliverOrder: the marker comes last and only after both writes
// before it succeeded; the sidecar only after the document.
func TestDeliverOrder(t *testing.T) {
	tmpl, _ := ParseTemplate("{id}")
	tests := []struct {
		fail string
		want []string
	}{
		{fail: "never", want: []string{"4711", "4711.json", "4711.done"}},
		{fail: "4711", want: nil},
		{fail: ".json", want: []string{"4711"}},
		{fail: ".done", want: []string{"4711", "4711.json"}},
	}
	for _, tt := range tests {
		r := &recorder{fail: tt.fail}
		_, err := Deliver(t.Context(), r, order, DeliverOptions{Template: tmpl, Sidecar: true, DoneMarker: true}, strings.NewReader("x"))
		if (tt.fail != "never") != errors.Is(err, ErrUnavailable) {
			t.Errorf("Deliver failing %q = %v, want ErrUnavailable only when a write fails", tt.fail, err)
		}
		if !cmp.Equal(r.names, tt.want) {
			t.Errorf("Deliver failing %q wrote %v, want %v", tt.fail, r.names, tt.want)
		}
	}
}

func TestDeliverHTTP(t *testing.T) {
	rc := &receiver{}
	srv := httptest.NewServer(rc)
	h := newHTTP(t, srv.URL, HTTPOptions{})
	doc := order
	doc.Size = int64(len(orderBody))
	doc.Partner = "ACME 100%"
	doc.FileName = "bestellung-ü.x12"
	sum := sha256.Sum256([]byte(orderBody))
	name, err := Deliver(t.Context(), h, doc, DeliverOptions{SHA256: hex.EncodeToString(sum[:])}, strings.NewReader(orderBody))
	srv.Close()
	if err != nil {
		t.Fatalf("Deliver = %v", err)
	}
	got := rc.received()
	if len(got) != 1 || string(got[0].body) != orderBody {
		t.Fatalf("the receiver accepted %d requests, want one with the document", len(got))
	}
	for k, want := range map[string]string{
		HTTPNameHeader:        name,
		"X-Edihub-Id":         "4711",
		"X-Edihub-Message-Id": "20260301-0001@edihub.acme.example",
		"X-Edihub-Partner":    "ACME 100%25",
		"X-Edihub-File-Name":  "bestellung-%C3%BC.x12",
		"X-Edihub-Type":       "850",
		"X-Edihub-Group-Type": "PO",
		"X-Edihub-Icn":        "000000042",
		"X-Edihub-Mic":        "dGVzdA==, sha-256",
		"Content-Type":        "application/edi-x12",
		"Content-Length":      "86",
	} {
		if v := got[0].header.Get(k); v != want && !(k == "Content-Length" && got[0].length == 86) {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
}

func TestMetaValue(t *testing.T) {
	tests := []struct{ give, want string }{
		{give: "ACME CORP", want: "ACME CORP"},
		{give: "100%", want: "100%25"},
		{give: "ü\r\n", want: "%C3%BC%0D%0A"},
		{give: "\x7f", want: "%7F"},
	}
	for _, tt := range tests {
		if got := MetaValue(tt.give); got != tt.want {
			t.Errorf("MetaValue(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}
