package receiver_test

import (
	"fmt"
	"testing"

	"github.com/edihub/edihub/internal/mdn"
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
		{"encrypted, unsigned", build{enc: "aes256"}, mdn.Errored("insufficient-message-security")},
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
