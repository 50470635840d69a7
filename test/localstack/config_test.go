package main

import (
	"path/filepath"
	"testing"

	"github.com/edihub/edihub/internal/config"
)

// TestDemoConfigsLoad: the configurations make run generates for the hub
// and the demo partner load, with the secure defaults met by the demo
// (both sign and encrypt) and loopback MDN targets allowed explicitly.
func TestDemoConfigsLoad(t *testing.T) {
	state := t.TempDir()
	hub, err := ensureStation(state, "http://127.0.0.1:8090/as2", "http://127.0.0.1:8080/as2")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{hub, filepath.Join(state, "demo", "edihub.yaml")} {
		f, err := config.Load(path, config.Options{})
		if err != nil {
			t.Fatalf("Load(%s) = %v", path, err)
		}
		p := f.Partners[0]
		if !p.RequireSigned || !p.RequireEncrypted || p.Sign == "" || p.Encrypt == "" || !p.AllowPrivateMDNTargets {
			t.Errorf("%s: partner %q: require signed %v encrypted %v, sign %q encrypt %q, private MDN targets %v",
				path, p.AS2ID, p.RequireSigned, p.RequireEncrypted, p.Sign, p.Encrypt, p.AllowPrivateMDNTargets)
		}
	}
}
