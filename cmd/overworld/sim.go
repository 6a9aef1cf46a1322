package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/overworld-p2p/overworld/game/sim"
)

func init() {
	extraCommands = append(extraCommands, simCommand())
}

func simCommand() command {
	const summary = "simulate many players on an in-memory network and report bandwidth and delay"
	return command{name: "sim", summary: summary, run: func(ctx context.Context, args []string, out, _ io.Writer) error {
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
		fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed for identities, latencies, bot walks and sessions")
		fs.DurationVar(&cfg.SessionMean, "session-mean", cfg.SessionMean, "churn: mean of the players' exponential session lengths; each leaver is replaced by a new player (0: no churn)")
		leave := fs.String("leave", string(cfg.Leave), "churn: how a player leaves: handoff (hands its regions on, then closes), close (closes at once, as a quitting player) or crash (vanishes at once)")
		bots := fs.String("bots", "sim", "sim: the simulator's walker and eat/fight actor over the game's protocols; play: every player is game/play's runtime driven by a game.Bot (implies -dht; leaves by close or crash)")
		fs.BoolVar(&cfg.DHTPlacement, "dht", cfg.DHTPlacement, "every player serves the DHT and finds region coordinators by DHT lookups, as play does (default: placement over the directory of players)")
		scaleFrom := fs.String("scale-from", "", "instead of simulating, read these comma-separated report.json files and print a table and plots of bandwidth and delay against player count")
		outDir := fs.String("out", "sim-report", "directory for report.json and the plots")
		logF := addLogFlags(fs, "warn")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if *scaleFrom != "" {
			return simScale(out, *scaleFrom, *outDir)
		}
		cfg.Leave = sim.LeaveMode(*leave)
		switch *bots {
		case "sim":
		case "play":
			cfg.PlayBots = true
		default:
			return fmt.Errorf("sim: -bots %q: want sim or play", *bots)
		}
		// The simulator's logs go with its progress and report on out,
		// as they always have: its run is one report a person reads.
		log, err := newLogger(out, *logF.level)
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

// simScale prints the scale table of the reports in the comma-separated
// list paths and writes its plots into dir.
func simScale(out io.Writer, paths, dir string) error {
	var reports []*sim.Report
	for _, p := range strings.Split(paths, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		r, err := sim.LoadReport(p)
		if err != nil {
			return fmt.Errorf("sim -scale-from: %w", err)
		}
		reports = append(reports, r)
	}
	if len(reports) == 0 {
		return errors.New("sim -scale-from: no reports given")
	}
	sim.ScaleTable(out, reports)
	files, err := sim.WriteScalePlots(dir, reports)
	if err != nil {
		return fmt.Errorf("sim -scale-from: %w", err)
	}
	for _, f := range files {
		fmt.Fprintln(out, "wrote", f)
	}
	return nil
}
