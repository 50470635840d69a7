package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/connectors"
	"github.com/edihub/edihub/internal/postgres"
)

// connectorVerbs are the subcommands of edihub connectors. They work on
// the database directly (EDIHUB_DATABASE_URL), like edihub partners;
// every replica serves a change within seconds.
func connectorVerbs() []command {
	return []command{
		{name: "apply", summary: "store a connectors document (-f) as the next revision; -dry-run checks it and shows what would change", flags: connectorsApplyFlags},
		{name: "get", summary: "show the stored connectors and the revision each replica serves; -o yaml prints the document", flags: connectorsGetFlags},
		{name: "history", summary: "list the revisions of the connectors document: who, when, what changed", flags: connectorsHistoryFlags},
		{name: "restore", summary: "make an earlier revision (-revision) of the connectors document the current one", flags: connectorsRestoreFlags},
	}
}

// connectorsCLI is what every connectors subcommand opens.
type connectorsCLI struct {
	url, secretsDir, foldersDir string
}

func (c *connectorsCLI) flags(fs *flagSet) {
	fs.String(&c.url, "database-url", "", "PostgreSQL connection URL, e.g. postgres://edihub:secret@db:5432/edihub?sslmode=verify-full")
	secretsDirFlag(fs, &c.secretsDir)
	foldersDirFlag(fs, &c.foldersDir)
}

// foldersDirFlag defines -folders-dir, the directory folder connectors'
// paths are relative to.
func foldersDirFlag(fs *flagSet, p *string) {
	fs.String(p, "folders-dir", "", "directory the folder connectors' paths are relative to (a mounted volume); empty: folder connectors are refused")
}

// checkFoldersDir says what is wrong with a folders directory that is set
// but is no directory.
func checkFoldersDir(dir string) error {
	if dir == "" {
		return nil
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("EDIHUB_FOLDERS_DIR (-folders-dir) %q is not a directory: set it to the directory the connector folders are mounted under, or leave it empty when no connector is a folder", dir)
	}
	return nil
}

// with opens the store and the service (checking documents away from the
// replicas: a secret or folder this machine lacks is a warning), runs fn
// and closes the store.
func (c *connectorsCLI) with(ctx context.Context, fn func(*connectors.Service, *postgres.Store) error) error {
	if c.url == "" {
		return errors.New("no database: set EDIHUB_DATABASE_URL (or -database-url) to a PostgreSQL URL such as postgres://edihub:secret@localhost:5432/edihub")
	}
	if err := checkSecretsDir(c.secretsDir); err != nil {
		return err
	}
	if err := checkFoldersDir(c.foldersDir); err != nil {
		return err
	}
	store, err := openStore(ctx, zap.NewNop(), c.url, postgres.Options{MaxConns: 2}, false)
	if err != nil {
		return err
	}
	defer store.Close()
	svc := &connectors.Service{Store: store, Options: config.ConnectorsOptions{SecretsDir: c.secretsDir, FoldersDir: c.foldersDir, Away: true}}
	return fn(svc, store)
}

// printConnectorsPlan writes a plan for people, one change a line, then
// the warnings.
func printConnectorsPlan(w io.Writer, p connectors.Plan) {
	for _, c := range p.Changes {
		fmt.Fprintf(w, "%s\n", c)
	}
	if len(p.Changes) == 0 && p.Layout {
		fmt.Fprintln(w, "comments or layout only")
	}
	for _, warn := range p.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}

func connectorsApplyFlags(fs *flagSet) func(context.Context, *environment) error {
	var c connectorsCLI
	var file string
	var dryRun bool
	var expect int64
	c.flags(fs)
	fs.ActionString(&file, "f", "", "the connectors document: a YAML file with destinations, sources and routes")
	fs.ActionBool(&dryRun, "dry-run", false, "check the document and show what would change, without changing anything")
	fs.ActionInt64(&expect, "revision", postgres.AnyRevision, "the revision you read (edihub connectors get): refused if the document changed since; default: the one read now")
	return func(ctx context.Context, env *environment) error {
		if file == "" {
			return errors.New("connectors apply: no document: give -f FILE")
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("connectors apply: %w", err)
		}
		return c.with(ctx, func(svc *connectors.Service, _ *postgres.Store) error {
			p, err := svc.Plan(ctx, data, file)
			if err != nil {
				return err
			}
			printConnectorsPlan(env.stdout, p)
			switch {
			case dryRun:
				fmt.Fprintf(env.stdout, "dry run: %d change(s) against revision %d checked, nothing applied\n", len(p.Changes), p.From)
				return nil
			case !p.Changed():
				fmt.Fprintf(env.stdout, "nothing to apply: revision %d is this document\n", p.From)
				return nil
			}
			rev, err := svc.Apply(ctx, p, expect, postgres.AuditEntry{Actor: cliCaller().Actor(), Detail: map[string]any{"file": file}})
			if err != nil {
				return fmt.Errorf("connectors apply, nothing was applied: %w", err)
			}
			fmt.Fprintf(env.stdout, "applied: connectors revision %d; every replica serves it within seconds (edihub connectors get shows each replica's revision)\n", rev)
			return nil
		})
	}
}

func connectorsGetFlags(fs *flagSet) func(context.Context, *environment) error {
	var c connectorsCLI
	var output string
	c.flags(fs)
	fs.ActionString(&output, "o", "", "yaml prints the document as stored, json with its defaults filled in; empty: a summary")
	return func(ctx context.Context, env *environment) error {
		if output != "" && output != "yaml" && output != "json" {
			return fmt.Errorf("connectors get: -o %q: want yaml, json, or nothing for a summary", output)
		}
		return c.with(ctx, func(_ *connectors.Service, store *postgres.Store) error {
			cur, err := store.Connectors(ctx)
			if err != nil {
				return err
			}
			if output == "yaml" {
				_, err := io.WriteString(env.stdout, cur.Document)
				return err
			}
			doc, err := config.ParseConnectors([]byte(cur.Document), config.ConnectorsOptions{Name: fmt.Sprintf("revision %d", cur.Revision), Away: true})
			if err != nil {
				return err
			}
			if output == "json" {
				return printJSON(env.stdout, doc)
			}
			return printConnectors(ctx, env.stdout, store, cur, doc)
		})
	}
}

// printConnectors writes the summary of edihub connectors get.
func printConnectors(ctx context.Context, w io.Writer, store *postgres.Store, cur postgres.ConnectorsRevision, doc *config.Connectors) error {
	if cur.Revision == 0 {
		fmt.Fprintln(w, "no connectors document stored yet: edihub connectors apply -f FILE stores one")
	} else {
		fmt.Fprintf(w, "connectors revision %d, changed %s by %s\n\n", cur.Revision, cur.CreatedAt.UTC().Format(time.RFC3339), cur.Actor)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tTYPE\tWHERE")
	for _, d := range doc.Destinations {
		fmt.Fprintf(tw, "destination\t%s\t%s\t%s\n", d.Name, d.Type, where(d.Folder, d.SFTP, d.S3, d.HTTP))
	}
	for _, s := range doc.Sources {
		fmt.Fprintf(tw, "source\t%s\t%s\t%s\n", s.Name, s.Type, where(s.Folder, s.SFTP, s.S3, nil))
	}
	for _, r := range doc.Routes {
		to := strings.Join(r.To, ", ")
		if r.Criteria.Direction == config.DirectionOutbound {
			to = r.Criteria.Source + " → " + r.Partner
		}
		fmt.Fprintf(tw, "route\t%s\t%s\t%s\n", r.Name, r.Criteria.Direction, to)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	served, err := store.ServedConnectors(ctx, connectors.StoppedAfter)
	if err != nil {
		return err
	}
	for _, r := range served {
		lag := ""
		if r.Revision != cur.Revision {
			lag = "  (behind)"
		}
		fmt.Fprintf(w, "  replica %s serves revision %d since %s%s\n", r.Identity, r.Revision, r.AppliedAt.UTC().Format(time.RFC3339), lag)
	}
	return nil
}

// where says where a connector reads or writes, without secrets.
func where(f *config.FolderSpec, s *config.SFTPSpec, b *config.S3Spec, h *config.HTTPSpec) string {
	switch {
	case f != nil:
		return f.Path
	case s != nil:
		return fmt.Sprintf("sftp://%s@%s:%d/%s", s.User, s.Host, s.Port, strings.TrimPrefix(s.Path, "/"))
	case b != nil:
		return "s3://" + b.Bucket + "/" + b.Prefix
	case h != nil:
		return redactURL(h.URL)
	}
	return ""
}

func connectorsHistoryFlags(fs *flagSet) func(context.Context, *environment) error {
	var c connectorsCLI
	var limit int
	c.flags(fs)
	fs.ActionInt(&limit, "limit", 50, "how many revisions to list, newest first")
	return func(ctx context.Context, env *environment) error {
		return c.with(ctx, func(svc *connectors.Service, _ *postgres.Store) error {
			hist, err := svc.History(ctx, limit, 0)
			if err != nil {
				return err
			}
			for _, e := range hist {
				restored := ""
				if e.RestoredFrom > 0 {
					restored = fmt.Sprintf("  (restored from revision %d)", e.RestoredFrom)
				}
				fmt.Fprintf(env.stdout, "revision %d  %s  by %s%s\n", e.Revision, e.CreatedAt.UTC().Format(time.RFC3339), e.Actor, restored)
				for _, line := range strings.Split(strings.TrimRight(e.Summary, "\n"), "\n") {
					if line != "" {
						fmt.Fprintf(env.stdout, "    %s\n", line)
					}
				}
			}
			return nil
		})
	}
}

func connectorsRestoreFlags(fs *flagSet) func(context.Context, *environment) error {
	var c connectorsCLI
	var revision int64
	c.flags(fs)
	fs.ActionInt64(&revision, "revision", 0, "the revision to bring back (edihub connectors history lists them)")
	return func(ctx context.Context, env *environment) error {
		if revision <= 0 {
			return errors.New("connectors restore: give -revision N: edihub connectors restore -revision 3")
		}
		return c.with(ctx, func(svc *connectors.Service, _ *postgres.Store) error {
			rev, p, err := svc.Restore(ctx, revision, postgres.AnyRevision, postgres.AuditEntry{Actor: cliCaller().Actor()})
			if err != nil {
				return fmt.Errorf("connectors restore: %w", err)
			}
			printConnectorsPlan(env.stdout, p)
			fmt.Fprintf(env.stdout, "restored revision %d as revision %d\n", revision, rev)
			return nil
		})
	}
}
