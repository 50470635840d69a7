package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

// usersEnv is the environment of edihub users against a fresh database,
// and the store to check what the commands did.
func usersEnv(t *testing.T) (func(string) string, *postgres.Store) {
	t.Helper()
	url := pgtest.URL(t)
	st, err := postgres.Open(context.Background(), url, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	return env("EDIHUB_DATABASE_URL", url), st
}

// runIn is runCmd with a standard input.
func runWithStdin(t *testing.T, getenv func(string) string, stdin string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := runIn(ctx, args, getenv, strings.NewReader(stdin), &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// login checks a name and password against the database as a replica does.
func login(t *testing.T, st *postgres.Store, name, password string) error {
	t.Helper()
	a, err := auth.New(auth.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	_, err = a.Login(context.Background(), name, password, "")
	return err
}

// bearer resolves a token against the database as a replica does.
func bearer(t *testing.T, st *postgres.Store, token string) (auth.Principal, error) {
	t.Helper()
	a, err := auth.New(auth.Options{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	r, _ := http.NewRequest(http.MethodGet, "http://edihub.test/", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return a.Bearer(r)
}

// TestUsersCLI: every verb of edihub users end to end: add (a generated
// password printed once, a password file, standard input; flags before or
// after the name), list, token (printed alone, usable at once), tokens,
// revoke, disable, enable, role, passwd, each recorded in the audit log as
// the command line's user.
func TestUsersCLI(t *testing.T) {
	getenv, st := usersEnv(t)
	ctx := context.Background()

	out, _, err := runCmd(t, getenv, "users", "add", "alice", "-role", "admin")
	if err != nil {
		t.Fatalf("users add alice = %v\n%s", err, out)
	}
	m := regexp.MustCompile(`password \(shown once, store it now\): (\S+)\n`).FindStringSubmatch(out)
	if !strings.Contains(out, "added user alice (admin)") || m == nil {
		t.Fatalf("users add without a password =\n%s\nwant the user added and a generated password", out)
	}
	if err := login(t, st, "alice", m[1]); err != nil {
		t.Errorf("login with the generated password = %v", err)
	}

	file := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(file, []byte("olga's long password\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runCmd(t, getenv, "users", "add", "-role", "operator", "-password-file", file, "olga"); err != nil || strings.Contains(out, "password (shown once") {
		t.Fatalf("users add -password-file = %v\n%s\nwant no password printed", err, out)
	}
	if err := login(t, st, "olga", "olga's long password"); err != nil {
		t.Errorf("login with the password of the file = %v", err)
	}
	if _, _, err := runWithStdin(t, getenv, "carl's long password\r\n", "users", "add", "carl", "-role", "viewer"); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runCmd(t, getenv, "users", "list"); err != nil || !regexp.MustCompile(`(?m)^carl\s+viewer\s+active\s+.*\snever$`).MatchString(out) {
		t.Errorf("users list before carl logged in = %v\n%s\nwant carl's last login: never", err, out)
	}
	if err := login(t, st, "carl", "carl's long password"); err != nil {
		t.Errorf("login with the password of standard input = %v", err)
	}

	out, _, err = runCmd(t, getenv, "users", "list")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^NAME\s+ROLE\s+STATUS\s+CREATED\s+BY\s+LAST LOGIN$`),
		regexp.MustCompile(`(?m)^alice\s+admin\s+active\s+\d{4}-\S+\s+cli:\S+@\S+\s+\d{4}-`), // logged in above
		regexp.MustCompile(`(?m)^carl\s+viewer\s+active\s+`),
		regexp.MustCompile(`(?m)^olga\s+operator\s+active\s+`),
	} {
		if !want.MatchString(out) {
			t.Errorf("users list lacks %s:\n%s", want, out)
		}
	}

	out, errOut, err := runCmd(t, getenv, "users", "token", "olga", "-name", "ci", "-role", "viewer", "-expires", "90d")
	if err != nil {
		t.Fatalf("users token = %v\n%s", err, errOut)
	}
	tok := strings.TrimSpace(out)
	if !regexp.MustCompile(`^edh_[A-Za-z0-9_-]{43}$`).MatchString(tok) || !strings.Contains(errOut, "shown once") || !strings.Contains(errOut, "role viewer") {
		t.Fatalf("users token stdout %q, stderr %q; want the token alone, and a note on stderr", out, errOut)
	}
	if p, err := bearer(t, st, tok); err != nil || p.User != "olga" || p.TokenName != "ci" || p.Role != auth.RoleViewer {
		t.Errorf("the token = %+v, %v; want olga's ci as viewer", p, err)
	}
	out, _, err = runCmd(t, getenv, "users", "tokens", "olga")
	if err != nil || !regexp.MustCompile(`(?m)^ci\s+viewer\s+active\s+\S+\s+cli:\S+\s+\d{4}-\S+\s+\d{4}-`).MatchString(out) {
		t.Errorf("users tokens olga = %v\n%s\nwant ci, viewer, active, an expiry and a last use", err, out)
	}

	// Disable: the token stops working; enable: it works again.
	if out, _, err := runCmd(t, getenv, "users", "disable", "OLGA"); err != nil || !strings.Contains(out, "disabled olga") {
		t.Fatalf("users disable = %v\n%s", err, out)
	}
	if _, err := bearer(t, st, tok); !errors.Is(err, auth.ErrDisabled) {
		t.Errorf("token of the disabled user = %v, want ErrDisabled", err)
	}
	if out, _, err := runCmd(t, getenv, "users", "list"); err != nil || !regexp.MustCompile(`(?m)^olga\s+operator\s+disabled since `).MatchString(out) {
		t.Errorf("users list after disable = %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, getenv, "users", "enable", "olga"); err != nil {
		t.Fatal(err)
	}
	if _, err := bearer(t, st, tok); err != nil {
		t.Errorf("token after enable = %v, want it accepted", err)
	}

	// Role: a token acts with at most its user's role.
	if _, _, err := runCmd(t, getenv, "users", "token", "olga", "-name", "deploy"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCmd(t, getenv, "users", "role", "olga", "-role", "viewer"); err != nil {
		t.Fatal(err)
	}

	// Revoke: the token stops working.
	if out, _, err := runCmd(t, getenv, "users", "revoke", "olga", "ci"); err != nil || !strings.Contains(out, "revoked token ci of olga") {
		t.Fatalf("users revoke = %v\n%s", err, out)
	}
	if _, err := bearer(t, st, tok); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("revoked token = %v, want ErrUnauthenticated", err)
	}
	if out, _, _ := runCmd(t, getenv, "users", "tokens", "olga"); !regexp.MustCompile(`(?m)^ci\s+viewer\s+revoked\s`).MatchString(out) {
		t.Errorf("users tokens after revoke:\n%s", out)
	}

	// Passwd: the old password no longer works.
	out, _, err = runCmd(t, getenv, "users", "passwd", "carl")
	m = regexp.MustCompile(`password \(shown once, store it now\): (\S+)\n`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("users passwd = %v\n%s", err, out)
	}
	if login(t, st, "carl", "carl's long password") == nil || login(t, st, "carl", m[1]) != nil {
		t.Error("after users passwd, the old password works or the new one does not")
	}

	recs, err := st.AuditLog(ctx, postgres.AuditQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		if r.Action == "login" || r.Action == "login.failed" {
			continue
		}
		if r.Actor != cliCaller().Actor() || r.Remote != "" {
			t.Errorf("audit entry %+v: actor %q, remote %q; want %q from nowhere", r, r.Actor, r.Remote, cliCaller().Actor())
		}
		got = append(got, r.Action+" "+r.Target)
	}
	want := []string{"user.add alice", "user.add olga", "user.add carl", "token.create olga", "user.disable olga", "user.enable olga",
		"token.create olga", "user.role olga", "token.revoke olga", "user.passwd carl"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("audit log =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestUsersCLIErrors: mistakes are refused with what to do, and change
// nothing.
func TestUsersCLIErrors(t *testing.T) {
	getenv, st := usersEnv(t)
	if _, _, err := runCmd(t, getenv, "users", "add", "alice", "-role", "admin"); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		stdin   *string
		wantErr string
	}{
		{"no role", []string{"users", "add", "bob"}, nil, "-role: unknown role"},
		{"bad role", []string{"users", "add", "bob", "-role", "root"}, nil, "want viewer, operator or admin"},
		{"no name", []string{"users", "add", "-role", "viewer"}, nil, "give NAME: edihub users add NAME"},
		{"weak password", []string{"users", "add", "bob", "-role", "viewer", "-password-file", short}, nil, "at least 12 are needed"},
		{"empty stdin", []string{"users", "add", "bob", "-role", "viewer"}, new(string), "no password in standard input"},
		{"taken", []string{"users", "add", "ALICE", "-role", "viewer"}, nil, "names are unique whatever their case"},
		{"bad name", []string{"users", "add", "bob smith", "-role", "viewer"}, nil, "use letters, digits"},
		{"unknown user", []string{"users", "disable", "nobody"}, nil, `no user "nobody" (edihub users list shows them)`},
		{"token without name", []string{"users", "token", "alice"}, nil, "give the token a name"},
		{"token bad expiry", []string{"users", "token", "alice", "-name", "ci", "-expires", "soon"}, nil, "like 90d"},
		{"unknown token", []string{"users", "revoke", "alice", "ci"}, nil, "edihub users tokens alice"},
		{"revoke without token name", []string{"users", "revoke", "alice"}, nil, "give NAME and TOKEN-NAME"},
		{"no database", []string{"users", "list"}, nil, "set EDIHUB_DATABASE_URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ge := getenv
			if tt.name == "no database" {
				ge = env()
			}
			var err error
			if tt.stdin != nil {
				_, _, err = runWithStdin(t, ge, *tt.stdin, tt.args...)
			} else {
				_, _, err = runCmd(t, ge, tt.args...)
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("edihub %s = %v, want an error saying %q", strings.Join(tt.args, " "), err, tt.wantErr)
			}
		})
	}
	us, err := st.Users(context.Background())
	if err != nil || len(us) != 1 {
		t.Errorf("users after the refused commands = %d, %v; want alice alone", len(us), err)
	}
}

// TestBinaryUsersAndTokens: a replica without EDIHUB_API_TOKEN answers 503
// saying how to create the first admin; once edihub users made one and a
// token, the token works with its role, and stops when the user is
// disabled. With EDIHUB_API_TOKEN set, the replica warns at start, without
// the token in the log.
func TestBinaryUsersAndTokens(t *testing.T) {
	dbURL := pgtest.URL(t)
	getenv := env("EDIHUB_DATABASE_URL", dbURL)
	p := startReplica(t, "EDIHUB_DATABASE_URL="+dbURL)
	request := func(tok, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, p.as2+path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	if code, body := request("", "/api/v1/messages"); code != http.StatusServiceUnavailable || !strings.Contains(body, "edihub users add NAME -role admin") {
		t.Errorf("GET /api/v1/messages without users = %d %s, want 503 saying how to add the first admin", code, body)
	}
	if _, _, err := runCmd(t, getenv, "users", "add", "alice", "-role", "admin"); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCmd(t, getenv, "users", "token", "alice", "-name", "ci", "-role", "operator")
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(out)
	if code, body := request(tok, "/api/v1/messages"); code != http.StatusOK {
		t.Errorf("GET /api/v1/messages with the token = %d %s, want 200", code, body)
	}
	if code, body := request(tok, "/api/v1/audit"); code != http.StatusForbidden || !strings.Contains(body, "needs the admin role") {
		t.Errorf("GET /api/v1/audit with an operator token = %d %s, want 403", code, body)
	}
	if code, _ := request("", "/api/v1/messages"); code != http.StatusUnauthorized {
		t.Errorf("GET /api/v1/messages without a token once users exist = %d, want 401", code)
	}
	if _, _, err := runCmd(t, getenv, "users", "disable", "alice"); err != nil {
		t.Fatal(err)
	}
	if code, body := request(tok, "/api/v1/messages"); code != http.StatusUnauthorized || !strings.Contains(body, "disabled") {
		t.Errorf("GET with the token of a disabled user = %d %s, want 401 saying so", code, body)
	}
	if strings.Contains(p.log(), "EDIHUB_API_TOKEN is set") {
		t.Error("warning about EDIHUB_API_TOKEN without it set")
	}

	const secret = "bootstrap-s3cret-value"
	p2 := startReplica(t, "EDIHUB_API_TOKEN="+secret)
	log := p2.log()
	if !strings.Contains(log, "EDIHUB_API_TOKEN is set: it is a shared bootstrap token") || !strings.Contains(log, "edihub users add") {
		t.Errorf("log of a replica with EDIHUB_API_TOKEN lacks the warning:\n%s", log)
	}
	if strings.Contains(log, secret) || strings.Contains(p.log(), tok) {
		t.Error("a token is in the log")
	}
}
