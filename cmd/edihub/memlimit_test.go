package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"go.uber.org/zap"
)

func TestMemoryLimit(t *testing.T) {
	tests := []struct {
		name      string
		gomemlim  string
		file      *string // nil: no file
		want      int64
		wantError bool
	}{
		{name: "container limit", file: ptr("1073741824\n"), want: 912680550},
		{name: "no limit", file: ptr("max\n"), want: 0},
		{name: "no cgroup v2", file: nil, want: 0},
		{name: "GOMEMLIMIT wins", gomemlim: "500MiB", file: ptr("1073741824\n"), want: 0},
		{name: "garbage", file: ptr("lots\n"), wantError: true},
		{name: "zero", file: ptr("0\n"), wantError: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "memory.max")
			if tt.file != nil {
				if err := os.WriteFile(path, []byte(*tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			getenv := func(k string) string {
				if k == "GOMEMLIMIT" {
					return tt.gomemlim
				}
				return ""
			}
			got, err := memoryLimit(getenv, path)
			if (err != nil) != tt.wantError || got != tt.want {
				t.Errorf("memoryLimit() = %d, %v; want %d, error %v", got, err, tt.want, tt.wantError)
			}
		})
	}
}

func TestApplyMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	path := filepath.Join(t.TempDir(), "memory.max")
	if err := os.WriteFile(path, []byte("2147483648\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	applyMemoryLimit(zap.NewNop(), func(string) string { return "" }, path)
	if got, want := debug.SetMemoryLimit(-1), int64(1825361100); got != want {
		t.Errorf("runtime memory limit = %d, want %d (85%% of 2 GiB)", got, want)
	}
}

func ptr(s string) *string { return &s }
