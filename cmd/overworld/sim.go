package main

import (
	"context"
	"fmt"
	"io"

	"github.com/overworld-p2p/overworld/game/sim"
)

func init() {
	extraCommands = append(extraCommands, simCommand())
}

func simCommand() command {
	const summary = "simulate many players on an in-memory network and report bandwidth and delay"
	return command{name: "sim", summary: summary, run: func(ctx context.Context, args []string, out io.Writer) error {
		cfg := sim.DefaultConfig()
		fs := newFlagSet("sim", summary, out)
		fs.IntVar(&cfg.Players, "players", cfg.Players, "number of players (each a full peer)")
		fs.IntVar(&cfg.Regions, "regions", cfg.Regions, "number of regions (rounded up to a square grid)")
		fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured time")
		fs.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "time before measuring")
		fs.DurationVar(&cfg.Interval, "interval", cfg.Interval, "position update interval")
		fs.IntVar(&cfg.Radius, "radius", cfg.Radius, "interest radius in regions")
		fs.BoolVar(&cfg.Aggregate, "aggregate", cfg.Aggregate, "aggregated mode: players send to the region coordinator, which publishes batches")
		fs.DurationVar(&cfg.LatencyMin, "latency-min", cfg.LatencyMin, "lowest one-way link latency")
		fs.DurationVar(&cfg.LatencyMax, "latency-max", cfg.LatencyMax, "highest one-way link latency")
		fs.DurationVar(&cfg.EatEvery, "eat-every", cfg.EatEvery, "each bot's mean time between eats through the region coordinator (0: no eating)")
		fs.DurationVar(&cfg.FightEvery, "fight-every", cfg.FightEvery, "each bot's mean time between fights over the fight protocol (0: no fighting)")
		fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed for identities, latencies and bot walks")
		outDir := fs.String("out", "sim-report", "directory for report.json and the plots")
		logLevel := fs.String("log-level", "warn", "log level")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		log, err := newLogger(out, *logLevel)
		if err != nil {
			return err
		}
		cfg.Logger = log
		cfg.Progress = out
		report, err := sim.Run(ctx, cfg)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		report.Summary(out)
		files, err := report.WriteFiles(*outDir)
		if err != nil {
			return fmt.Errorf("sim: %w", err)
		}
		for _, f := range files {
			fmt.Fprintln(out, "wrote", f)
		}
		return nil
	}}
}
