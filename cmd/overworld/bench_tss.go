package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/overworld-p2p/overworld/game/tss/tssbench"
)

func init() {
	benchSubcommands = append(benchSubcommands, benchSubcommand{"tss", "trailing state synchronization, the paper's table 3.1, with Time Warp and ChooseDelays", runBenchTSS})
}

func runBenchTSS(ctx context.Context, args []string, out io.Writer) error {
	d := tssbench.Default()
	fs := newFlagSet("bench tss", "Run table 3.1's seven delay configurations, the Time Warp baseline and the delays ChooseDelays picks on one trace of 2 mirrors x 3 bots delivered over CRIMP on the in-memory network (simulated time), and print the paper's rows beside ours.", out)
	jsonF := addJSONFlags(fs, "")
	commands := fs.Int("commands", d.Workload.Commands, "commands in the trace (all mirrors)")
	seed := fs.Int64("seed", d.Seed, "seed for the bots, the network and CRIMP's timers")
	delay := fs.Duration("link-delay", d.Link.Delay, "one-way delay between the mirrors")
	jitter := fs.Duration("link-jitter", d.Link.Jitter, "jitter added to each packet's delay (uniform)")
	loss := fs.Float64("link-loss", d.Link.Loss*100, "packet loss between the mirrors, percent")
	history := fs.Duration("history", d.History, "CRIMP history (bounds the last delay and Time Warp's window)")
	regions := fs.Int("regions", d.Workload.World.RegionsX, "the world is regions x regions")
	delays := fs.String("delays", "", "configurations to run instead of the paper's, e.g. '0,50;0,100,200' (ms)")
	trace := fs.String("trace", "", "write the ChooseDelays run's trace to this file (see overworld replay)")
	repeats := fs.Int("repeats", d.Repeats, "run each configuration this many times and keep the shortest times")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg := d
	cfg.Workload.Commands, cfg.Seed, cfg.Workload.Seed = *commands, *seed, uint64(*seed)
	cfg.Workload.World.Seed = uint64(*seed)
	cfg.Link = tssbench.Link{Delay: *delay, Jitter: *jitter, Loss: *loss / 100}
	cfg.History, cfg.Repeats = *history, *repeats
	cfg.Workload.World.RegionsX, cfg.Workload.World.RegionsY = *regions, *regions
	if *loss < 0 || *loss >= 100 || *commands < 1 {
		return fmt.Errorf("bench tss: -link-loss %g or -commands %d out of range", *loss, *commands)
	}
	if *delays != "" {
		for _, conf := range strings.Split(*delays, ";") {
			var ds []time.Duration
			for _, f := range strings.Split(conf, ",") {
				v, err := strconv.Atoi(strings.TrimSpace(f))
				if err != nil {
					return fmt.Errorf("bench tss: -delays %q: %w", *delays, err)
				}
				ds = append(ds, time.Duration(v)*time.Millisecond)
			}
			cfg.Delays = append(cfg.Delays, ds)
		}
	}
	var traceOut io.Writer
	if *trace != "" {
		f, err := os.Create(*trace)
		if err != nil {
			return fmt.Errorf("bench tss: %w", err)
		}
		defer f.Close()
		traceOut = f
	}
	rep, err := tssbench.Run(ctx, cfg, traceOut)
	if err != nil {
		return fmt.Errorf("bench tss: %w", err)
	}
	if *jsonF.on {
		return rep.WriteJSON(out)
	}
	rep.WriteText(out)
	fmt.Fprintf(out, "\n(took %v)\n", rep.Wall.Round(time.Millisecond))
	return nil
}
