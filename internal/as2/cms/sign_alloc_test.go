package cms_test

import (
	"crypto"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/as2/cms"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// TestSignDigestAllocations bounds what signing an MDN allocates besides
// the RSA operation (a regression guard, not a timing): the SignedData is
// assembled in one buffer of its exact size from encodings built once
// (it took 79 objects with encoding/asn1 and a copy per nesting level).
func TestSignDigestAllocations(t *testing.T) {
	ids := openssltest.Keys(t)
	md := sha256.Sum256([]byte("content"))
	opts := cms.SignOptions{Hash: crypto.SHA256, SigningTime: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	rsaOnly := testing.AllocsPerRun(20, func() { _, _ = ids.A.Key.Sign(nil, md[:], crypto.SHA256) })
	got := testing.AllocsPerRun(20, func() {
		if _, err := cms.SignDigest(md[:], ids.A.Cert, ids.A.Key, opts); err != nil {
			t.Fatal(err)
		}
	})
	if got-rsaOnly > 10 {
		t.Errorf("SignDigest: %.0f allocations besides the %.0f of the RSA signature, want at most 10", got-rsaOnly, rsaOnly)
	}
}
