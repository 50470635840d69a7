package outbox_test

import (
	"bytes"
	"fmt"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

var (
	moreOnce sync.Once
	moreIDs  map[string]*identity
)

// moreKeys returns the identities "station-b" (a second station) and
// "partner-next" (the partner's next certificate), made once per test
// binary beside those of keys.
func moreKeys(t testing.TB) map[string]*identity {
	t.Helper()
	keys(t)
	moreOnce.Do(func() {
		moreIDs = map[string]*identity{}
		for i, name := range []string{"station-b", "partner-next"} {
			moreIDs[name] = newIdentity(idDir, name, int64(21+i))
		}
	})
	return moreIDs
}

// loadYAML writes text as edihub.yaml and loads it.
func loadYAML(t testing.TB, text string) *config.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "edihub.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := config.Load(path, config.Options{})
	if err != nil {
		t.Fatalf("config.Load: %v\n%s", err, text)
	}
	return f
}

// openssl runs openssl and returns its error with stderr.
func openssl(args ...string) error {
	out, err := exec.Command("openssl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("openssl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// openAs takes an encrypted and signed request apart with openssl as the
// partner holding recipient's key would, trusting only signer's
// certificate: it returns the payload, or the step that failed.
func openAs(t testing.TB, r request, recipient, signer *identity) ([]byte, error) {
	t.Helper()
	dir := t.TempDir()
	mt, params, err := mime.ParseMediaType(r.header.Get("Content-Type"))
	if err != nil || mt != "application/pkcs7-mime" || params["smime-type"] != "enveloped-data" {
		return nil, fmt.Errorf("Content-Type %q, want application/pkcs7-mime; smime-type=enveloped-data", r.header.Get("Content-Type"))
	}
	in, plain := filepath.Join(dir, "enc.der"), filepath.Join(dir, "plain.mime")
	if err := os.WriteFile(in, r.body, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := openssl("cms", "-decrypt", "-inform", "DER", "-in", in, "-recip", recipient.certPath, "-inkey", recipient.keyPath, "-binary", "-out", plain); err != nil {
		return nil, fmt.Errorf("decrypt with %s: %w", recipient.name, err)
	}
	b, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	e := splitEntity(t, b)
	mt, params, err = mime.ParseMediaType(e.header["content-type"])
	if err != nil || mt != "multipart/signed" {
		return nil, fmt.Errorf("decrypted Content-Type %q, want multipart/signed", e.header["content-type"])
	}
	part1, sig := splitSigned(t, e.body, params["boundary"])
	if err := verifyDetached(t, dir, part1, sig, signer.certPath); err != nil {
		return nil, fmt.Errorf("verify with %s: %w", signer.name, err)
	}
	return splitEntity(t, part1).decoded(t), nil
}

// verifyDetached writes the signed entity part1 and its detached
// signature sig (DER) into dir and has openssl verify them, trusting
// only the certificate at caPath.
func verifyDetached(t testing.TB, dir string, part1, sig []byte, caPath string) error {
	t.Helper()
	p1, sd := filepath.Join(dir, "part1.bin"), filepath.Join(dir, "sig.der")
	if err := os.WriteFile(p1, part1, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sd, sig, 0o600); err != nil {
		t.Fatal(err)
	}
	return openssl("cms", "-verify", "-inform", "DER", "-in", sd, "-content", p1, "-binary", "-CAfile", caPath, "-purpose", "any", "-out", os.DevNull)
}

// TestDispatchStations: each partner gets messages from its station:
// AS2-From, the key that signs and the Message-ID's right side are those
// of the station the partner trades with.
func TestDispatchStations(t *testing.T) {
	k, more := keys(t), moreKeys(t)
	st := pgtest.Store(t)
	var mu sync.Mutex
	got := map[string]request{} // by AS2-To
	partner := newPartner(t, func(_ int, r request) (int, http.Header, []byte) {
		mu.Lock()
		got[r.header.Get("AS2-To")] = r
		mu.Unlock()
		return 200, nil, nil
	})
	cfg := loadYAML(t, fmt.Sprintf(`stations:
  - {as2_id: "EDIHUB A", private_key: %q, certificate: %q}
  - {as2_id: "EDIHUB B", private_key: %q, certificate: %q}
partners:
  - {as2_id: "GLOBEX", url: %q, certificate: %q, sign: sha-256, encrypt: aes256-cbc, mdn: none}
  - {as2_id: "ACME CORP", station: "EDIHUB B", url: %q, certificate: %q, sign: sha-256, encrypt: aes256-cbc, mdn: none}
`, k["station"].keyPath, k["station"].certPath, more["station-b"].keyPath, more["station-b"].certPath,
		partner.URL+"/as2", k["partner"].certPath, partner.URL+"/as2", k["partner"].certPath))
	tests := []struct {
		partner, to  string
		wantFrom     string
		wantMsgIDEnd string
		signer       *identity
		notSigner    *identity
	}{
		{partner: "ACME CORP", to: `"ACME CORP"`, wantFrom: `"EDIHUB B"`, wantMsgIDEnd: "@EDIHUB-B>", signer: more["station-b"], notSigner: k["station"]},
		{partner: "GLOBEX", to: "GLOBEX", wantFrom: `"EDIHUB A"`, wantMsgIDEnd: "@EDIHUB-A>", signer: k["station"], notSigner: more["station-b"]},
	}
	queued := map[string]int64{}
	for _, tt := range tests {
		q := enqueue(t, st, cfg, tt.partner, []byte("document for "+tt.partner), "application/EDI-X12", "")
		queued[tt.partner] = q.ID
		if !strings.HasSuffix(q.MessageID, tt.wantMsgIDEnd) {
			t.Errorf("Enqueue(%s) Message-ID = %q, want it to end in %q", tt.partner, q.MessageID, tt.wantMsgIDEnd)
		}
	}
	startDispatcher(t, dispatcherOpts(t, st, cfg, "d1"))
	for _, tt := range tests {
		t.Run(tt.partner, func(t *testing.T) {
			if m := waitStatus(t, st, queued[tt.partner], "sent", "failed"); m.Status != "sent" {
				t.Fatalf("status %q (%s), want sent", m.Status, m.Error)
			}
			mu.Lock()
			r, ok := got[tt.to]
			mu.Unlock()
			if !ok {
				t.Fatalf("partner got no request with AS2-To %s", tt.to)
			}
			if from := r.header.Get("AS2-From"); from != tt.wantFrom {
				t.Errorf("AS2-From = %s, want %s", from, tt.wantFrom)
			}
			if id := r.header.Get("Message-ID"); !strings.HasSuffix(id, tt.wantMsgIDEnd) {
				t.Errorf("Message-ID = %q, want it to end in %q", id, tt.wantMsgIDEnd)
			}
			payload, err := openAs(t, r, k["partner"], tt.signer)
			if err != nil {
				t.Fatalf("openssl as the partner, trusting %s: %v", tt.signer.name, err)
			}
			if want := "document for " + tt.partner; string(payload) != want {
				t.Errorf("payload = %q, want %q", payload, want)
			}
			if _, err := openAs(t, r, k["partner"], tt.notSigner); err == nil {
				t.Errorf("the signature verifies with %s's certificate too, want %s's only", tt.notSigner.name, tt.signer.name)
			}
		})
	}
	// The stored message says who sent it.
	for _, tt := range tests {
		m, err := st.Message(t.Context(), queued[tt.partner])
		if err != nil {
			t.Fatal(err)
		}
		if `"`+m.AS2From+`"` != tt.wantFrom {
			t.Errorf("Message(%s).AS2From = %q, want %s", tt.partner, m.AS2From, tt.wantFrom)
		}
	}
}

// TestDispatchCertificateNotBeforeUse: a partner certificate scheduled
// with not_before_use is encrypted to from that time on (the dispatcher's
// clock), and not before; only the matching key decrypts each message.
func TestDispatchCertificateNotBeforeUse(t *testing.T) {
	k, more := keys(t), moreKeys(t)
	st := pgtest.Store(t)
	reqs := make(chan request, 4)
	partner := newPartner(t, func(_ int, r request) (int, http.Header, []byte) {
		reqs <- r
		return 200, nil, nil
	})
	switchAt := time.Now().Add(24 * time.Hour).Truncate(time.Second)
	cfg := loadYAML(t, fmt.Sprintf(`station: {as2_id: EDIHUB, private_key: %q, certificate: %q}
partners:
  - as2_id: "ACME CORP"
    url: %q
    certificates:
      - {certificate: %q}
      - {certificate: %q, not_before_use: %q}
    sign: sha-256
    encrypt: aes256-cbc
    mdn: none
`, k["station"].keyPath, k["station"].certPath, partner.URL+"/as2", k["partner"].certPath, more["partner-next"].certPath, switchAt.Format(time.RFC3339)))
	var now atomic.Pointer[time.Time]
	o := dispatcherOpts(t, st, cfg, "d1")
	o.Now = func() time.Time { return *now.Load() }
	tests := []struct {
		name          string
		at            time.Time
		want, notWant *identity
	}{
		{name: "an hour before", at: switchAt.Add(-time.Hour), want: k["partner"], notWant: more["partner-next"]},
		{name: "a second before", at: switchAt.Add(-time.Second), want: k["partner"], notWant: more["partner-next"]},
		{name: "at not_before_use", at: switchAt, want: more["partner-next"], notWant: k["partner"]},
		{name: "a day after", at: switchAt.Add(24 * time.Hour), want: more["partner-next"], notWant: k["partner"]},
	}
	at := tests[0].at
	now.Store(&at)
	startDispatcher(t, o)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			at := tt.at
			now.Store(&at)
			q := enqueue(t, st, cfg, "ACME CORP", []byte("document at "+tt.name), "application/EDI-X12", "")
			if m := waitStatus(t, st, q.ID, "sent", "failed"); m.Status != "sent" {
				t.Fatalf("status %q (%s), want sent", m.Status, m.Error)
			}
			var r request
			select {
			case r = <-reqs:
			case <-time.After(10 * time.Second):
				t.Fatal("the partner got no request")
			}
			payload, err := openAs(t, r, tt.want, k["station"])
			if err != nil {
				t.Fatalf("openssl with %s's key: %v", tt.want.name, err)
			}
			if !bytes.Equal(payload, []byte("document at "+tt.name)) {
				t.Errorf("payload = %q", payload)
			}
			if _, err := openAs(t, r, tt.notWant, k["station"]); err == nil || !strings.Contains(err.Error(), "decrypt with") {
				t.Errorf("openssl with %s's key = %v, want the decryption to fail", tt.notWant.name, err)
			}
		})
	}
}
