package main

import (
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestDisposition reads the disposition of an MDN's body, signed or not,
// whatever the case of the field's name.
func TestDisposition(t *testing.T) {
	for _, tt := range []struct{ body, want string }{
		{"Reporting-UA: edihub\r\nDisposition: automatic-action/MDN-sent-automatically; processed\r\n", "processed"},
		{"--b\r\nContent-Type: message/disposition-notification\r\n\r\nfinal-recipient: rfc822; EDIHUB\r\ndisposition: automatic-action/MDN-sent-automatically; processed/error: decryption-failed\r\n\r\n--b--", "processed/error: decryption-failed"},
		{"no MDN here", "no disposition"},
	} {
		if got := disposition([]byte(tt.body)); got != tt.want {
			t.Errorf("disposition(%q) = %q, want %q", tt.body, got, tt.want)
		}
	}
}

// TestCPUOfThisProcess: this process's own CPU time is read from /proc
// and grows when it works; the machine's busy time is below its total.
func TestCPUOfThisProcess(t *testing.T) {
	pid := os.Getpid()
	before := cpuOf([]int{pid})[0]
	x := 0
	for i := range 300_000_000 {
		x += i % 7
	}
	after := cpuOf([]int{pid})[0]
	if after.busy <= before.busy || after.name == "" {
		t.Errorf("CPU of this process: %+v then %+v (work %d), want it to grow", before, after, x)
	}
	if m := machineCPU(); m.total <= 0 || m.busy <= 0 || m.busy > m.total {
		t.Errorf("machine CPU = %+v", m)
	}
	if _, err := parsePIDs("1,x"); err == nil {
		t.Error("parsePIDs accepted x")
	}
}

func TestSenderURLs(t *testing.T) {
	got := senderURLs("http://a/as2, http://b/as2,", 5)
	want := []string{"http://a/as2", "http://b/as2", "http://a/as2", "http://b/as2", "http://a/as2"}
	if !slices.Equal(got, want) {
		t.Errorf("senderURLs = %q, want %q", got, want)
	}
}

// TestParts: the CPU of a child that works counts under its command name
// while it runs and under this process (which reaped it) once it has
// exited; the parts add up to cpuOf's difference each time.
func TestParts(t *testing.T) {
	self := os.Getpid()
	child := exec.Command("sh", "-c", "while :; do :; done")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer child.Process.Kill()
	snap0 := takeSnapshot()
	for takeSnapshot()[child.Process.Pid].ticks-snap0[child.Process.Pid].ticks < 20 {
		time.Sleep(10 * time.Millisecond) // stays: the child must burn real CPU ticks
	}
	snap1 := takeSnapshot()
	checkSum := func(name string, before, after snapshot, p map[string]float64) {
		t.Helper()
		want := after.cpuOf([]int{self})[0].busy - before.cpuOf([]int{self})[0].busy
		var sum float64
		for _, v := range p {
			sum += v
		}
		if math.Abs(sum-want) > 1e-9 {
			t.Errorf("%s: parts %v add up to %.2f s, cpuOf's difference is %.2f s", name, p, sum, want)
		}
	}
	running := parts(snap0, snap1, self)
	if running["sh"] < 0.2 {
		t.Errorf("while the child runs: parts %v, want sh at least 0.2 s", running)
	}
	checkSum("while the child runs", snap0, snap1, running)

	_ = child.Process.Kill()
	_ = child.Wait()
	snap2 := takeSnapshot()
	exited := parts(snap1, snap2, self)
	if _, ok := exited["sh"]; ok {
		t.Errorf("after the child exited: parts %v, want no sh", exited)
	}
	if exited["itself and exited processes"] < 0 {
		t.Errorf("after the child exited: parts %v, want this process's part not negative", exited)
	}
	checkSum("after the child exited", snap1, snap2, exited)
}

func TestTitleKind(t *testing.T) {
	for _, tt := range []struct{ title, want string }{
		{"postgres: autovacuum worker edihub_served_x", "autovacuum worker"},
		{"postgres: walwriter", "walwriter"},
		{"postgres: postgres edihub_served_x 127.0.0.1(40022) idle", "backends of edihub_served_x"},
		{"postgres: postgres edihub 127.0.0.1(40022) COMMIT", "backends of edihub"},
		{"/usr/bin/sh -c true", "sh"},
	} {
		if got := titleKind(tt.title, "sh"); got != tt.want {
			t.Errorf("titleKind(%q) = %q, want %q", tt.title, got, tt.want)
		}
	}
	c := cpuUse{parts: map[string]float64{"walwriter": 0.01, "backends of x": 2, "checkpointer": 0}}
	if got, want := c.partsList(func(s float64) string { return strconv.FormatFloat(s, 'f', 2, 64) }), "backends of x 2.00, walwriter 0.01"; got != want {
		t.Errorf("partsList = %q, want %q", got, want)
	}
}
