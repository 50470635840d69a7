package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// authRecorder is a partner that answers every request 200 and records the
// Authorization header fields it was sent.
type authRecorder struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []string
}

func newAuthRecorder(t *testing.T) *authRecorder {
	t.Helper()
	r := &authRecorder{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.seen = append(r.seen, req.Header.Get("Authorization"))
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *authRecorder) headers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// TestPartnerSecretsOverTheAPI: a profile sent to the REST API names its
// HTTP password by name in the replica's secrets directory
// (EDIHUB_SECRETS_DIR). A path (/etc/passwd, an absolute path of a
// one-line file, one through ..) or a name that is a symbolic link out of
// the directory is refused with 422 and a message of the same shape that
// names only the reference; the partner is never sent that file. A name in
// the directory is the password the partner receives.
func TestPartnerSecretsOverTheAPI(t *testing.T) {
	partner := newAuthRecorder(t)
	a := newHubStation(t, "HUB SECRETS")
	peer := newHubStation(t, "PARTNER")
	peer.as2Addr = strings.TrimPrefix(partner.srv.URL, "http://")

	secrets := t.TempDir()
	outside := filepath.Join(a.dir, "outside.pw") // beside the station file
	for path, data := range map[string]string{
		filepath.Join(secrets, "partner-password"): "s3cret-pw\n",
		outside: "outside-secret\n",
	} {
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(secrets, "escape")); err != nil {
		t.Fatal(err)
	}
	a.extraEnv = []string{"EDIHUB_SECRETS_DIR", secrets}
	a.start(t, peer, "mdn: none")
	waitServed(t, a)

	var stored struct {
		Spec    map[string]any `json:"spec"`
		Version int64          `json:"version"`
	}
	path := "/api/v1/partners/" + url.PathEscape(peer.name)
	if c := a.api(t, "GET", path, "", nil, &stored); c != http.StatusOK {
		t.Fatalf("GET %s = %d", path, c)
	}
	profile := func(passwordFile string) []byte {
		spec := map[string]any{}
		for k, v := range stored.Spec {
			spec[k] = v
		}
		spec["auth"] = map[string]any{"user": "edi", "password_file": passwordFile}
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	put := func(passwordFile string, out any) int {
		t.Helper()
		req, err := http.NewRequest("PUT", "http://"+a.as2Addr+path, bytes.NewReader(profile(passwordFile)))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+a.token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("If-Match", `"`+strconv.FormatInt(stored.Version, 10)+`"`)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode
	}

	type refusal struct {
		Error string `json:"error"`
		Field string `json:"field"`
		Fix   string `json:"fix"`
	}
	tests := []struct {
		give, want string
	}{
		{"/etc/passwd", "not a name in the secrets directory"},
		{outside, "not a name in the secrets directory"},
		{"../" + filepath.Base(a.dir) + "/outside.pw", "not a name in the secrets directory"},
		{"escape", "not found in the secrets directory"},
		{"missing", "not found in the secrets directory"},
	}
	fixes := map[string]string{}
	for _, tt := range tests {
		for _, method := range []string{"PUT", "POST"} {
			var got refusal
			var c int
			if method == "PUT" {
				c = put(tt.give, &got)
			} else {
				var raw []byte
				body := bytes.Replace(profile(tt.give), []byte(`"as2_id":"PARTNER"`), []byte(`"as2_id":"PARTNER TWO"`), 1)
				c = a.api(t, "POST", "/api/v1/partners", "application/json", body, &raw)
				if err := json.Unmarshal(raw, &got); err != nil {
					t.Fatalf("POST /api/v1/partners: %v: %s", err, raw)
				}
			}
			if want := `secret reference "` + tt.give + `": ` + tt.want; c != http.StatusUnprocessableEntity || got.Error != want || got.Field != "auth.password_file" {
				t.Errorf("%s password_file %q = %d %+v, want 422 auth.password_file %q", method, tt.give, c, got, want)
			}
			fix := strings.ReplaceAll(got.Fix, tt.give, "REF")
			if prev, ok := fixes[tt.want]; ok && prev != fix {
				t.Errorf("%s password_file %q fix = %q, want the same as for the other references: %q", method, tt.give, fix, prev)
			}
			fixes[tt.want] = fix
		}
	}

	// What the partner is sent: no credentials while the refused
	// profiles were refused; then the password of the name.
	if m := a.send(t, peer, []byte("UNA:+.? 'UNB+UNOC:3+A+B'\n"), "application/EDIFACT", "one.edi", "sent", "delivered", "failed"); m.Status == "failed" {
		t.Fatalf("send before the password: %+v", m)
	}
	if seen := partner.headers(); len(seen) != 1 || seen[0] != "" {
		t.Errorf("while every password_file was refused, the partner was sent Authorization %q, want none", seen)
	}
	var ok struct {
		Version int64 `json:"version"`
	}
	if c := put("partner-password", &ok); c != http.StatusOK {
		t.Fatalf("PUT password_file partner-password = %d, want 200", c)
	}
	waitServed(t, a)
	if m := a.send(t, peer, []byte("UNA:+.? 'UNB+UNOC:3+A+B'\n"), "application/EDIFACT", "two.edi", "sent", "delivered", "failed"); m.Status == "failed" {
		t.Fatalf("send with the password: %+v", m)
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte("edi:s3cret-pw"))
	seen := partner.headers()
	if len(seen) != 2 || seen[0] != "" || seen[1] != want {
		t.Errorf("partner was sent Authorization %q, want none, then %q", seen, want)
	}
}
