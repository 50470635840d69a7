package postgres

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migrationLockID is the advisory lock key that serialises concurrent
// migrations (three replicas starting at once).
const migrationLockID = 0x6564696875620001 // "edihub" + 1

// MigrationResult describes one applied migration.
type MigrationResult struct {
	Version  int64
	Name     string
	Duration time.Duration
}

func migrations() fs.FS {
	sub, err := fs.Sub(migrationFS, "migrations")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return sub
}

func newProvider(db *sql.DB) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(migrationLockID),
		// Retry every second for up to five minutes: a replica that
		// starts while another migrates waits for it instead of failing.
		lock.WithLockTimeout(1, 300),
	)
	if err != nil {
		return nil, fmt.Errorf("migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations(),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return p, nil
}

func (s *Store) sqlDB() *sql.DB { return stdlib.OpenDBFromPool(s.pool) }

// Migrate applies every pending migration under a PostgreSQL session
// advisory lock, so concurrent callers apply each migration exactly once.
// It returns the migrations this call applied (none when up to date).
func (s *Store) Migrate(ctx context.Context) ([]MigrationResult, error) {
	db := s.sqlDB()
	defer db.Close()
	p, err := newProvider(db)
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate: %w", err)
	}
	out := make([]MigrationResult, 0, len(results))
	for _, r := range results {
		out = append(out, MigrationResult{Version: r.Source.Version, Name: r.Source.Path, Duration: r.Duration})
	}
	return out, nil
}

// SchemaVersion returns the database's schema version and the version this
// binary expects.
func (s *Store) SchemaVersion(ctx context.Context) (current, want int64, err error) {
	db := s.sqlDB()
	defer db.Close()
	p, err := newProvider(db)
	if err != nil {
		return 0, 0, err
	}
	current, want, err = p.GetVersions(ctx)
	if err != nil {
		if errors.Is(err, goose.ErrNoMigrations) {
			return 0, 0, err
		}
		return 0, 0, fmt.Errorf("read schema version: %w", err)
	}
	return current, want, nil
}

// CheckSchema returns ErrSchemaOutdated when migrations are pending and
// ErrSchemaNewer when the database is ahead of this binary, each wrapped with
// both versions.
func (s *Store) CheckSchema(ctx context.Context) error {
	current, want, err := s.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	switch {
	case current < want:
		return fmt.Errorf("%w (database at version %d, binary expects %d)", ErrSchemaOutdated, current, want)
	case current > want:
		return fmt.Errorf("%w (database at version %d, binary knows up to %d)", ErrSchemaNewer, current, want)
	}
	return nil
}
