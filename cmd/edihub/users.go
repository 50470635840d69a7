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
	"golang.org/x/term"

	"github.com/edihub/edihub/internal/api"
	"github.com/edihub/edihub/internal/auth"
	"github.com/edihub/edihub/internal/postgres"
)

// userVerbs are the subcommands of edihub users. They work on the
// database directly (EDIHUB_DATABASE_URL) as an admin named
// "cli:osuser@host" in the audit log; a change holds on every replica at
// once (a disabled user's tokens stop working with the next request).
func userVerbs() []command {
	return []command{
		{name: "add", summary: "add a user (NAME) with a role (-role viewer|operator|admin) and a password: from -password-file, from standard input, or generated and printed once", flags: usersAddFlags},
		{name: "list", summary: "list the users: name, role, status, created, last login", flags: usersListFlags},
		{name: "disable", summary: "disable a user (NAME): its tokens and sessions stop working at once; nothing is deleted", flags: usersDisableFlags},
		{name: "enable", summary: "enable a disabled user (NAME) again: its tokens that are neither revoked nor expired work again", flags: usersEnableFlags},
		{name: "role", summary: "change a user's (NAME) role (-role): its tokens then act with at most the new role", flags: usersRoleFlags},
		{name: "passwd", summary: "set a user's (NAME) password, like add; its console sessions end", flags: usersPasswdFlags},
		{name: "token", summary: "make an API token for a user (NAME): -name, -role (at most the user's), -expires (90d); printed once, only its hash is stored", flags: usersTokenFlags},
		{name: "tokens", summary: "list a user's (NAME) API tokens: name, role, state, created, expires, last used", flags: usersTokensFlags},
		{name: "revoke", summary: "revoke a user's API token: edihub users revoke NAME TOKEN-NAME; it stops working at once", flags: usersRevokeFlags},
	}
}

// usersCLI is what every users subcommand opens: the database, as the
// command line's admin.
type usersCLI struct {
	url string
}

func (c *usersCLI) flags(fs *flagSet) {
	fs.String(&c.url, "database-url", "", "PostgreSQL connection URL, e.g. postgres://edihub:secret@db:5432/edihub?sslmode=verify-full")
}

// open opens the store (close it) and returns the users service and the
// caller the command acts as.
func (c *usersCLI) open(ctx context.Context) (*auth.Users, *postgres.Store, auth.Caller, error) {
	if c.url == "" {
		return nil, nil, auth.Caller{}, errors.New("no database: set EDIHUB_DATABASE_URL (or -database-url) to a PostgreSQL URL such as postgres://edihub:secret@localhost:5432/edihub")
	}
	store, err := openStore(ctx, zap.NewNop(), c.url, postgres.Options{MaxConns: 2}, false)
	if err != nil {
		return nil, nil, auth.Caller{}, err
	}
	return &auth.Users{Store: store, Now: time.Now}, store, cliCaller(), nil
}

// with opens the store, runs fn with the users service and the caller the
// command acts as, and closes the store.
func (c *usersCLI) with(ctx context.Context, fn func(*auth.Users, *postgres.Store, auth.Caller) error) error {
	users, store, caller, err := c.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	return fn(users, store, caller)
}

// wantArgs checks the positional arguments: want names them.
func wantArgs(env *environment, verb string, want ...string) error {
	if len(env.args) != len(want) {
		return fmt.Errorf("users %s: give %s: edihub users %s %s", verb, strings.Join(want, " and "), verb, strings.Join(want, " "))
	}
	return nil
}

// hint adds what to do to the errors a user can fix.
func hint(err error, user string) error {
	switch {
	case errors.Is(err, postgres.ErrUserNotFound):
		return fmt.Errorf("no user %q (edihub users list shows them): %w", user, postgres.ErrUserNotFound)
	case errors.Is(err, postgres.ErrUserExists):
		return fmt.Errorf("%w: names are unique whatever their case (edihub users list shows them)", err)
	case errors.Is(err, postgres.ErrTokenExists):
		return fmt.Errorf("%w (edihub users tokens %s lists them)", err, user)
	case errors.Is(err, postgres.ErrTokenNotFound):
		return fmt.Errorf("%w: edihub users tokens %s lists the tokens and their state", err, user)
	}
	return err
}

// passwordFlag defines -password-file.
func passwordFlag(fs *flagSet, p *string) {
	fs.ActionString(p, "password-file", "", "file holding the password (its first line); else: standard input, or on a terminal generated and printed once")
}

// password reads the password from file, else from standard input when it
// is not a terminal; otherwise it generates one (generated is then true).
func password(env *environment, file string) (pw string, generated bool, err error) {
	var src io.Reader
	what := "standard input"
	switch {
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", false, fmt.Errorf("password file: %w", err)
		}
		defer f.Close()
		src, what = f, file
	case env.stdin != nil && !isTerminal(env.stdin):
		src = env.stdin
	default:
		return auth.GeneratePassword(), true, nil
	}
	b, err := io.ReadAll(io.LimitReader(src, auth.MaxPasswordLength+2))
	if err != nil {
		return "", false, fmt.Errorf("read the password from %s: %w", what, err)
	}
	pw, _, _ = strings.Cut(string(b), "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return "", false, fmt.Errorf("no password in %s: write one there, give -password-file FILE, or run on a terminal to have one generated", what)
	}
	return pw, false, nil
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func usersAddFlags(fs *flagSet) func(context.Context, *environment) error {
	var c usersCLI
	var roleName, file string
	c.flags(fs)
	fs.ActionString(&roleName, "role", "", "the user's role: viewer (reads, no payloads), operator (also sends, resends, payloads) or admin (all)")
	passwordFlag(fs, &file)
	return func(ctx context.Context, env *environment) error {
		if err := wantArgs(env, "add", "NAME"); err != nil {
			return err
		}
		role, err := auth.ParseRole(roleName)
		if err != nil {
			return fmt.Errorf("users add: -role: %w", err)
		}
		pw, generated, err := password(env, file)
		if err != nil {
			return err
		}
		return c.with(ctx, func(users *auth.Users, store *postgres.Store, caller auth.Caller) error {
			u, err := users.Add(ctx, caller, env.args[0], role, pw)
			if err != nil {
				return hint(err, env.args[0])
			}
			fmt.Fprintf(env.stdout, "added user %s (%s)\n", u.Name, u.Role)
			if generated {
				fmt.Fprintf(env.stdout, "password (shown once, store it now): %s\n", pw)
			}
			fmt.Fprintf(env.stdout, "API token for it: edihub users token %s -name NAME\n", u.Name)
			return nil
		})
	}
}

func usersListFlags(fs *flagSet) func(context.Context, *environment) error {
	var c usersCLI
	c.flags(fs)
	return func(ctx context.Context, env *environment) error {
		if err := wantArgs(env, "list"); err != nil {
			return err
		}
		return c.with(ctx, func(users *auth.Users, store *postgres.Store, caller auth.Caller) error {
			us, err := users.List(ctx, caller)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tROLE\tSTATUS\tCREATED\tBY\tLAST LOGIN")
			for _, u := range us {
				status := "active"
				if u.DisabledAt != nil {
					status = "disabled since " + stamp(*u.DisabledAt)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", u.Name, u.Role, status, stamp(u.CreatedAt), u.CreatedBy, stampOr(u.LastLoginAt, "never"))
			}
			return tw.Flush()
		})
	}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func stampOr(t *time.Time, none string) string {
	if t == nil {
		return none
	}
	return stamp(*t)
}

func usersDisableFlags(fs *flagSet) func(context.Context, *environment) error {
	return usersSetDisabled(fs, "disable", true)
}

func usersEnableFlags(fs *flagSet) func(context.Context, *environment) error {
	return usersSetDisabled(fs, "enable", false)
}

func usersSetDisabled(fs *flagSet, verb string, disabled bool) func(context.Context, *environment) error {
	var c usersCLI
	c.flags(fs)
	return func(ctx context.Context, env *environment) error {
		if err := wantArgs(env, verb, "NAME"); err != nil {
			return err
		}
		return c.with(ctx, func(users *auth.Users, store *postgres.Store, caller auth.Caller) error {
			u, err := users.SetDisabled(ctx, caller, env.args[0], disabled)
			if err != nil {
				return hint(err, env.args[0])
			}
			if disabled {
				fmt.Fprintf(env.stdout, "disabled %s: its API tokens and console sessions no longer work (edihub users enable %s undoes it)\n", u.Name, u.Name)
			} else {
				fmt.Fprintf(env.stdout, "enabled %s: it can sign in again, and its tokens that are neither revoked nor expired work again\n", u.Name)
			}
			return nil
		})
	}
}

func usersRoleFlags(fs *flagSet) func(context.Context, *environment) error {
	var c usersCLI
	var roleName string
	c.flags(fs)
	fs.ActionString(&roleName, "role", "", "the user's new role: viewer, operator or admin")
	return func(ctx context.Context, env *environment) error {
		if err := wantArgs(env, "role", "NAME"); err != nil {
			return err
		}
		role, err := auth.ParseRole(roleName)
		if err != nil {
			return fmt.Errorf("users role: -role: %w", err)
		}
		return c.with(ctx, func(users *auth.Users, store *postgres.Store, caller auth.Caller) error {
			u, err := users.SetRole(ctx, caller, env.args[0], role)
			if err != nil {
				return hint(err, env.args[0])
			}
			fmt.Fprintf(env.stdout, "%s is now %s; its tokens act with at most this role\n", u.Name, u.Role)
			return nil
		})
	}
}

func usersPasswdFlags(fs *flagSet) func(context.Context, *environment) error {
	var c usersCLI
	var file string
	c.flags(fs)
	passwordFlag(fs, &file)
	return func(ctx context.Context, env *environment) error {
		if err := wantArgs(env, "passwd", "NAME"); err != nil {
			return err
		}
		pw, generated, err := password(env, file)
		if err != nil {
			return err
		}
		return c.with(ctx, func(users *auth.Users, store *postgres.Store, caller auth.Caller) error {
			u, err := users.SetPassword(ctx, caller, env.args[0], pw)
			if err != nil {
				return hint(err, env.args[0])
			}
			fmt.Fprintf(env.stdout, "password of %s set; its console sessions ended\n", u.Name)
			if generated {
				fmt.Fprintf(env.stdout, "password (shown once, store it now): %s\n", pw)
			}
			return nil
		})
	}
}

func usersTokenFlags(fs *flagSet) func(context.Context, *environment) error {
	var c usersCLI
	var name, roleName, expires string
	c.flags(fs)
	fs.ActionString(&name, "name", "", "the token's name among the user's tokens, such as ci or erp (letters, digits, . _ - @)")
	fs.ActionString(&roleName, "role", "", "the token's role: viewer, operator or admin, at most the user's; default: the user's")
	fs.ActionString(&expires, "expires", "", "how long the token lasts, in days (90d) or as a duration (36h); default: until revoked")
	return func(ctx context.Context, env *environment) error {
		if err := wantArgs(env, "token", "NAME"); err != nil {
			return err
		}
		if name == "" {
			return errors.New("users token: give the token a name: edihub users token NAME -name ci")
		}
		tr := auth.TokenRequest{Name: name}
		if roleName != "" {
			role, err := auth.ParseRole(roleName)
			if err != nil {
				return fmt.Errorf("users token: -role: %w", err)
			}
			tr.Role = role
		}
		if expires != "" {
			d, err := auth.ParseLifetime(expires)
			if err != nil {
				return fmt.Errorf("users token: -expires: %w", err)
			}
			at := time.Now().Add(d)
			tr.ExpiresAt = &at
		}
		return c.with(ctx, func(users *auth.Users, store *postgres.Store, caller auth.Caller) error {
			tok, t, err := users.CreateToken(ctx, caller, env.args[0], tr)
			if err != nil {
				return hint(err, env.args[0])
			}
			// The token alone on standard output, for TOKEN=$(edihub users token ...).
			fmt.Fprintln(env.stdout, tok)
			fmt.Fprintf(env.stderr, "token %s of %s, role %s, expires %s: shown once, only its hash is stored; send it as Authorization: Bearer <token>\n",
				t.Name, env.args[0], t.Role, stampOr(t.ExpiresAt, "never"))
			return nil
		})
	}
}

func usersTokensFlags(fs *flagSet) func(context.Context, *environment) error {
	var c usersCLI
	c.flags(fs)
	return func(ctx context.Context, env *environment) error {
		if err := wantArgs(env, "tokens", "NAME"); err != nil {
			return err
		}
		return c.with(ctx, func(users *auth.Users, store *postgres.Store, caller auth.Caller) error {
			ts, err := users.Tokens(ctx, caller, env.args[0])
			if err != nil {
				return hint(err, env.args[0])
			}
			now := time.Now()
			tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tROLE\tSTATE\tCREATED\tBY\tEXPIRES\tLAST USED")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.Name, t.Role, api.TokenState(t, now), stamp(t.CreatedAt), t.CreatedBy,
					stampOr(t.ExpiresAt, "never"), stampOr(t.LastUsedAt, "never"))
			}
			return tw.Flush()
		})
	}
}

func usersRevokeFlags(fs *flagSet) func(context.Context, *environment) error {
	var c usersCLI
	c.flags(fs)
	return func(ctx context.Context, env *environment) error {
		if err := wantArgs(env, "revoke", "NAME", "TOKEN-NAME"); err != nil {
			return err
		}
		return c.with(ctx, func(users *auth.Users, store *postgres.Store, caller auth.Caller) error {
			t, err := users.RevokeToken(ctx, caller, env.args[0], env.args[1])
			if err != nil {
				return hint(err, env.args[0])
			}
			fmt.Fprintf(env.stdout, "revoked token %s of %s: it no longer works\n", t.Name, env.args[0])
			return nil
		})
	}
}
