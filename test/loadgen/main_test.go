package main

import (
	"os"
	"slices"
	"testing"
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
