// Package pgtest gives tests a fresh, migrated PostgreSQL database each.
//
// One throwaway server per test binary is started from the machine's
// PostgreSQL binaries (in a temporary directory, on a free port) the first
// time a test asks for a database, and stopped by Main when the tests end.
// With EDIHUB_TEST_DATABASE_URL set, databases are created on that server
// instead. A missing PostgreSQL installation fails the test; it never skips.
//
// Use it from a package's TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
package pgtest

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/testenv/pgserver"
)

// EnvURL names the variable that points the tests at an existing server. Its
// role must be allowed to create databases.
const EnvURL = "EDIHUB_TEST_DATABASE_URL"

var (
	once     sync.Once
	shared   *pgserver.Server
	adminURL string
	template string
	setupErr error
	seq      atomic.Int64
	tmpDirs  []string

	sharedMu  sync.Mutex
	sharedDBs = map[string]*sharedDB{}
)

// Main runs m and then stops the shared server, if one was started.
func Main(m *testing.M) int {
	code := m.Run()
	sharedMu.Lock()
	for _, db := range sharedDBs {
		if db.name != "" {
			_ = exec(context.Background(), adminURL, "DROP DATABASE IF EXISTS "+db.name+" WITH (FORCE)")
		}
	}
	sharedMu.Unlock()
	if shared != nil {
		_ = shared.Stop()
	}
	for _, d := range tmpDirs {
		_ = os.RemoveAll(d)
	}
	return code
}

// settings make a throwaway server fast; durability does not matter here.
var settings = map[string]string{
	"fsync":              "off",
	"synchronous_commit": "off",
	"full_page_writes":   "off",
	"shared_buffers":     "64MB",
}

// NewServer starts a dedicated server for a test that needs to stop and
// start it (readiness, restart scenarios). It is stopped at cleanup.
func NewServer(t testing.TB) *pgserver.Server {
	t.Helper()
	dir, err := tempDir()
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	s, err := pgserver.New(pgserver.Options{Dir: dir, Settings: settings})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// tempDir makes a directory the postgres user can reach when running as
// root (t.TempDir's parents are private to the current user).
func tempDir() (string, error) {
	d, err := os.MkdirTemp("", "edihub-pgtest-")
	if err != nil {
		return "", err
	}
	return d, nil
}

func setup() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if u := os.Getenv(EnvURL); u != "" {
		adminURL = u
	} else {
		dir, err := tempDir()
		if err != nil {
			setupErr = err
			return
		}
		tmpDirs = append(tmpDirs, dir)
		s, err := pgserver.New(pgserver.Options{Dir: dir, Settings: settings})
		if err != nil {
			setupErr = err
			return
		}
		if err := s.Start(ctx); err != nil {
			setupErr = err
			return
		}
		shared = s
		adminURL = s.URL("postgres")
	}
	template = fmt.Sprintf("edihub_tmpl_%d_%d", os.Getpid(), time.Now().UnixNano()%1e6)
	if err := exec(ctx, adminURL, "CREATE DATABASE "+template); err != nil {
		setupErr = err
		return
	}
	st, err := postgres.Open(ctx, withDB(adminURL, template), postgres.Options{})
	if err != nil {
		setupErr = err
		return
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		setupErr = err
	}
}

// URL creates a fresh, migrated database and returns its URL. The database
// is dropped at cleanup.
func URL(t testing.TB) string {
	t.Helper()
	once.Do(setup)
	if setupErr != nil {
		t.Fatalf("pgtest: no PostgreSQL for the tests: %v", setupErr)
	}
	name := fmt.Sprintf("%s_%d", template, seq.Add(1))
	ctx := context.Background()
	if err := exec(ctx, adminURL, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template)); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		_ = exec(context.Background(), adminURL, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return withDB(adminURL, name)
}

// sharedDB is a database of Shared.
type sharedDB struct {
	once sync.Once
	name string
	url  string
	err  error
}

// Shared returns the URL of a migrated database made once per test binary
// for key and prepared by prepare (a large fill, say), for the tests that
// only read it: a test must not change it. It is dropped when Main ends.
// A prepare that failed fails every test that asks for key.
func Shared(t testing.TB, key string, prepare func(ctx context.Context, url string) error) string {
	t.Helper()
	once.Do(setup)
	if setupErr != nil {
		t.Fatalf("pgtest: no PostgreSQL for the tests: %v", setupErr)
	}
	sharedMu.Lock()
	db := sharedDBs[key]
	if db == nil {
		db = &sharedDB{}
		sharedDBs[key] = db
	}
	sharedMu.Unlock()
	db.once.Do(func() {
		name := fmt.Sprintf("%s_shared_%d", template, seq.Add(1))
		if db.err = exec(context.Background(), adminURL, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", name, template)); db.err != nil {
			return
		}
		db.name, db.url = name, withDB(adminURL, name)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		db.err = prepare(ctx, db.url)
	})
	if db.err != nil {
		t.Fatalf("pgtest: shared database %q: %v", key, db.err)
	}
	return db.url
}

// EmptyURL creates an empty database with no schema, dropped at cleanup.
func EmptyURL(t testing.TB) string {
	t.Helper()
	once.Do(setup)
	if setupErr != nil {
		t.Fatalf("pgtest: no PostgreSQL for the tests: %v", setupErr)
	}
	name := fmt.Sprintf("%s_empty_%d", template, seq.Add(1))
	if err := exec(context.Background(), adminURL, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		_ = exec(context.Background(), adminURL, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	return withDB(adminURL, name)
}

// Store opens a Store on a fresh, migrated database, closed at cleanup.
func Store(t testing.TB) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), URL(t), postgres.Options{})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(st.Close)
	return st
}

func exec(ctx context.Context, connURL, sql string) error {
	c, err := pgx.Connect(ctx, connURL)
	if err != nil {
		return fmt.Errorf("connect to test server: %w", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", strings.Fields(sql)[0]+" "+strings.Fields(sql)[1], err)
	}
	return nil
}

func withDB(connURL, db string) string {
	u, err := url.Parse(connURL)
	if err != nil {
		return connURL
	}
	u.Path = "/" + db
	return u.String()
}

// Conn opens a connection to the database at connURL (from URL), closed at
// cleanup, for tests that seed rows no Store method writes (messages of a
// past day, terms of other holders).
func Conn(t testing.TB, connURL string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), connURL)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}
