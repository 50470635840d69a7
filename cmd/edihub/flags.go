package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

var errHelp = errors.New("help requested")

// flagSet is a flag.FlagSet whose every flag -foo-bar defaults to the
// environment variable EDIHUB_FOO_BAR (or a variable named explicitly).
// Values from the environment are validated like flags, and a bad one is
// reported with the variable's name.
type flagSet struct {
	*flag.FlagSet
	getenv func(string) string
	envs   map[string][]string // flag name -> variables, first set wins
	order  []string
	stderr io.Writer
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

// parse applies the environment, then the command line.
func (fs *flagSet) parse(args []string) error {
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
	fmt.Fprintln(w, "Flags (each defaults to the environment variable shown):")
	for _, name := range fs.order {
		f := fs.Lookup(name)
		def := f.DefValue
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  -%s  (%s)  default %s\n      %s\n", name, strings.Join(fs.envs[name], ", else "), def, f.Usage)
	}
	// Flags of one invocation (a file to apply, a dry run) have no
	// variable.
	fs.VisitAll(func(f *flag.Flag) {
		if _, bound := fs.envs[f.Name]; bound {
			return
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" {
			def = "  default " + f.DefValue
		}
		fmt.Fprintf(w, "  -%s%s\n      %s\n", f.Name, def, f.Usage)
	})
}

// settings describes every flag for the README's reference table.
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
