package hub_test

import (
	"go/build"
	"testing"

	"github.com/edihub/edihub/internal/hub"
)

// TestImportsOnlyTheStandardLibrary keeps the package's contract: every
// package of the module may import hub, so hub imports nothing but the
// standard library (anything else would bring its dependencies, or a
// cycle, to all of them).
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatalf("read the package: %v", err)
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("build.ImportDir found no imports: the check looked at nothing")
	}
	for _, path := range pkg.Imports {
		imp, err := build.Import(path, ".", build.FindOnly)
		if err != nil {
			t.Errorf("find %s: %v", path, err)
			continue
		}
		if !imp.Goroot {
			t.Errorf("hub imports %s, which is not in the standard library; hub holds types and sentinels only", path)
		}
	}
}

func TestFenceString(t *testing.T) {
	tests := []struct {
		give hub.Fence
		want string
	}{
		{give: hub.Fence{Lease: "edihub-leader", Token: 7}, want: "edihub-leader@7"},
		{give: hub.Fence{}, want: "@0"},
	}
	for _, tt := range tests {
		if got := tt.give.String(); got != tt.want {
			t.Errorf("%#v.String() = %q, want %q", tt.give, got, tt.want)
		}
	}
}
