package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/edihub/edihub/internal/config"
	"github.com/edihub/edihub/internal/partners"
	"github.com/edihub/edihub/internal/postgres"
	"github.com/edihub/edihub/internal/probe"
)

// partnerVerbs are the subcommands of edihub partners. They work on the
// database directly (EDIHUB_DATABASE_URL), like send, and check every
// profile against the station file (EDIHUB_CONFIG) as the replicas do;
// every replica serves a change within seconds.
func partnerVerbs() []command {
	return []command{
		{name: "apply", summary: "create and update the partners of a YAML file (-f) in one transaction; -dry-run checks and shows what would change", flags: partnersApplyFlags},
		{name: "diff", summary: "show what applying a YAML file (-f) would change, key by key", flags: partnersDiffFlags},
		{name: "get", summary: "list the stored partners, or print one partner's profile (NAME)", flags: partnersGetFlags},
		{name: "export", summary: "print the stored partners (or those named) as a partners file that apply takes back", flags: partnersExportFlags},
		{name: "delete", summary: "delete a partner (NAME); -version guards against a change made meanwhile", flags: partnersDeleteFlags},
		{name: "history", summary: "list the changes of a partner (NAME), or of every partner: who, when, what", flags: partnersHistoryFlags},
		{name: "restore", summary: "make an earlier version (-version) of a partner (NAME) the current one", flags: partnersRestoreFlags},
		{name: "test", summary: "send a small signed and encrypted test document to a partner (NAME) and report each step: DNS, TLS, HTTP, MDN, signature, MIC", flags: partnersTestFlags},
		{name: "profiles", summary: "list the partner profiles (presets for known hubs' quirks) a partner entry can name with profile:", flags: partnersProfilesFlags},
	}
}

// partnerCLI is what every partners subcommand opens: the station file and
// the database, and the service that changes partners.
type partnerCLI struct {
	db stationDB
}

func (c *partnerCLI) flags(fs *flagSet) { c.db.flags(fs) }

// open checks the settings, loads the station file and opens the store.
func (c *partnerCLI) open(ctx context.Context) (*partners.Service, *postgres.Store, error) {
	if err := c.db.check(); err != nil {
		return nil, nil, err
	}
	base, err := config.Load(c.db.configPath, config.Options{Now: time.Now, SecretsDir: c.db.secretsDir})
	if err != nil {
		return nil, nil, err
	}
	store, err := openStore(ctx, zap.NewNop(), c.db.url, postgres.Options{MaxConns: 2}, false)
	if err != nil {
		return nil, nil, err
	}
	return &partners.Service{Store: store, Base: func() *config.File { return base }, SecretsOptional: true, Now: time.Now}, store, nil
}

// with opens what the subcommand needs, runs fn with it and closes it.
func (c *partnerCLI) with(ctx context.Context, fn func(*partners.Service, *postgres.Store) error) error {
	svc, store, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	return fn(svc, store)
}

// osUser is the operating system user and host: "root@host".
func osUser() string {
	name := "unknown"
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// fileFlag defines -f, the partners file (not bound to a variable).
func fileFlag(fs *flagSet, p *string) {
	fs.ActionString(p, "f", "", "the partners file: a YAML file with a partners: list (a whole edihub.yaml works too; its station is ignored)")
}

// plan reads path and plans it against the stored partners.
func plan(ctx context.Context, svc *partners.Service, path string, prune bool) (partners.Plan, error) {
	if path == "" {
		return partners.Plan{}, errors.New("no partners file: give -f FILE")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return partners.Plan{}, err
	}
	return svc.Plan(ctx, data, filepath.Dir(path), path, prune)
}

// printPlan writes a plan for people: one block per partner, its diff
// indented, then the warnings.
func printPlan(w io.Writer, p partners.Plan) {
	for _, c := range p.Changes {
		if c.Op == partners.OpUnchanged {
			fmt.Fprintf(w, "%s: unchanged (version %d)\n", c.AS2ID, c.From)
			continue
		}
		if c.From > 0 {
			fmt.Fprintf(w, "%s: %s (from version %d)\n", c.AS2ID, c.Op, c.From)
		} else {
			fmt.Fprintf(w, "%s: %s\n", c.AS2ID, c.Op)
		}
		for _, line := range strings.Split(strings.TrimRight(c.Diff, "\n"), "\n") {
			if line != "" {
				fmt.Fprintf(w, "    %s\n", line)
			}
		}
	}
	for _, warn := range p.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
}

func partnersApplyFlags(fs *flagSet) func(context.Context, *environment) error {
	var c partnerCLI
	var file string
	var dryRun, prune bool
	c.flags(fs)
	fileFlag(fs, &file)
	fs.ActionBool(&dryRun, "dry-run", false, "check the file and show what would change, without changing anything")
	fs.ActionBool(&prune, "prune", false, "also delete the stored partners the file does not list (the file is the whole set)")
	return func(ctx context.Context, env *environment) error {
		return c.with(ctx, func(svc *partners.Service, store *postgres.Store) error {
			p, err := plan(ctx, svc, file, prune)
			if err != nil {
				return err
			}
			printPlan(env.stdout, p)
			if dryRun {
				fmt.Fprintf(env.stdout, "dry run: %d change(s) checked, nothing applied\n", p.Changed())
				return nil
			}
			if p.Changed() == 0 {
				fmt.Fprintln(env.stdout, "nothing to apply")
				return nil
			}
			rev, err := svc.Apply(ctx, cliCaller().Actor(), p)
			if err != nil {
				return fmt.Errorf("apply (nothing was applied): %w", err)
			}
			for _, c := range p.Changes {
				if c.Op != partners.OpUnchanged {
					audit(ctx, store, env.stderr, "partner."+c.Op, c.AS2ID, map[string]any{"from_version": c.From, "revision": rev, "file": file})
				}
			}
			fmt.Fprintf(env.stdout, "applied %d change(s): partner set revision %d; every replica serves it within seconds (edihub partners get shows each replica's revision)\n", p.Changed(), rev)
			return nil
		})
	}
}

func partnersDiffFlags(fs *flagSet) func(context.Context, *environment) error {
	var c partnerCLI
	var file string
	var prune bool
	c.flags(fs)
	fileFlag(fs, &file)
	fs.ActionBool(&prune, "prune", false, "also show the stored partners the file does not list as deleted")
	return func(ctx context.Context, env *environment) error {
		return c.with(ctx, func(svc *partners.Service, store *postgres.Store) error {
			p, err := plan(ctx, svc, file, prune)
			if err != nil {
				return err
			}
			printPlan(env.stdout, p)
			fmt.Fprintf(env.stdout, "%d change(s)\n", p.Changed())
			return nil
		})
	}
}

func partnersGetFlags(fs *flagSet) func(context.Context, *environment) error {
	var c partnerCLI
	c.flags(fs)
	return func(ctx context.Context, env *environment) error {
		return c.with(ctx, func(_ *partners.Service, store *postgres.Store) error {
			if len(env.args) == 1 {
				sp, err := store.Partner(ctx, env.args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(env.stdout, "# %s version %d (revision %d), changed %s by %s\n%s", sp.AS2ID, sp.Version, sp.Revision,
					sp.UpdatedAt.UTC().Format(time.RFC3339), sp.UpdatedBy, sp.Spec)
				return nil
			}
			if len(env.args) > 1 {
				return errors.New("partners get: give one partner's AS2 ID, or none for the list")
			}
			set, err := store.Partners(ctx)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "AS2 ID\tVERSION\tURL\tCHANGED\tBY")
			for _, sp := range set.Partners {
				spec, err := config.DecodeSpec(sp.AS2ID, sp.Spec)
				if err != nil {
					return err
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", sp.AS2ID, sp.Version, redactURL(spec.URL), sp.UpdatedAt.UTC().Format(time.RFC3339), sp.UpdatedBy)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			served, err := store.ServedRevisions(ctx, partners.StoppedAfter)
			if err != nil {
				return err
			}
			fmt.Fprintf(env.stdout, "\npartner set revision %d\n", set.Revision)
			for _, r := range served {
				lag := ""
				if r.Revision != set.Revision {
					lag = "  (behind)"
				}
				fmt.Fprintf(env.stdout, "  replica %s serves revision %d since %s%s\n", r.Identity, r.Revision, r.AppliedAt.UTC().Format(time.RFC3339), lag)
			}
			return nil
		})
	}
}

func partnersExportFlags(fs *flagSet) func(context.Context, *environment) error {
	var c partnerCLI
	c.flags(fs)
	return func(ctx context.Context, env *environment) error {
		return c.with(ctx, func(_ *partners.Service, store *postgres.Store) error {
			set, err := store.Partners(ctx)
			if err != nil {
				return err
			}
			want := map[string]bool{}
			for _, a := range env.args {
				want[a] = true
			}
			fmt.Fprintf(env.stdout, "# edihub partners, revision %d; apply with: edihub partners apply -f FILE\npartners:\n", set.Revision)
			found := 0
			for _, sp := range set.Partners {
				if len(want) > 0 && !want[sp.AS2ID] {
					continue
				}
				found++
				fmt.Fprintf(env.stdout, "%s", config.EntryDoc(sp.Spec)[len("partners:\n"):])
			}
			if found < len(want) {
				return fmt.Errorf("partners export: %d of the %d partners named are not stored", len(want)-found, len(want))
			}
			return nil
		})
	}
}

func partnersDeleteFlags(fs *flagSet) func(context.Context, *environment) error {
	var c partnerCLI
	var version int64
	c.flags(fs)
	fs.ActionInt64(&version, "version", postgres.AnyVersion, "the version you read (edihub partners get NAME): refused if the partner changed since; default: any")
	return func(ctx context.Context, env *environment) error {
		if len(env.args) != 1 {
			return errors.New("partners delete: give the partner's AS2 ID")
		}
		return c.with(ctx, func(svc *partners.Service, store *postgres.Store) error {
			rev, err := svc.Delete(ctx, cliCaller().Actor(), env.args[0], version)
			if err != nil {
				return err
			}
			audit(ctx, store, env.stderr, "partner.delete", env.args[0], map[string]any{"revision": rev})
			fmt.Fprintf(env.stdout, "deleted %s: partner set revision %d\n", env.args[0], rev)
			return nil
		})
	}
}

func partnersHistoryFlags(fs *flagSet) func(context.Context, *environment) error {
	var c partnerCLI
	var limit int
	c.flags(fs)
	fs.ActionInt(&limit, "limit", 50, "how many changes to list, newest first")
	return func(ctx context.Context, env *environment) error {
		if len(env.args) > 1 {
			return errors.New("partners history: give one partner's AS2 ID, or none for every partner")
		}
		return c.with(ctx, func(_ *partners.Service, store *postgres.Store) error {
			name := ""
			if len(env.args) == 1 {
				name = env.args[0]
			}
			hist, err := store.PartnerHistory(ctx, name, limit)
			if err != nil {
				return err
			}
			for _, e := range hist {
				fmt.Fprintf(env.stdout, "revision %d  %s  %s version %d  %s  by %s\n", e.Revision, e.ChangedAt.UTC().Format(time.RFC3339), e.AS2ID, e.Version, e.Op, e.Actor)
				for _, line := range strings.Split(strings.TrimRight(e.Diff, "\n"), "\n") {
					if line != "" {
						fmt.Fprintf(env.stdout, "    %s\n", line)
					}
				}
			}
			return nil
		})
	}
}

func partnersRestoreFlags(fs *flagSet) func(context.Context, *environment) error {
	var c partnerCLI
	var version int64
	c.flags(fs)
	fs.ActionInt64(&version, "version", 0, "the version to bring back (edihub partners history NAME lists them)")
	return func(ctx context.Context, env *environment) error {
		if len(env.args) != 1 || version <= 0 {
			return errors.New("partners restore: give -version N and the partner's AS2 ID: edihub partners restore -version 3 NAME")
		}
		return c.with(ctx, func(svc *partners.Service, store *postgres.Store) error {
			sp, err := svc.Restore(ctx, cliCaller().Actor(), env.args[0], version, postgres.AnyVersion)
			if err != nil {
				return err
			}
			audit(ctx, store, env.stderr, "partner.restore", sp.AS2ID, map[string]any{"from_version": version, "version": sp.Version, "revision": sp.Revision})
			fmt.Fprintf(env.stdout, "restored %s version %d as version %d (revision %d)\n", sp.AS2ID, version, sp.Version, sp.Revision)
			return nil
		})
	}
}

func partnersTestFlags(fs *flagSet) func(context.Context, *environment) error {
	var c partnerCLI
	var asJSON bool
	c.flags(fs)
	fs.ActionBool(&asJSON, "json", false, "print the report as JSON (the API's answer) instead of text")
	return func(ctx context.Context, env *environment) error {
		if len(env.args) != 1 {
			return errors.New("partners test: give the partner's AS2 ID: edihub partners test NAME")
		}
		return c.with(ctx, func(svc *partners.Service, store *postgres.Store) error {
			cfg, err := partners.Snapshot(ctx, store, svc.Base(), time.Now())
			if err != nil {
				return err
			}
			p, ok := cfg.Partner(env.args[0])
			if !ok {
				return fmt.Errorf("partners test: no partner %q (AS2 IDs are case-sensitive; edihub partners get lists them)", env.args[0])
			}
			r := probe.Run(ctx, probe.Options{Station: *cfg.StationOf(p), Partner: p})
			audit(ctx, store, env.stderr, "partner.test", env.args[0], map[string]any{"ok": r.OK})
			if asJSON {
				err = printJSON(env.stdout, r)
			} else {
				err = r.WriteText(env.stdout)
			}
			if err != nil {
				return err
			}
			if !r.OK {
				return errors.New("partners test: the partner test failed (see the step marked FAIL and its fix)")
			}
			return nil
		})
	}
}

func partnersProfilesFlags(fs *flagSet) func(context.Context, *environment) error {
	return func(_ context.Context, env *environment) error {
		for _, pr := range config.Profiles() {
			fmt.Fprintf(env.stdout, "%s: %s\n", pr.Name, pr.Summary)
			for _, k := range sortedKeys(pr.Settings) {
				fmt.Fprintf(env.stdout, "    %s: %s\n", k, pr.Settings[k])
			}
			for _, k := range pr.Requires {
				fmt.Fprintf(env.stdout, "    requires: %s\n", k)
			}
			for _, src := range pr.Sources {
				fmt.Fprintf(env.stdout, "    source: %s\n", src)
			}
		}
		return nil
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
