// Package machine describes the machine a measurement ran on, for the
// generated pages of make bench and make chaos: figures are ratios
// against references from the same run, and a page says on what and
// under how much load they were taken.
package machine

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/edihub/edihub/internal/testenv/pgserver"
)

// Machine describes where a run happened, for the bench page: figures
// are ratios against references from the same run, and the page says on
// what and under how much load they were taken.
type Machine struct {
	CPU        string // model name
	Cores      int
	MemoryGiB  float64
	OS         string
	Go         string
	OpenSSL    string
	PostgreSQL string
	Revision   string
	Started    time.Time
	Took       time.Duration
	// Load is the 1-minute load average sampled during the run.
	LoadMin, LoadMean, LoadMax float64
}

// Describe reads what it can of the machine; an unreadable item
// is "unknown", never an error: the page is still worth writing.
func Describe(ctx context.Context) Machine {
	m := Machine{
		CPU:        cpuModel(),
		Cores:      runtime.NumCPU(),
		MemoryGiB:  memTotalGiB(),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
		Go:         runtime.Version(),
		OpenSSL:    commandLine(ctx, "openssl", "version"),
		PostgreSQL: postgresVersion(ctx),
		Revision:   commandLine(ctx, "git", "describe", "--always", "--dirty"),
		Started:    time.Now().UTC(),
	}
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memTotalGiB() float64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if kb, err := strconv.ParseFloat(f[0], 64); err == nil {
				return kb / (1 << 20)
			}
		}
	}
	return 0
}

// commandLine is the first line a command prints, or "unknown".
func commandLine(ctx context.Context, name string, args ...string) string {
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return "unknown"
	}
	line, _, _ := strings.Cut(string(bytes.TrimSpace(out)), "\n")
	return line
}

// oneMinuteLoad is the 1-minute load average, or -1 where /proc has none.
func oneMinuteLoad() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// LoadSampler samples the load average every interval until stop.
type LoadSampler struct {
	mu      sync.Mutex
	samples []float64
	stop    chan struct{}
	done    chan struct{}
}

// SampleLoad samples the 1-minute load average every interval until
// Finish.
func SampleLoad(interval time.Duration) *LoadSampler {
	s := &LoadSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			s.add(oneMinuteLoad())
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *LoadSampler) add(v float64) {
	if v < 0 {
		return
	}
	s.mu.Lock()
	s.samples = append(s.samples, v)
	s.mu.Unlock()
}

// Finish stops the sampler and returns the minimum, mean and maximum
// (all -1 with no sample).
func (s *LoadSampler) Finish() (lo, mean, hi float64) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return -1, -1, -1
	}
	lo, hi = s.samples[0], s.samples[0]
	for _, v := range s.samples {
		lo, hi, mean = min(lo, v), max(hi, v), mean+v
	}
	return lo, mean / float64(len(s.samples)), hi
}

func (m Machine) loadText() string {
	if m.LoadMax < 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.1f / %.1f / %.1f on %d cores", m.LoadMin, m.LoadMean, m.LoadMax, m.Cores)
}

// postgresVersion is what the server binaries the bench starts say of
// themselves.
func postgresVersion(ctx context.Context) string {
	bin, err := pgserver.FindBinDir()
	if err != nil {
		return "unknown"
	}
	return commandLine(ctx, filepath.Join(bin, "postgres"), "--version")
}

// Rows are the machine as (item, value) pairs, in the order a page
// lists them.
func (m Machine) Rows() [][2]string {
	return [][2]string{
		{"CPU", m.CPU},
		{"cores", strconv.Itoa(m.Cores)},
		{"memory", fmt.Sprintf("%.1f GiB", m.MemoryGiB)},
		{"system", m.OS},
		{"Go", m.Go},
		{"OpenSSL", m.OpenSSL},
		{"PostgreSQL", m.PostgreSQL},
		{"revision", m.Revision},
		{"started", m.Started.Format("2006-01-02 15:04 MST")},
		{"took", m.Took.Round(time.Second).String()},
		{"load average during the run (min / mean / max)", m.loadText()},
	}
}

// Markdown writes the machine as a Markdown table.
func (m Machine) Markdown(b *strings.Builder) {
	b.WriteString("| item | value |\n|---|---|\n")
	for _, kv := range m.Rows() {
		fmt.Fprintf(b, "| %s | %s |\n", kv[0], strings.ReplaceAll(kv[1], "|", "/"))
	}
}
