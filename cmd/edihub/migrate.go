package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/edihub/edihub/internal/postgres"
)

func migrateFlags(fs *flagSet) func(context.Context, *environment) error {
	var url string
	fs.String(&url, "database-url", "", "PostgreSQL connection URL, e.g. postgres://edihub:secret@db:5432/edihub?sslmode=verify-full")
	return func(ctx context.Context, env *environment) error {
		if url == "" {
			return errors.New("no database: set EDIHUB_DATABASE_URL (or -database-url) to a PostgreSQL URL such as postgres://edihub:secret@localhost:5432/edihub")
		}
		store, err := postgres.Open(ctx, url, postgres.Options{MaxConns: 2})
		if err != nil {
			return fmt.Errorf("%w (check EDIHUB_DATABASE_URL)", err)
		}
		defer store.Close()
		applied, err := store.Migrate(ctx)
		if err != nil {
			return err
		}
		for _, m := range applied {
			fmt.Fprintf(env.stdout, "applied %s in %s\n", m.Name, m.Duration.Round(1e6))
		}
		current, _, err := store.SchemaVersion(ctx)
		if err != nil {
			return err
		}
		if len(applied) == 0 {
			fmt.Fprintf(env.stdout, "schema up to date at version %d\n", current)
		} else {
			fmt.Fprintf(env.stdout, "schema now at version %d\n", current)
		}
		return nil
	}
}
