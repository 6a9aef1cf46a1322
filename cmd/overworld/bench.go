package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/overworld-p2p/overworld/node/crimp/crimpbench"
)

// benchSubcommand is one reproduction of a paper's table: `overworld bench
// <name> [flags]`. Other benches (tss, vfc) add themselves to
// benchSubcommands from an init in their own file.
type benchSubcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, out io.Writer) error
}

var benchSubcommands = []benchSubcommand{
	{"crimp", "CRIMP reliable multicast, the paper's table 4.1", runBenchCRIMP},
}

func init() {
	extraCommands = append(extraCommands, command{
		name:    "bench",
		summary: "reproduce the papers' tables: bench <crimp|...> [flags]",
		run:     runBench,
	})
}

func runBench(ctx context.Context, args []string, out, _ io.Writer) error {
	subs := append([]benchSubcommand(nil), benchSubcommands...)
	sort.Slice(subs, func(i, j int) bool { return subs[i].name < subs[j].name })
	usage := func() {
		fmt.Fprintln(out, "Usage: overworld bench <name> [flags]; overworld bench <name> -h for its flags")
		fmt.Fprintln(out)
		for _, s := range subs {
			fmt.Fprintf(out, "  %-8s %s\n", s.name, s.summary)
		}
	}
	if len(args) == 0 {
		usage()
		return errors.New("bench: name a benchmark")
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		usage()
		return flag.ErrHelp
	}
	for _, s := range subs {
		if s.name == args[0] {
			return s.run(ctx, args[1:], out)
		}
	}
	usage()
	return fmt.Errorf("bench: unknown benchmark %q", args[0])
}

func runBenchCRIMP(ctx context.Context, args []string, out io.Writer) error {
	d := crimpbench.Default()
	fs := newFlagSet("bench crimp", "Reproduce CRIMP's table 4.1 (two sides joined by a lossy 25 ms bridge) on the in-memory network, with and without FEC.", out)
	realtime := fs.Bool("realtime", false, "run on the wall clock instead of simulated time (a full table takes minutes)")
	fec := fs.Int("fec", d.FEC, "payloads piggybacked per packet in the FEC table (0: only the plain table)")
	seed := fs.Int64("seed", d.Seed, "seed for losses, payloads and timer draws")
	jsonF := addJSONFlags(fs, "")
	packets := fs.Int("packets", d.Packets, "packets per sender")
	side := fs.Int("side", d.SideSize, "members on each side of the bridge")
	history := fs.Duration("history", d.History, "CRIMP history length")
	losses := fs.String("loss", "0,5,10,15", "bridge loss rates in percent, comma-separated")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg := d
	cfg.LossRates = nil
	for _, f := range strings.Split(*losses, ",") {
		pct, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || pct < 0 || pct >= 100 {
			return fmt.Errorf("bench crimp: -loss %q: want percentages in [0, 100)", f)
		}
		cfg.LossRates = append(cfg.LossRates, pct/100)
	}
	cfg.Realtime, cfg.FEC, cfg.Seed, cfg.Packets, cfg.SideSize, cfg.History = *realtime, *fec, *seed, *packets, *side, *history
	start := time.Now()
	rep, err := crimpbench.Run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("bench crimp: %w", err)
	}
	if *jsonF.on {
		return rep.WriteJSON(out)
	}
	rep.WriteText(out)
	fmt.Fprintf(out, "\n(took %v)\n", time.Since(start).Round(time.Millisecond))
	return nil
}
