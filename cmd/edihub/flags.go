package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

var errHelp = errors.New("help requested")

// flagSet is a flag.FlagSet with two kinds of flags.
//
// A setting (String, Bool, Duration, Int64, Int) is how this hub is
// reached and run: a database URL, a file, an address, a limit. Its flag
// -foo-bar defaults to the environment variable EDIHUB_FOO_BAR (or a
// variable named explicitly); values from the environment are validated
// like flags, and a bad one is reported with the variable's name.
//
// An action flag (ActionString, ActionBool, ActionInt, ActionInt64) says
// what one invocation does: a file to apply, a date, an output format, a
// dry run, -send, -force. It has no variable: a value left in a shell
// must not change what the next command does (mail a finished day again).
// Every flag is one or the other; parse refuses a flag defined on the
// embedded flag.FlagSet directly.
type flagSet struct {
	*flag.FlagSet
	getenv  func(string) string
	envs    map[string][]string // flag name -> variables, first set wins
	order   []string
	actions []string // action flags, in the order defined
	stderr  io.Writer
	// args are the positional arguments, set by parse.
	args []string
}

func newFlagSet(name string, getenv func(string) string, stderr io.Writer) *flagSet {
	fs := &flagSet{
		FlagSet: flag.NewFlagSet("edihub "+name, flag.ContinueOnError),
		getenv:  getenv,
		envs:    map[string][]string{},
		stderr:  stderr,
	}
	fs.SetOutput(io.Discard)
	return fs
}

// envName is the variable a flag reads by default.
func envName(flagName string) string {
	return "EDIHUB_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func (fs *flagSet) bind(name string, extraEnv []string) {
	fs.envs[name] = append([]string{envName(name)}, extraEnv...)
	fs.order = append(fs.order, name)
}

func (fs *flagSet) String(p *string, name, def, usage string, extraEnv ...string) {
	fs.StringVar(p, name, def, usage)
	fs.bind(name, extraEnv)
}

func (fs *flagSet) Bool(p *bool, name string, def bool, usage string, extraEnv ...string) {
	fs.BoolVar(p, name, def, usage)
	fs.bind(name, extraEnv)
}

func (fs *flagSet) Duration(p *time.Duration, name string, def time.Duration, usage string, extraEnv ...string) {
	fs.DurationVar(p, name, def, usage)
	fs.bind(name, extraEnv)
}

func (fs *flagSet) Int64(p *int64, name string, def int64, usage string, extraEnv ...string) {
	fs.Int64Var(p, name, def, usage)
	fs.bind(name, extraEnv)
}

func (fs *flagSet) Int(p *int, name string, def int, usage string, extraEnv ...string) {
	fs.IntVar(p, name, def, usage)
	fs.bind(name, extraEnv)
}

// ActionString defines an action flag: no variable sets it.
func (fs *flagSet) ActionString(p *string, name, def, usage string) {
	fs.StringVar(p, name, def, usage)
	fs.actions = append(fs.actions, name)
}

// ActionBool defines an action flag: no variable sets it.
func (fs *flagSet) ActionBool(p *bool, name string, def bool, usage string) {
	fs.BoolVar(p, name, def, usage)
	fs.actions = append(fs.actions, name)
}

// ActionInt defines an action flag: no variable sets it.
func (fs *flagSet) ActionInt(p *int, name string, def int, usage string) {
	fs.IntVar(p, name, def, usage)
	fs.actions = append(fs.actions, name)
}

// ActionInt64 defines an action flag: no variable sets it.
func (fs *flagSet) ActionInt64(p *int64, name string, def int64, usage string) {
	fs.Int64Var(p, name, def, usage)
	fs.actions = append(fs.actions, name)
}

// isAction reports whether name is an action flag.
func (fs *flagSet) isAction(name string) bool {
	return slices.Contains(fs.actions, name)
}

// unclassified lists the flags defined neither as a setting nor as an
// action: a programming error, refused by parse.
func (fs *flagSet) unclassified() []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		if _, bound := fs.envs[f.Name]; !bound && !fs.isAction(f.Name) {
			out = append(out, f.Name)
		}
	})
	return out
}

// parse applies the environment to the settings, then the command line.
func (fs *flagSet) parse(args []string) error {
	if bad := fs.unclassified(); len(bad) > 0 {
		return fmt.Errorf("edihub %s: flags %v are neither settings nor actions (define them with fs.String or fs.ActionString)", fs.command(), bad)
	}
	for _, name := range fs.order {
		for _, env := range fs.envs[name] {
			v := fs.getenv(env)
			if v == "" {
				continue
			}
			if err := fs.Set(name, v); err != nil {
				return fmt.Errorf("%s=%q is invalid: %v (it sets -%s; see edihub help %s)", env, redactIfSecret(name, v), err, name, fs.command())
			}
			break
		}
	}
	// Flags may follow positional arguments (edihub users add NAME -role
	// admin): parsing goes on after each one, up to "--".
	fs.args = nil
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.printDefaults(fs.stderr)
				return errHelp
			}
			fmt.Fprintf(fs.stderr, "edihub %s: %v\nRun 'edihub help %s' for the flags.\n", fs.command(), err, fs.command())
			return errUsage
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			fs.args = append(fs.args, rest...)
			return nil
		}
		if len(rest) == 0 {
			return nil
		}
		fs.args = append(fs.args, rest[0])
		args = rest[1:]
	}
}

func (fs *flagSet) command() string { return strings.TrimPrefix(fs.Name(), "edihub ") }

// secretFlags never have their values echoed.
var secretFlags = map[string]bool{"api-token": true, "database-url": true, "smtp-url": true}

func redactIfSecret(name, v string) string {
	if secretFlags[name] {
		return "(redacted)"
	}
	return v
}

// printDefaults lists every flag with its variable and default.
func (fs *flagSet) printDefaults(w io.Writer) {
	if len(fs.order) > 0 {
		fmt.Fprintln(w, "Settings (each defaults to the environment variable shown):")
	}
	for _, name := range fs.order {
		f := fs.Lookup(name)
		def := f.DefValue
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  -%s  (%s)  default %s\n      %s\n", name, strings.Join(fs.envs[name], ", else "), def, f.Usage)
	}
	if len(fs.order) > 0 {
		fmt.Fprintln(w, "Details of each setting: docs/settings.md")
	}
	// Flags of one invocation (a file to apply, a dry run) have no
	// variable.
	if len(fs.actions) > 0 {
		fmt.Fprintln(w, "Flags of this invocation (no environment variable):")
	}
	for _, name := range fs.actions {
		f := fs.Lookup(name)
		def := ""
		if f.DefValue != "" && f.DefValue != "false" {
			def = "  default " + f.DefValue
		}
		fmt.Fprintf(w, "  -%s%s\n      %s\n", f.Name, def, f.Usage)
	}
}

// settingDoc describes a setting for the reference docs/settings.md.
type settingDoc struct {
	Flag, Env, Default, Usage string
}

func (fs *flagSet) docs() []settingDoc {
	var out []settingDoc
	for _, name := range fs.order {
		f := fs.Lookup(name)
		out = append(out, settingDoc{Flag: "-" + name, Env: strings.Join(fs.envs[name], ", else "), Default: f.DefValue, Usage: f.Usage})
	}
	return out
}
