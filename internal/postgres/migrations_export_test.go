package postgres

import (
	"context"
	"io/fs"
)

// MigrationCount is how many migrations the binary embeds. Versions have
// gaps (numbers are reserved per workstream), so it differs from the
// highest version.
func MigrationCount() int {
	files, err := fs.Glob(migrations(), "*.sql")
	if err != nil {
		panic(err)
	}
	return len(files)
}

// MigrateTo applies the migrations up to version v only: a database as
// an earlier release left it, for tests of a migration on existing data.
func (s *Store) MigrateTo(ctx context.Context, v int64) error {
	db := s.sqlDB()
	defer db.Close()
	p, err := newProvider(db)
	if err != nil {
		return err
	}
	_, err = p.UpTo(ctx, v)
	return err
}

// MigrateDownTo rolls the migrations after version v back.
func (s *Store) MigrateDownTo(ctx context.Context, v int64) error {
	db := s.sqlDB()
	defer db.Close()
	p, err := newProvider(db)
	if err != nil {
		return err
	}
	_, err = p.DownTo(ctx, v)
	return err
}
