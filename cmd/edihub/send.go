package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/outbox"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/postgres"
)

// sendFlags defines edihub send: it queues a file for a partner directly in
// the database (EDIHUB_DATABASE_URL), so it works with no replica running;
// any replica's dispatcher sends it, woken by LISTEN/NOTIFY. It needs the
// configuration (EDIHUB_CONFIG) for the partner profile and the station's
// AS2 ID, like serve.
func sendFlags(fs *flagSet) func(context.Context, *environment) error {
	var db stationDB
	var partner, contentType, filename string
	db.flags(fs)
	fs.ActionString(&partner, "partner", "", "AS2 ID of the partner to send to, exactly as configured (case-sensitive)")
	fs.ActionString(&contentType, "content-type", "", "Content-Type of the document; default: from the EDI envelope (X12, EDIFACT), else application/octet-stream")
	fs.ActionString(&filename, "filename", "", "file name sent in Content-Disposition; default: the base name of FILE")
	return func(ctx context.Context, env *environment) error {
		if len(env.args) != 1 {
			return errors.New("send: want exactly one FILE argument after the flags: edihub send -partner ID [-content-type T] [-filename F] FILE")
		}
		if partner == "" {
			return errors.New("send: no partner: give -partner with the partner's AS2 ID")
		}
		if err := db.check(); err != nil {
			return err
		}
		path := env.args[0]
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		// A large file is stored from the file in pieces, never read
		// whole; a small one in one statement.
		doc := outbox.Document{Partner: partner, ContentType: contentType,
			Open: func() io.Reader { return io.NewSectionReader(f, 0, fi.Size()) }, Size: fi.Size()}
		if fi.Size() <= outbox.DefaultSpoolFromBytes {
			if doc.Payload, err = io.ReadAll(f); err != nil {
				return fmt.Errorf("send: %w", err)
			}
			doc.Open, doc.Size = nil, 0
		}
		if filename == "" {
			filename = filepath.Base(path)
		}
		cfg, store, err := db.open(ctx)
		if err != nil {
			return err
		}
		defer store.Close()
		q, err := outbox.NewQueue(outbox.QueueOptions{Store: store, Config: cfg})
		if err != nil {
			return err
		}
		doc.Filename = filename
		res, err := q.Enqueue(ctx, doc)
		if err != nil {
			return fmt.Errorf("send: %w", err)
		}
		audit(ctx, store, env.stderr, "message.send", strconv.FormatInt(res.ID, 10), map[string]any{
			"partner": partner, "message_id": res.MessageID, "filename": filename, "size": fi.Size()})
		// The API's answer to POST /api/v1/messages, encoded as the API
		// encodes it (httpserver.WriteJSON), so scripts can take either.
		return printJSON(env.stdout, api.Queued{
			ID: res.ID, MessageID: res.MessageID, Status: res.Status,
			Location: "/api/v1/messages/" + strconv.FormatInt(res.ID, 10),
		})
	}
}

// printJSON prints v as the API encodes its answers (httpserver.WriteJSON):
// indented, with <, > and & as they are.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// stationDB is what the one-shot subcommands working on a station's
// database (send, report) open: the database and the station's file.
type stationDB struct{ url, configPath, secretsDir string }

func (d *stationDB) flags(fs *flagSet) {
	fs.String(&d.url, "database-url", "", "PostgreSQL connection URL, e.g. postgres://edihub:secret@db:5432/edihub?sslmode=verify-full")
	fs.String(&d.configPath, "config", "", "path of the station and partner YAML file (see docs/configuration.md)")
	secretsDirFlag(fs, &d.secretsDir)
}

// secretsDirFlag defines -secrets-dir, the directory of the partner
// secrets (config.Options.SecretsDir).
func secretsDirFlag(fs *flagSet, p *string) {
	fs.String(p, "secrets-dir", "", "directory of the partner secrets (a mounted Kubernetes Secret); empty: partners may name no secrets")
}

// checkSecretsDir says what is wrong with a secrets directory that is set
// but is no directory.
func checkSecretsDir(dir string) error {
	if dir == "" {
		return nil
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("EDIHUB_SECRETS_DIR (-secrets-dir) %q is not a directory: set it to the directory the partner secrets are mounted in, or leave it empty when no partner names a secret", dir)
	}
	return nil
}

// check says which setting is missing, and how to set it.
func (d stationDB) check() error {
	if d.url == "" {
		return errors.New("no database: set EDIHUB_DATABASE_URL (or -database-url) to a PostgreSQL URL such as postgres://edihub:secret@localhost:5432/edihub")
	}
	if d.configPath == "" {
		return errors.New("no station configuration: set EDIHUB_CONFIG (or -config) to the path of the station and partner YAML file")
	}
	return checkSecretsDir(d.secretsDir)
}

// open loads the station's file and opens its database (close it); the
// partners are those stored in the database (see partners.Snapshot).
func (d stationDB) open(ctx context.Context) (*config.File, *postgres.Store, error) {
	cfg, err := config.Load(d.configPath, config.Options{Now: time.Now, SecretsDir: d.secretsDir})
	if err != nil {
		return nil, nil, err
	}
	store, err := openStore(ctx, zap.NewNop(), d.url, postgres.Options{MaxConns: 2}, false)
	if err != nil {
		return nil, nil, err
	}
	if cfg, err = partners.Snapshot(ctx, store, cfg, time.Now()); err != nil {
		store.Close()
		return nil, nil, err
	}
	return cfg, store, nil
}
