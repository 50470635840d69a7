package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runMainEnv makes the test binary run main instead of the tests, so that
// the command's real exit status can be checked.
const runMainEnv = "TESTSUMMARY_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

// Lines as go test -json writes them (Go 1.24 and later: build output and
// build failures are events of their own).
const (
	pkgPass = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestOK"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"example.com/a","Test":"TestOK","Elapsed":0}
{"Action":"output","Package":"example.com/a","Output":"PASS\n"}
{"Action":"pass","Package":"example.com/a","Elapsed":0.2}
`
	pkgFail = `{"Action":"start","Package":"example.com/b"}
{"Action":"run","Package":"example.com/b","Test":"TestBroken"}
{"Action":"output","Package":"example.com/b","Test":"TestBroken","Output":"=== RUN   TestBroken\n"}
{"Action":"output","Package":"example.com/b","Test":"TestBroken","Output":"    b_test.go:9: Parse(x) = y, want z\n"}
{"Action":"output","Package":"example.com/b","Test":"TestBroken","Output":"--- FAIL: TestBroken (0.00s)\n"}
{"Action":"fail","Package":"example.com/b","Test":"TestBroken","Elapsed":0}
{"Action":"output","Package":"example.com/b","Output":"FAIL\n"}
{"Action":"fail","Package":"example.com/b","Elapsed":0.1}
`
	pkgSkip = `{"Action":"start","Package":"example.com/c"}
{"Action":"run","Package":"example.com/c","Test":"TestNeedsDB"}
{"Action":"output","Package":"example.com/c","Test":"TestNeedsDB","Output":"=== RUN   TestNeedsDB\n"}
{"Action":"output","Package":"example.com/c","Test":"TestNeedsDB","Output":"    c_test.go:7: no database\n"}
{"Action":"output","Package":"example.com/c","Test":"TestNeedsDB","Output":"--- SKIP: TestNeedsDB (0.00s)\n"}
{"Action":"skip","Package":"example.com/c","Test":"TestNeedsDB","Elapsed":0}
{"Action":"output","Package":"example.com/c","Output":"PASS\n"}
{"Action":"pass","Package":"example.com/c","Elapsed":0.1}
`
	pkgBuildFail = `{"ImportPath":"example.com/d [example.com/d.test]","Action":"build-output","Output":"# example.com/d [example.com/d.test]\n"}
{"ImportPath":"example.com/d [example.com/d.test]","Action":"build-output","Output":"d/d_test.go:5:2: undefined: missing\n"}
{"ImportPath":"example.com/d [example.com/d.test]","Action":"build-fail"}
{"Action":"start","Package":"example.com/d"}
{"Action":"output","Package":"example.com/d","Output":"FAIL\texample.com/d [build failed]\n"}
{"Action":"fail","Package":"example.com/d","Elapsed":0,"FailedBuild":"example.com/d [example.com/d.test]"}
`
	pkgNoTestFiles = `{"Action":"start","Package":"example.com/e"}
{"Action":"output","Package":"example.com/e","Output":"?   \texample.com/e\t[no test files]\n"}
{"Action":"skip","Package":"example.com/e","Elapsed":0}
`
	pkgNoTestsToRun = `{"Action":"start","Package":"example.com/f"}
{"Action":"output","Package":"example.com/f","Output":"testing: warning: no tests to run\n"}
{"Action":"output","Package":"example.com/f","Output":"PASS\n"}
{"Action":"output","Package":"example.com/f","Output":"ok  \texample.com/f\t0.010s [no tests to run]\n"}
{"Action":"pass","Package":"example.com/f","Elapsed":0.01}
`
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name     string
		give     string
		wantCode int
		wantLast string   // the closing line
		wantOut  []string // also in the report
	}{
		{
			name: "pass", give: pkgPass, wantCode: 0,
			wantLast: "1 passed, 0 failed, 0 skipped",
			wantOut:  []string{"ok    example.com/a (0.2s)", "1 packages tested"},
		},
		{
			name: "fail", give: pkgPass + pkgFail, wantCode: 1,
			wantLast: "1 passed, 1 failed, 0 skipped",
			wantOut: []string{"FAIL  example.com/b (0.1s)", "--- FAIL: example.com/b.TestBroken",
				"b_test.go:9: Parse(x) = y, want z", "Failed tests:\n  example.com/b.TestBroken", "Failed packages:\n  example.com/b"},
		},
		{
			name: "skip", give: pkgPass + pkgSkip, wantCode: 1,
			wantLast: "1 passed, 0 failed, 1 skipped",
			wantOut:  []string{"Skipped tests", "example.com/c.TestNeedsDB", "c_test.go:7: no database"},
		},
		{
			name: "build failure", give: pkgPass + pkgBuildFail, wantCode: 1,
			wantLast: "1 passed, 0 failed, 0 skipped",
			wantOut:  []string{"d/d_test.go:5:2: undefined: missing", "Failed packages:", "example.com/d [example.com/d.test] (build failed)"},
		},
		{
			name: "vet or compiler text that is not JSON", give: "# example.com/g\ng.go:3:1: syntax error\n" + pkgPass, wantCode: 0,
			wantLast: "1 passed, 0 failed, 0 skipped",
			wantOut:  []string{"g.go:3:1: syntax error"},
		},
		{
			name: "no input at all", give: "", wantCode: 1,
			wantLast: "0 passed, 0 failed, 0 skipped",
			wantOut:  []string{"0 packages tested"},
		},
		{
			name: "packages without tests only", give: pkgNoTestFiles + pkgNoTestsToRun, wantCode: 1,
			wantLast: "0 passed, 0 failed, 0 skipped",
		},
		{
			name: "a package without test files beside passing tests", give: pkgNoTestFiles + pkgPass, wantCode: 0,
			wantLast: "1 passed, 0 failed, 0 skipped",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			code := summarize(strings.NewReader(tt.give), &out)
			checkReport(t, code, out.String(), tt.wantCode, tt.wantLast, tt.wantOut)
		})
	}
}

// TestExitStatus runs the command itself (this test binary running main)
// and checks the exit status the test script sees.
func TestExitStatus(t *testing.T) {
	tests := []struct {
		name     string
		give     string
		wantCode int
		wantLast string
	}{
		{"pass", pkgPass, 0, "1 passed, 0 failed, 0 skipped"},
		{"fail", pkgPass + pkgFail, 1, "1 passed, 1 failed, 0 skipped"},
		{"skip", pkgPass + pkgSkip, 1, "1 passed, 0 failed, 1 skipped"},
		{"build failure", pkgPass + pkgBuildFail, 1, "1 passed, 0 failed, 0 skipped"},
		{"no tests at all", "", 1, "0 passed, 0 failed, 0 skipped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0])
			cmd.Env = append(os.Environ(), runMainEnv+"=1")
			cmd.Stdin = strings.NewReader(tt.give)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			switch {
			case errors.As(err, &ee):
				code = ee.ExitCode()
			case err != nil:
				t.Fatalf("run %s: %v", filepath.Base(os.Args[0]), err)
			}
			checkReport(t, code, out.String(), tt.wantCode, tt.wantLast, nil)
		})
	}
}

func checkReport(t *testing.T, code int, out string, wantCode int, wantLast string, wantOut []string) {
	t.Helper()
	if code != wantCode {
		t.Errorf("exit status %d, want %d; report:\n%s", code, wantCode, out)
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if last := lines[len(lines)-1]; last != wantLast {
		t.Errorf("closing line %q, want %q; report:\n%s", last, wantLast, out)
	}
	for _, w := range wantOut {
		if !strings.Contains(out, w) {
			t.Errorf("report lacks %q; report:\n%s", w, out)
		}
	}
}
