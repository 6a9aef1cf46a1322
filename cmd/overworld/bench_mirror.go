package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/overworld-p2p/overworld/node/mirror/mirrorbench"
)

func init() {
	benchSubcommands = append(benchSubcommands, benchSubcommand{"mirror", "mirror-mode bandwidth a, b, c, d+e for 1-5 clients, the paper's table 2.3", runBenchMirror})
}

func runBenchMirror(ctx context.Context, args []string, out io.Writer) error {
	d := mirrorbench.Default()
	fs := newFlagSet("bench mirror", "Measure the bandwidth coefficients of Cronin et al.'s table 2.3 (a: client commands, b: mirror multicast, c + n(d+e): updates) with 1-5 bot clients on one of two mirrors, in simulated time, and print the paper's beside ours.", out)
	asJSON := fs.Bool("json", false, "print the report as JSON")
	clients := fs.String("clients", "1,2,3,4,5", "client counts to measure, comma-separated")
	duration := fs.Duration("duration", d.Duration, "measured play per client count (simulated time)")
	fec := fs.Int("fec", d.FEC, "CRIMP FEC: earlier commands repeated per packet (0: the plain stream the paper measured)")
	frame := fs.Int("frame-ticks", d.FrameTicks, "ticks between two updates to a client")
	seed := fs.Int64("seed", d.Seed, "seed for the bots, keys and the network")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg := d
	cfg.Duration, cfg.FEC, cfg.FrameTicks, cfg.Seed = *duration, *fec, *frame, *seed
	cfg.Clients = nil
	for _, f := range strings.Split(*clients, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 64 {
			return fmt.Errorf("bench mirror: -clients %q: want counts 1..64", *clients)
		}
		cfg.Clients = append(cfg.Clients, n)
	}
	rep, err := mirrorbench.Run(ctx, cfg)
	if err != nil {
		return fmt.Errorf("bench mirror: %w", err)
	}
	if *asJSON {
		return rep.JSON(out)
	}
	rep.Print(out)
	return nil
}
