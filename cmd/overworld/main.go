// Command overworld is the one binary of the overworld peer-to-peer MMOG:
// player peers, bootstrap nodes, the account server, local devnets, the
// simulator and the benchmarks are all subcommands of it.
//
// Each subcommand lives in a file of its own and stays thin: it parses its
// flags (command line first, then OVERWORLD_* environment variables) into a
// config and hands that to a package that does the work.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand of the binary.
type command struct {
	name    string
	summary string
	// run parses args and works until ctx is cancelled (SIGINT/SIGTERM) or
	// the job is done. It writes what a person reads to out and its logs
	// to errOut.
	run func(ctx context.Context, args []string, out, errOut io.Writer) error
}

// commands lists every subcommand; help and dispatch read it.
func commands() []command {
	cmds := []command{
		bootstrapCommand(),
		peerCommand(),
		devnetCommand(),
		versionCommand(),
	}
	cmds = append(cmds, extraCommands...)
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	return cmds
}

// extraCommands is where subcommands defined in other files of this package
// add themselves (in their own init), so that adding one touches one file.
var extraCommands []command

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal starts an orderly stop; from then on a second one
	// has its default effect, killing a stop that hangs.
	context.AfterFunc(ctx, stop)
	if err := dispatch(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "overworld:", err)
		os.Exit(1)
	}
}

// dispatch picks the subcommand named by args[0] and runs it.
func dispatch(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 {
		printUsage(errOut)
		return errors.New("no subcommand given")
	}
	name := args[0]
	if name == "help" || name == "-h" || name == "--help" || name == "-help" {
		if len(args) > 1 {
			return dispatch(ctx, []string{args[1], "-h"}, out, errOut)
		}
		printUsage(out)
		return nil
	}
	for _, c := range commands() {
		if c.name == name {
			return c.run(ctx, args[1:], out, errOut)
		}
	}
	printUsage(errOut)
	return fmt.Errorf("unknown subcommand %q", name)
}

func printUsage(w io.Writer) {
	fmt.Fprintln(w, "overworld: a peer-to-peer MMOG node")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Usage: overworld <subcommand> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Subcommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w, "  help       help for a subcommand: overworld help <subcommand>")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Every flag can also be set with an environment variable: -listen-port")
	fmt.Fprintln(w, "of 'peer' is OVERWORLD_LISTEN_PORT. Flags on the command line win.")
}

// newFlagSet returns a flag set for a subcommand whose -h prints usage and
// the summary line.
func newFlagSet(name, summary string, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("overworld "+name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: overworld %s [flags]\n\n%s\n\nFlags (each also read from OVERWORLD_<FLAG>, upper case, '-' as '_'):\n", name, summary)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, then fills every flag not given on the command
// line from its OVERWORLD_* environment variable.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		env := envName(f.Name)
		if v, ok := os.LookupEnv(env); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// envName maps a flag name to its environment variable.
func envName(flagName string) string {
	return "OVERWORLD_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// newLogger returns the process logger at the given level ("debug",
// "info", "warn", "error").
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}
