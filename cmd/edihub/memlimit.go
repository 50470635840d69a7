package main

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// cgroupMemoryMax is the cgroup v2 file holding the container's memory
// limit (a Kubernetes resources.limits.memory), or "max" for none.
const cgroupMemoryMax = "/sys/fs/cgroup/memory.max"

// memoryLimitShare is the part of the container's limit given to the Go
// runtime as its soft limit; the rest covers what the runtime does not
// count (binary, thread stacks outside the heap, kernel buffers) and its
// lag in returning memory.
const memoryLimitShare = 0.85

// memoryLimit returns the soft memory limit edihub serve sets: a share of
// the cgroup limit read from path, or 0 (leave the runtime alone) when
// GOMEMLIMIT is set, when there is no cgroup v2 file or when it says
// "max". Without a limit the heap may grow to twice what is live before
// the collector runs, which a large message can push past the container's
// limit.
func memoryLimit(getenv func(string) string, path string) (int64, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, nil // the runtime applied it already
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read container memory limit: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "max" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("read container memory limit: %s holds %q, not a byte count or \"max\"", path, v)
	}
	return int64(math.Floor(float64(n) * memoryLimitShare)), nil
}

// applyMemoryLimit sets the runtime's soft memory limit from the
// container's (see memoryLimit) and logs what it did. A limit it cannot
// read is logged, not fatal: edihub runs as before.
func applyMemoryLimit(log *zap.Logger, getenv func(string) string, path string) {
	limit, err := memoryLimit(getenv, path)
	switch {
	case err != nil:
		log.Warn("no Go memory limit set; set GOMEMLIMIT to about 85% of the container's memory", zap.Error(err))
	case limit > 0:
		debug.SetMemoryLimit(limit)
		log.Info("Go memory limit set from the container's", zap.Int64("bytes", limit), zap.String("source", path),
			zap.Float64("share", memoryLimitShare))
	case getenv("GOMEMLIMIT") != "":
		log.Info("Go memory limit from GOMEMLIMIT", zap.String("GOMEMLIMIT", getenv("GOMEMLIMIT")))
	}
}
