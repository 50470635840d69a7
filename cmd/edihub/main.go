// Command edihub is an AS2 (RFC 4130) EDI hub: it receives documents and
// MDNs from trading partners, sends documents to them, and runs its
// singleton jobs on the one replica that holds the leader lease.
//
// Run "edihub help" for the subcommands and "edihub help serve" for every
// setting. Each setting is a flag whose default comes from an EDIHUB_*
// environment variable.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := runIn(ctx, os.Args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, errUsage) {
			fmt.Fprintln(os.Stderr, "edihub:", err)
		}
		os.Exit(exitCode(err))
	}
}

// errUsage marks errors already reported with usage text.
var errUsage = errors.New("usage")

func exitCode(err error) int {
	if errors.Is(err, errUsage) {
		return 2
	}
	return 1
}

// command is one subcommand.
type command struct {
	name    string
	summary string
	// flags defines the command's flags on fs and returns the function
	// that runs it once they are parsed.
	flags func(fs *flagSet) func(ctx context.Context, env *environment) error
	// verbs, when set, are the command's own subcommands (edihub
	// partners apply): the first argument names one.
	verbs []command
}

// environment is what a command runs with: injected, never global.
type environment struct {
	getenv func(string) string
	// stdin is the standard input; nil when there is none to read (a
	// command that would read a secret from it makes one up instead).
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	args   []string // positional arguments after the flags
}

func commands() []command {
	return []command{
		{name: "serve", summary: "run a replica: AS2 receiver, dispatcher, API, ops endpoints", flags: serveFlags},
		{name: "migrate", summary: "apply pending database migrations and exit", flags: migrateFlags},
		{name: "send", summary: "queue a file for a partner (in the database; any replica sends it)", flags: sendFlags},
		{name: "resend", summary: "send a failed or overdue outbound message again (same Message-ID and bytes)", flags: resendFlags},
		{name: "cancel", summary: "fail an outbound message still queued or retrying, so that it is not sent", flags: cancelFlags},
		{name: "report", summary: "render a day's end-of-day report (html, text, csv, json, png), or mail it with -send", flags: reportFlags},
		{name: "status", summary: "show who leads, with which fencing token, as each replica sees it", flags: statusFlags},
		{name: "partners", summary: "manage the trading partners stored in the database: apply, diff, get, export, delete, history, restore", verbs: partnerVerbs()},
		{name: "connectors", summary: "manage the connectors document (destinations, sources, routes) stored in the database: apply, get, history, restore", verbs: connectorVerbs()},
		{name: "users", summary: "manage the users of the API and console and their API tokens: add, list, disable, enable, role, passwd, token, tokens, revoke", verbs: userVerbs()},
		{name: "version", summary: "print the version and exit", flags: versionFlags},
	}
}

// run is main without the process and without standard input: tests call
// it with their own arguments, environment and writers.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return runIn(ctx, args, getenv, nil, stdout, stderr)
}

// runIn is run reading stdin (nil: none).
func runIn(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		usage(stderr)
		return errUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "help", "-h", "-help", "--help":
		return help(rest, getenv, stdout)
	}
	for _, c := range commands() {
		if c.name != name {
			continue
		}
		if c.verbs != nil {
			var err error
			if c, rest, err = verb(c, rest, stderr); err != nil {
				return err
			}
		}
		fs := newFlagSet(c.name, getenv, stderr)
		runCmd := c.flags(fs)
		if err := fs.parse(rest); err != nil {
			if errors.Is(err, errHelp) {
				return nil
			}
			return err
		}
		return runCmd(ctx, &environment{getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr, args: fs.args})
	}
	fmt.Fprintf(stderr, "edihub: unknown command %q\n\n", name)
	usage(stderr)
	return errUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "edihub is an AS2 (RFC 4130) EDI hub.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage:")
	fmt.Fprintln(w, "  edihub <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-10s %s\n", "help", "show help for a command: edihub help <command>")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every setting defaults to the EDIHUB_* environment variable named in its help;")
	fmt.Fprintln(w, "the flags of one invocation (-send, -force, -date, -f, ...) have none.")
}

func help(args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) == 0 {
		usage(stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == args[0] {
			if c.verbs != nil {
				if len(args) == 1 {
					verbUsage(c, stdout)
					return nil
				}
				var err error
				if c, _, err = verb(c, args[1:], stdout); err != nil {
					return err
				}
			}
			fs := newFlagSet(c.name, getenv, stdout)
			c.flags(fs)
			fmt.Fprintf(stdout, "edihub %s: %s\n\n", c.name, c.summary)
			fs.printDefaults(stdout)
			return nil
		}
	}
	return fmt.Errorf("help: unknown command %q (run edihub help for the list)", args[0])
}

// verb picks the subcommand of c named by args[0] and returns it, named
// "c verb", with the arguments after it.
func verb(c command, args []string, stderr io.Writer) (command, []string, error) {
	if len(args) > 0 {
		for _, v := range c.verbs {
			if v.name == args[0] {
				v.name = c.name + " " + v.name
				return v, args[1:], nil
			}
		}
		fmt.Fprintf(stderr, "edihub %s: unknown subcommand %q\n\n", c.name, args[0])
	}
	verbUsage(c, stderr)
	return c, nil, errUsage
}

func verbUsage(c command, w io.Writer) {
	fmt.Fprintf(w, "edihub %s: %s\n\nUsage:\n  edihub %s <subcommand> [flags] [arguments]\n\nSubcommands:\n", c.name, c.summary, c.name)
	for _, v := range c.verbs {
		fmt.Fprintf(w, "  %-10s %s\n", v.name, v.summary)
	}
	fmt.Fprintf(w, "\nRun edihub help %s <subcommand> for its flags.\n", c.name)
}
