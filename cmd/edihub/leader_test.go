package main

import (
	"errors"
	"fmt"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/edihub/edihub/internal/leader"
)

// TestExitIfWorkersHung: hung workers end the process at once with status
// 1 (no HTTP or dispatcher drain first); every other outcome of the
// elector's Run returns and shuts down in order.
func TestExitIfWorkersHung(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantExit bool
	}{
		{"stopped", nil, false},
		{"other error", errors.New("boom"), false},
		{"hung workers", fmt.Errorf("%w: [heartbeat] still running 5s after leadership ended", leader.ErrWorkersHung), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.InfoLevel)
			code := -1
			exitIfWorkersHung(zap.New(core), tt.err, func(c int) { code = c })
			if gotExit := code != -1; gotExit != tt.wantExit || (gotExit && code != 1) {
				t.Fatalf("exit code %d, want exit %v with 1", code, tt.wantExit)
			}
			if tt.wantExit {
				entries := logs.FilterLevelExact(zapcore.ErrorLevel).All()
				if len(entries) != 1 || entries[0].ContextMap()["error"] == nil {
					t.Errorf("logged %v, want one error entry carrying the error", logs.All())
				}
			} else if logs.Len() != 0 {
				t.Errorf("logged %v, want nothing", logs.All())
			}
		})
	}
}
