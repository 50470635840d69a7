package mdn_test

import (
	"crypto"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/mdn"
	"github.com/edihub/edihub/internal/testenv/openssltest"
)

// TestBuildAllocations bounds what building an MDN allocates besides the
// RSA signature (a regression guard, not a timing): the report and the
// multipart/signed body are each written into one buffer sized up front,
// the header map has room for the receiver's fields (it was 112 objects
// signed, 22 unsigned).
func TestBuildAllocations(t *testing.T) {
	ids := openssltest.Keys(t)
	r := mdn.Report{ReportingUA: "edihub", OriginalRecipient: "EDIHUB", FinalRecipient: "EDIHUB", OriginalMessageID: "<1@example.com>",
		Disposition: mdn.Processed(), MIC: "7Of8GZ0ChhXxKT8eFbdtQbMkXuPsqj9nxyKpEYAJ2MU=, sha-256"}
	tm := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	var md [32]byte
	rsaOnly := testing.AllocsPerRun(20, func() { _, _ = ids.A.Key.Sign(nil, md[:], crypto.SHA256) })
	for _, tt := range []struct {
		name string
		o    mdn.BuildOptions
		max  float64
	}{
		{"unsigned", mdn.BuildOptions{Time: tm}, 12},
		{"signed", mdn.BuildOptions{Sign: true, Key: ids.A.Key, Cert: ids.A.Cert, MICAlg: crypto.SHA256, Time: tm}, 28},
	} {
		got := testing.AllocsPerRun(20, func() {
			if _, _, err := mdn.Build(r, tt.o); err != nil {
				t.Fatal(err)
			}
		})
		if tt.o.Sign {
			got -= rsaOnly
		}
		if got > tt.max {
			t.Errorf("Build %s: %.0f allocations (RSA signature aside), want at most %.0f", tt.name, got, tt.max)
		}
	}
}
