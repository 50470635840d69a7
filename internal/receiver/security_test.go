package receiver_test

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"strings"
	"testing"

	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/testenv"
)

// TestReceiveSecurityDefaults: a partner with the default profile (it
// encrypts, so it must send signed and encrypted messages) gets
// insufficient-message-security for anything less; the refusal is stored
// and counted, and a signed, encrypted message is processed.
func TestReceiveSecurityDefaults(t *testing.T) {
	e := newEnv(t, envOptions{})
	tests := []struct {
		name string
		give build
		want mdn.Disposition
	}{
		{"unsigned, unencrypted", build{}, mdn.Errored("insufficient-message-security")},
		{"unsigned, compressed", build{comp: "before"}, mdn.Errored("insufficient-message-security")},
		// Encrypted content no signature vouches for: the one answer of
		// every failure under encryption (no decryption oracle).
		{"encrypted, unsigned", build{enc: "aes256"}, mdn.Errored("decryption-failed")},
		{"signed, unencrypted", build{sign: "sha256"}, mdn.Errored("insufficient-message-security")},
		{"signed and encrypted", build{sign: "sha256", enc: "aes256"}, mdn.Processed()},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := buildOpenSSL(t, tt.give)
			id := fmt.Sprintf("<default-%d@partner.example>", i)
			result := "processed"
			if tt.want != mdn.Processed() {
				result = tt.want.Description()
			}
			before := e.received(partnerDefault, result)
			r := post(t, e.url, request(as2Header(partnerDefault, station, id, "sha-256"), m), m.body, false)
			got := parseMDN(t, r)
			if got.Disposition != tt.want {
				t.Errorf("disposition = %q, want %q", got.Disposition, tt.want)
			}
			row, ok := e.row(t, partnerDefault, id)
			if !ok || row.Disposition != tt.want.String() {
				t.Errorf("stored row = %+v (found %v), want disposition %q", row, ok, tt.want)
			}
			if tt.want != mdn.Processed() && (row.Status != "error" || row.Payloads != 0) {
				t.Errorf("refused message stored as %+v, want status error without payload", row)
			}
			if n := e.received(partnerDefault, result) - before; n != 1 {
				t.Errorf("received_total{result=%q} grew by %v, want 1", result, n)
			}
		})
	}
}

// TestReceiveNoDecryptionOracle flips one ciphertext byte of a signed,
// encrypted (AES-CBC) message at many positions, the padding block
// included: every failure is the same decryption-failed, so an attacker
// learns nothing about the padding or the plaintext. (An alteration
// outside what the signature covers is processed: the signature verified.)
func TestReceiveNoDecryptionOracle(t *testing.T) {
	e := newEnv(t, envOptions{})
	for _, enc := range []string{"aes128", "aes256", "des3"} {
		m := buildOpenSSL(t, build{sign: "sha256", enc: enc})
		answers, processed := map[string]int{}, 0
		n := len(m.body)
		// The last 64 bytes hold the padding block and the one before it;
		// the rest are spread over the content and the envelope.
		var positions []int
		for i := n - 64; i < n; i += 3 {
			positions = append(positions, i)
		}
		for i := n / 3; i < n-64; i += (n - 64 - n/3) / 24 {
			positions = append(positions, i)
		}
		for _, partner := range []string{partnerACME, partnerDefault} {
			for _, pos := range positions {
				for _, x := range []byte{0x01, 0x80} {
					b := bytes.Clone(m.body)
					b[pos] ^= x
					id := fmt.Sprintf("<oracle-%s-%s-%d-%x@partner.example>", enc, strings.ReplaceAll(partner, " ", "_"), pos, x)
					r := post(t, e.url, request(as2Header(partner, station, id, "sha-256"), m), b, false)
					got := parseMDN(t, r)
					if got.Disposition == mdn.Processed() {
						// The altered block lay outside what the
						// signature covers (the signature part's
						// certificates) and the signature verified.
						processed++
						continue
					}
					answers[got.Disposition.String()+" "+strings.ReplaceAll(got.Text, id, "<id>")]++
				}
			}
		}
		if len(answers) != 1 {
			t.Errorf("%s: %d different failures for altered ciphertext, want 1: %v", enc, len(answers), answers)
		}
		for a, k := range answers {
			if !strings.Contains(a, "processed/Error: decryption-failed") || k < processed {
				t.Errorf("%s: answer %q (%d times, %d processed), want decryption-failed for most", enc, a, k, processed)
			}
		}
		t.Logf("%s: %d altered messages, %d processed, failures %v", enc, 4*len(positions), processed, answers)
	}
}

// TestReceiveStationKeyRollover: with two station key pairs, a message
// encrypted to the previous certificate and one encrypted to the new
// (active) one are both processed, and the MDNs are signed with the
// active key only.
func TestReceiveStationKeyRollover(t *testing.T) {
	keys(t)
	e := newEnv(t, envOptions{stationKeys: `keys: [{private_key: as2-c.key, certificate: as2-c.crt, active: true}, {private_key: as2-b.key, certificate: as2-b.crt}]`})
	for i, to := range []*identity{idB, idC} {
		m := buildOpenSSL(t, build{sign: "sha256", enc: "aes256", recipient: to})
		r := post(t, e.url, request(as2Header(partnerDefault, station, fmt.Sprintf("<rollover-%d@x>", i), "sha-256"), m), m.body, false)
		got, err := mdn.Parse(r.header, r.body, mdn.ParseOptions{PartnerCerts: []*x509.Certificate{idC.Cert}, RequireSigned: true})
		if err != nil {
			t.Fatalf("encrypted to %s: MDN not signed by the active key: %v", to.Cert.Subject.CommonName, err)
		}
		if got.Disposition != mdn.Processed() {
			t.Errorf("encrypted to %s: %q, want processed", to.Cert.Subject.CommonName, got.Disposition)
		}
		if _, err := mdn.Parse(r.header, r.body, mdn.ParseOptions{PartnerCerts: []*x509.Certificate{idB.Cert}, RequireSigned: true}); err == nil {
			t.Errorf("MDN verifies against the previous certificate: signed with the old key")
		}
	}
}

// TestReceiveReplay: the same signed content under a new Message-ID
// within the replay window is flagged (metric), also when the replay asks
// for its MIC in another algorithm; a partner with refuse_replays gets
// authentication-failed for it.
func TestReceiveReplay(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := buildOpenSSL(t, build{sign: "sha256"})
	other := buildOpenSSL(t, build{sign: "sha256", payload: "UNB+OTHER'\n"})
	tests := []struct {
		partner, id, micalg string
		give                opensslMessage
		want                mdn.Disposition
		flagged, refused    float64
	}{
		{partnerACME, "<orig@x>", "sha-256", m, mdn.Processed(), 0, 0},
		{partnerACME, "<other@x>", "sha-256", other, mdn.Processed(), 0, 0},
		{partnerACME, "<replay-1@x>", "sha-256", m, mdn.Processed(), 1, 0},
		{partnerACME, "<replay-2@x>", "sha-512", m, mdn.Processed(), 2, 0},
		{partnerNoReplay, "<orig@x>", "sha-1", m, mdn.Processed(), 0, 0},
		{partnerNoReplay, "<replay-1@x>", "sha-384", m, mdn.Errored("authentication-failed"), 0, 1},
	}
	for _, tt := range tests {
		got := parseMDN(t, post(t, e.url, request(as2Header(tt.partner, station, tt.id, tt.micalg), tt.give), tt.give.body, false))
		if got.Disposition != tt.want {
			t.Errorf("%s %s: %q, want %q", tt.partner, tt.id, got.Disposition, tt.want)
		}
		flagged := metricValue(e.reg, "edihub_as2_replays_total", map[string]string{"partner": tt.partner, "action": "flagged"})
		refused := metricValue(e.reg, "edihub_as2_replays_total", map[string]string{"partner": tt.partner, "action": "refused"})
		if flagged != tt.flagged || refused != tt.refused {
			t.Errorf("%s %s: replays flagged %v refused %v, want %v %v", tt.partner, tt.id, flagged, refused, tt.flagged, tt.refused)
		}
	}
}

// TestReceiveReplayConcurrent: the same signed content posted at once
// under several Message-IDs to a partner with refuse_replays is processed
// once; every other delivery is refused as a replay, however the requests
// interleave.
func TestReceiveReplayConcurrent(t *testing.T) {
	e := newEnv(t, envOptions{})
	m := buildOpenSSL(t, build{sign: "sha256", payload: "UNB+CONCURRENT'\n"})
	const n = 8
	replies := make([]reply, n)
	errs := make([]error, n)
	testenv.Together(n, func(i int) {
		replies[i], errs[i] = tryPost(e.url, request(as2Header(partnerNoReplay, station, fmt.Sprintf("<concurrent-%d@x>", i), "sha-256"), m), m.body, false)
	})
	var processed, refused int
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		switch d := parseMDN(t, replies[i]).Disposition; d {
		case mdn.Processed():
			processed++
		case mdn.Errored("authentication-failed"):
			refused++
		default:
			t.Errorf("<concurrent-%d@x>: %q", i, d)
		}
	}
	if processed != 1 || refused != n-1 {
		t.Errorf("%d deliveries processed and %d refused, want 1 and %d", processed, refused, n-1)
	}
	if got := e.count(t, `SELECT count(*) FROM messages WHERE partner = $1 AND status = 'processed'`, partnerNoReplay); got != 1 {
		t.Errorf("%d messages stored as processed, want 1", got)
	}
	if got := metricValue(e.reg, "edihub_as2_replays_total", map[string]string{"partner": partnerNoReplay, "action": "refused"}); got != n-1 {
		t.Errorf("replays refused = %v, want %d", got, n-1)
	}
}
