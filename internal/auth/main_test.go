package auth_test

import (
	"context"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv"
	"github.com/edihub/edihub/internal/testenv/pgtest"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.CheckLeaks())) }

// cheap are argon2id parameters that keep the tests fast; the product's
// are DefaultParams.
var cheap = auth.Params{Memory: 64, Time: 1, Threads: 1}

// clock is a test clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now().Truncate(time.Microsecond)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// env is a fresh database with the users service and an Authenticator
// over it (bootstrap token "bootstrap-secret"), on a test clock.
type env struct {
	store *postgres.Store
	users *auth.Users
	auth  *auth.Authenticator
	clock *clock
}

const bootstrap = "bootstrap-secret"

// admin is the command line's admin, as edihub users runs.
var admin = auth.Caller{Principal: auth.CLIPrincipal("root@test")}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{store: pgtest.Store(t), clock: newClock()}
	e.users = &auth.Users{Store: e.store, Params: cheap, Now: e.clock.Now}
	e.auth = e.authenticator(t, bootstrap)
	return e
}

// authenticator is another Authenticator on e's store and clock: another
// replica.
func (e *env) authenticator(t *testing.T, token string) *auth.Authenticator {
	t.Helper()
	a, err := auth.New(auth.Options{Store: e.store, BootstrapToken: token, Auditor: e.store, Params: cheap, Now: e.clock.Now, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// addUser adds a user with password "password of NAME" (long enough).
func (e *env) addUser(t *testing.T, name string, role auth.Role) postgres.User {
	t.Helper()
	u, err := e.users.Add(context.Background(), admin, name, role, pw(name))
	if err != nil {
		t.Fatalf("Add(%s): %v", name, err)
	}
	return u
}

func pw(name string) string { return "password of " + name }

// token makes a token for user with role (0: the user's) and returns it.
func (e *env) token(t *testing.T, user, name string, role auth.Role, expires *time.Time) string {
	t.Helper()
	tok, _, err := e.users.CreateToken(context.Background(), admin, user, auth.TokenRequest{Name: name, Role: role, ExpiresAt: expires})
	if err != nil {
		t.Fatalf("CreateToken(%s, %s): %v", user, name, err)
	}
	return tok
}

// request is a GET from 192.0.2.1 with the bearer token (none when "").
func request(token string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "http://edihub.test/api/v1/messages", nil)
	r.RemoteAddr = "192.0.2.1:40000"
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

// audit lists the audit log as "actor action target remote", oldest first.
func (e *env) audit(t *testing.T) []string {
	t.Helper()
	recs, err := e.store.AuditLog(context.Background(), postgres.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		out = append(out, r.Actor+" "+r.Action+" "+r.Target+" "+r.Remote)
	}
	return out
}
