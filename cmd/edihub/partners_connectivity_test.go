package main

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/probe"
	"github.com/edihub/edihub/internal/testenv/devpki"
)

// probeStep is one step of a connectivity test report as the API's JSON
// carries it; pointers tell a key that is missing from one that is false.
type probeStep struct {
	Name   string `json:"name"`
	OK     *bool  `json:"ok"`
	Detail string `json:"detail"`
	Fix    string `json:"fix"`
}

// probeAnswer is the API's answer to POST /partners/{as2id}/test.
type probeAnswer struct {
	Partner   string      `json:"partner"`
	MessageID string      `json:"message_id"`
	OK        *bool       `json:"ok"`
	Steps     []probeStep `json:"steps"`
}

// stepLine is a step line of `edihub partners test`'s text report.
var stepLine = regexp.MustCompile(`(?m)^(ok|FAIL) +(\S+) .*$`)

// textSteps are the steps of a text report in order, whether each
// passed, and each one's line.
func textSteps(out string) (names []string, passed map[string]bool, lines map[string]string) {
	passed, lines = map[string]bool{}, map[string]string{}
	for _, m := range stepLine.FindAllStringSubmatch(out, -1) {
		names = append(names, m[2])
		passed[m[2]] = m[1] == "ok"
		lines[m[2]] = m[0]
	}
	return names, passed, lines
}

// waitServed waits until s serves the stored partner set's revision.
func waitServed(t *testing.T, s *hubStation) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var l struct {
			Revision       int64 `json:"revision"`
			ServedRevision int64 `json:"served_revision"`
		}
		s.api(t, http.MethodGet, "/api/v1/partners", "", nil, &l)
		if l.Revision > 0 && l.ServedRevision == l.Revision {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s serves partner revision %d, not the stored %d, after 15s", s.name, l.ServedRevision, l.Revision)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestPartnersTestAgainstStation runs the connectivity test, with
// `edihub partners test NAME` and with POST /api/v1/partners/{as2id}/test,
// from a serving station against real edihub stations acting as the
// partner:
//   - a partner that knows us: every step passes, the MIC included, the
//     command exits 0 and the partner station stored each test message
//     (edihub-connectivity-test.txt) under the report's Message-ID, while
//     our station stored nothing;
//   - a partner (created through the API, served live) that holds another
//     certificate for us: it cannot verify our signature, so the
//     disposition step fails, with decryption-failed for an encrypted
//     message (a receiving edihub gives no other answer under encryption)
//     and authentication-failed for a signed one (the profile changed
//     through the API), each with a fix that says to send our
//     certificate, naming its serial; the command exits non-zero;
//   - the partner station stopped: the connect step fails with a fix that
//     names the port and the url; the command exits non-zero.
func TestPartnersTestAgainstStation(t *testing.T) {
	a, b, c := newHubStation(t, "HUB ALPHA"), newHubStation(t, "HUB-BRAVO"), newHubStation(t, "HUB-CHARLIE")
	a.start(t, b, "sign: sha-256", "encrypt: aes256-cbc", "compress: true", "mdn: sync", "mdn_signed: true")
	// BRAVO refuses signed content it received before: the CLI's and the
	// API's test messages, sent within a second, must differ.
	b.start(t, a, "mdn: sync", "refuse_replays: true")
	// CHARLIE holds another certificate under our AS2 ID.
	impostor, err := devpki.New(a.name, devpki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	wrong := &hubStation{name: a.name, as2Addr: a.as2Addr, certPath: filepath.Join(c.dir, "not-alpha.crt")}
	if err := os.WriteFile(wrong.certPath, impostor.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	c.start(t, wrong, "mdn: sync")

	// CHARLIE becomes our partner through the API; the replica serves it
	// within seconds.
	charliePEM, err := os.ReadFile(c.certPath)
	if err != nil {
		t.Fatal(err)
	}
	charlie := map[string]any{"as2_id": c.name, "url": c.as2URL(), "certificate": string(charliePEM),
		"sign": "sha-256", "encrypt": "aes256-cbc", "mdn": "sync", "mdn_signed": true}
	entry, _ := json.Marshal(charlie)
	if code := a.api(t, http.MethodPost, "/api/v1/partners", "application/json", entry, nil); code != http.StatusCreated {
		t.Fatalf("POST /api/v1/partners %s = %d, want 201", c.name, code)
	}
	waitServed(t, a)
	alphaPEM, err := os.ReadFile(a.certPath)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(alphaPEM)
	alphaCert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	alphaSerial := alphaCert.SerialNumber.Text(16)
	signOnly := func() {
		delete(charlie, "encrypt")
		body, _ := json.Marshal(charlie)
		req, err := http.NewRequest(http.MethodPut, "http://"+a.as2Addr+"/api/v1/partners/"+c.name, bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+a.token)
		req.Header.Set("If-Match", `"1"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("PUT /api/v1/partners/%s without encrypt = %d, want 200", c.name, resp.StatusCode)
		}
		waitServed(t, a)
	}

	getenv := env("EDIHUB_DATABASE_URL", a.dbURL, "EDIHUB_CONFIG", filepath.Join(a.dir, "edihub.yaml"))
	tests := []struct {
		name    string
		partner *hubStation
		before  func()
		// wantFail is the step that fails, "" for none.
		wantFail string
		// wantDetail and wantFix are texts the failed step's detail and
		// fix hold.
		wantDetail string
		wantFix    []string
	}{
		{name: "success", partner: b},
		// Under encryption a receiving edihub answers every failure before
		// a verified signature with decryption-failed (no decryption
		// oracle): the fix names our certificate among the causes.
		{name: "partner holds another certificate for us, encrypted", partner: c, wantFail: probe.StepDisposition,
			wantDetail: "decryption-failed", wantFix: []string{"the partner cannot decrypt", "our current station certificate (serial " + alphaSerial + "): send it to them"}},
		{name: "partner holds another certificate for us, signed only", partner: c, before: signOnly, wantFail: probe.StepDisposition,
			wantDetail: "authentication-failed", wantFix: []string{"cannot verify our signature", "send them our current station certificate (serial " + alphaSerial + ")", `our AS2 ID "HUB ALPHA"`}},
		{name: "partner station down", partner: b, before: b.stop, wantFail: probe.StepConnect,
			wantDetail: "connection to " + b.as2Addr + " refused", wantFix: []string{"nothing listens on port " + b.as2Addr[strings.LastIndex(b.as2Addr, ":")+1:], b.as2URL()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before()
			}
			checkSteps := func(t *testing.T, via string, names []string, ok func(string) bool, detail, fix func(string) string) {
				t.Helper()
				if len(names) == 0 || names[0] != probe.StepMessage {
					t.Fatalf("%s: steps %v, want the message step first", via, names)
				}
				for i, n := range names {
					last := i == len(names)-1
					switch {
					case tt.wantFail == "" && !ok(n):
						t.Errorf("%s: step %s failed (fix %q), want every step ok", via, n, fix(n))
					case tt.wantFail != "" && !last && !ok(n):
						t.Errorf("%s: step %s failed before %s", via, n, tt.wantFail)
					case tt.wantFail != "" && last && (n != tt.wantFail || ok(n)):
						t.Errorf("%s: last step %s (ok %v), want %s failed", via, n, ok(n), tt.wantFail)
					}
				}
				if tt.wantFail == "" {
					if want := probe.StepMIC; names[len(names)-1] != want || !ok(want) {
						t.Errorf("%s: steps %v, want them to end with %s ok", via, names, want)
					}
					return
				}
				if !strings.Contains(detail(tt.wantFail), tt.wantDetail) {
					t.Errorf("%s: detail of %s = %q, want it to mention %q", via, tt.wantFail, detail(tt.wantFail), tt.wantDetail)
				}
				for _, want := range tt.wantFix {
					if !strings.Contains(fix(tt.wantFail), want) {
						t.Errorf("%s: fix of %s = %q, want it to mention %q", via, tt.wantFail, fix(tt.wantFail), want)
					}
				}
			}

			out, errOut, err := runCmd(t, getenv, "partners", "test", tt.partner.name)
			if (err == nil) != (tt.wantFail == "") {
				t.Errorf("edihub partners test %s = %v (stderr %q), want success %v\n%s", tt.partner.name, err, errOut, tt.wantFail == "", out)
			}
			names, passed, lines := textSteps(out)
			fixes := map[string]string{}
			if tt.wantFail != "" {
				_, after, _ := strings.Cut(out, lines[tt.wantFail])
				if fix, ok := strings.CutPrefix(after, "\n      fix: "); ok {
					fixes[tt.wantFail], _, _ = strings.Cut(fix, "\n")
				}
			}
			checkSteps(t, "edihub partners test", names, func(n string) bool { return passed[n] },
				func(n string) string { return lines[n] }, func(n string) string { return fixes[n] })
			wantVerdict := "OK: the partner received the test message"
			if tt.wantFail != "" {
				wantVerdict = "FAIL: " + tt.wantFail
			}
			if !strings.Contains(out, wantVerdict) {
				t.Errorf("edihub partners test printed\n%s\nwant the verdict %q", out, wantVerdict)
			}

			var raw []byte
			path := "/api/v1/partners/" + url.PathEscape(tt.partner.name) + "/test"
			if code := a.api(t, http.MethodPost, path, "", nil, &raw); code != http.StatusOK {
				t.Fatalf("POST %s = %d %s, want 200", path, code, raw)
			}
			var ans probeAnswer
			if err := json.Unmarshal(raw, &ans); err != nil || ans.OK == nil || ans.Steps == nil {
				t.Fatalf("POST %s answered %s (%v), want a report with ok and steps", path, raw, err)
			}
			if *ans.OK != (tt.wantFail == "") || ans.Partner != tt.partner.name {
				t.Errorf("POST %s: ok %v, partner %q; want ok %v for %q", path, *ans.OK, ans.Partner, tt.wantFail == "", tt.partner.name)
			}
			apiSteps := map[string]probeStep{}
			var apiNames []string
			for _, s := range ans.Steps {
				if s.OK == nil || s.Detail == "" {
					t.Errorf("POST %s: step %+v without ok or detail", path, s)
					continue
				}
				apiSteps[s.Name] = s
				apiNames = append(apiNames, s.Name)
			}
			checkSteps(t, "POST "+path, apiNames, func(n string) bool { s, ok := apiSteps[n]; return ok && *s.OK },
				func(n string) string { return apiSteps[n].Detail }, func(n string) string { return apiSteps[n].Fix })
			if tt.wantFail == "" {
				if s := apiSteps[probe.StepMIC]; !strings.Contains(s.Detail, "matches") {
					t.Errorf("POST %s: mic step %q, want the MIC to match", path, s.Detail)
				}
			}
			if bytes.Contains(raw, []byte("BEGIN")) || bytes.Contains(raw, []byte(a.token)) {
				t.Errorf("POST %s: the report holds key material or the token:\n%s", path, raw)
			}

			if tt.wantFail != "" {
				return
			}
			// The partner station stored both test messages, and our
			// station none.
			ids := []string{ans.MessageID}
			if m := regexp.MustCompile(`(?m)^Message-ID (\S+)$`).FindStringSubmatch(out); m != nil {
				ids = append(ids, m[1])
			} else {
				t.Errorf("edihub partners test printed no Message-ID:\n%s", out)
			}
			for _, id := range ids {
				got := b.received(t, id)
				if got.Filename != "edihub-connectivity-test.txt" || got.Partner != a.name || got.ContentType != "text/plain" {
					t.Errorf("%s received %+v, want edihub-connectivity-test.txt (text/plain) from %s", b.name, got, a.name)
				}
				var payload []byte
				// Its Message-ID in the document makes each test's signed
				// content its own: BRAVO refuses replays.
				if code := b.api(t, http.MethodGet, got.Location+"/payload", "", nil, &payload); code != http.StatusOK ||
					!bytes.HasPrefix(payload, []byte("edihub connectivity test\r\n")) || !bytes.Contains(payload, []byte("Message-ID: "+id+"\r\n")) {
					t.Errorf("%s payload of the test message = %d %q, want the test document naming Message-ID %s", b.name, code, payload, id)
				}
			}
			var l struct{ Messages []hubMessage }
			a.api(t, http.MethodGet, "/api/v1/messages", "", nil, &l)
			if len(l.Messages) != 0 {
				t.Errorf("%s stored messages for the connectivity tests: %+v", a.name, l.Messages)
			}
		})
	}

	path := "/api/v1/partners/NOBODY/test"
	var raw []byte
	if code := a.api(t, http.MethodPost, path, "", nil, &raw); code != http.StatusNotFound {
		t.Errorf("POST %s = %d %s, want 404", path, code, raw)
	}
	if _, _, err := runCmd(t, getenv, "partners", "test", "NOBODY"); err == nil || !strings.Contains(err.Error(), `no partner "NOBODY"`) {
		t.Errorf("edihub partners test NOBODY = %v, want an error naming it", err)
	}
	// The test route, like every API route, needs the token.
	resp, err := http.Post("http://"+a.as2Addr+"/api/v1/partners/"+url.PathEscape(b.name)+"/test", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /api/v1/partners/%s/test without the token = %d, want 401", b.name, resp.StatusCode)
	}
}
