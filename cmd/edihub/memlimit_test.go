package main

import (
	"math"
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

// TestInFlightLimit: the in-flight budget is the setting, else half the
// Go memory limit, never below one largest message.
func TestInFlightLimit(t *testing.T) {
	tests := []struct {
		name     string
		set      int64
		memLimit int64
		want     int64
	}{
		{"set", 300 << 20, 1 << 30, 300 << 20},
		{"half the memory limit", 0, 4 << 30, 2 << 30},
		{"at least one largest message", 0, 600 << 20, 500 << 20},
		{"no memory limit", 0, math.MaxInt64, 4 * (500 << 20)},
	}
	for _, tt := range tests {
		o := serveOptions{maxBodyBytes: 100 << 20, maxInFlightBytes: tt.set}
		if got := o.inFlightLimit(tt.memLimit); got != tt.want {
			t.Errorf("%s: inFlightLimit(%d) = %d, want %d", tt.name, tt.memLimit, got, tt.want)
		}
	}
}
