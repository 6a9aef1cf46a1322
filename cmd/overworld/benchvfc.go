package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/overworld-p2p/overworld/game/vfc/vfcbench"
)

func init() {
	benchSubcommands = append(benchSubcommands, benchSubcommand{
		"vfc", "vector-field consistency: the paper's round-handler cost (fig 11) and a 50-client demo's bytes and staleness", runBenchVFC,
	})
}

func runBenchVFC(ctx context.Context, args []string, out io.Writer) error {
	d := vfcbench.Default()
	fs := newFlagSet("bench vfc", "Measure VFC's round handler on the paper's grid (one client, one pivot, three zones, 4-byte values) and play a bot demo counting the bytes VFC sends against sending everything, with the largest staleness per zone.", out)
	objects := fs.String("objects", joinInts(d.Objects), "object counts of the round benchmark, comma-separated")
	updated := fs.String("updated", joinInts(d.Updated), "percentages of objects written (and sent) before each round, comma-separated")
	pivots := fs.String("pivot", "still,moving", "pivot modes: still (only written objects are rezoned), moving (every object is, as figure 9 does)")
	rounds := fs.Int("rounds", d.Rounds, "timed rounds per cell")
	literal := fs.Bool("literal", false, "run figure 9 as printed instead of the corrected algorithm")
	seed := fs.Uint64("seed", d.Seed, "seed for object placement and the bots")
	clients := fs.Int("clients", d.Demo.Clients, "demo clients (one bot-driven player each)")
	seconds := fs.Int("seconds", d.Demo.Seconds, "demo length in game seconds")
	frameTicks := fs.Int("frame-ticks", d.Demo.FrameTicks, "world ticks per frame (one VFC round per frame)")
	parts := fs.String("part", "rounds,demo", "what to run: rounds, demo or both")
	jsonF := addJSONFlags(fs, "")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg := d
	var err error
	if cfg.Objects, err = parseInts(*objects, 2, 1<<20); err != nil {
		return fmt.Errorf("bench vfc: -objects: %w", err)
	}
	if cfg.Updated, err = parseInts(*updated, 0, 100); err != nil {
		return fmt.Errorf("bench vfc: -updated: %w", err)
	}
	cfg.Pivots = nil
	for _, p := range strings.Split(*pivots, ",") {
		switch strings.TrimSpace(p) {
		case "still":
			cfg.Pivots = append(cfg.Pivots, false)
		case "moving":
			cfg.Pivots = append(cfg.Pivots, true)
		default:
			return fmt.Errorf("bench vfc: -pivot %q: want still, moving or both", p)
		}
	}
	if *rounds < 1 {
		return fmt.Errorf("bench vfc: -rounds %d: need at least 1", *rounds)
	}
	cfg.RunRound, cfg.RunDemo = false, false
	for _, p := range strings.Split(*parts, ",") {
		switch strings.TrimSpace(p) {
		case "rounds":
			cfg.RunRound = true
		case "demo":
			cfg.RunDemo = true
		default:
			return fmt.Errorf("bench vfc: -part %q: want rounds, demo or both", p)
		}
	}
	cfg.Rounds, cfg.Literal, cfg.Seed = *rounds, *literal, *seed
	cfg.Demo.Clients, cfg.Demo.Seconds, cfg.Demo.FrameTicks, cfg.Demo.Seed = *clients, *seconds, *frameTicks, *seed
	cfg.Demo.Settings.Literal = *literal
	start := time.Now()
	rep, err := vfcbench.Run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("bench vfc: %w", err)
	}
	if *jsonF.on {
		return rep.WriteJSON(out)
	}
	rep.WriteText(out)
	fmt.Fprintf(out, "\n(took %v)\n", time.Since(start).Round(time.Millisecond))
	return nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func parseInts(s string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%q: want integers in [%d, %d]", f, lo, hi)
		}
		out = append(out, n)
	}
	return out, nil
}
