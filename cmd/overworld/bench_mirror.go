package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/mirror"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorbench"
)

func init() {
	benchSubcommands = append(benchSubcommands, benchSubcommand{"mirror", "mirror-mode bandwidth a, b, c, d+e for 1-5 clients, the paper's table 2.3; the command and event protocols compared", runBenchMirror})
}

func runBenchMirror(ctx context.Context, args []string, out io.Writer) error {
	d := mirrorbench.Default()
	fs := newFlagSet("bench mirror", "Measure the bandwidth coefficients of Cronin et al.'s table 2.3 (a: client commands, b: mirror multicast, c + n(d+e): updates) with 1-5 bot clients on one of two mirrors, in simulated time, and print the paper's beside ours; under the command and the event protocol, compared on mirror-link bytes, rollbacks and consistent-event delay.", out)
	jsonF := addJSONFlags(fs, "")
	clients := fs.String("clients", "1,2,3,4,5", "client counts to measure, comma-separated")
	duration := fs.Duration("duration", d.Duration, "measured play per client count (simulated time)")
	fec := fs.Int("fec", d.FEC, "CRIMP FEC: earlier commands repeated per packet (0: the plain stream the paper measured)")
	frame := fs.Int("frame-ticks", d.FrameTicks, "ticks between two updates to a client")
	seed := fs.Int64("seed", d.Seed, "seed for the bots, keys and the network")
	protocols := fs.String("protocols", "command,event", "protocols to measure, comma-separated (command, event)")
	delay := fs.Duration("delay", d.Link.Delay, "one-way delay of the mirror link")
	jitter := fs.Duration("jitter", d.Link.Jitter, "uniform jitter added to the delay")
	loss := fs.Float64("loss", d.Link.Loss, "loss rate of the mirror link (0-1)")
	delays := fs.String("delays", "0,50ms,150ms", "synchronizer delays, increasing; on a lossy link the last must cover CRIMP's recovery (e.g. 0,100ms,1s)")
	redundancy := fs.Int("move-redundancy", 0, "event protocol: earlier moves each move datagram repeats (0: the default 3, -1: none)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg := d
	cfg.Duration, cfg.FEC, cfg.FrameTicks, cfg.Seed = *duration, *fec, *frame, *seed
	cfg.Link, cfg.MoveRedundancy = crimp.LinkParams{Delay: *delay, Jitter: *jitter, Loss: *loss}, *redundancy
	if *loss < 0 || *loss >= 1 || *delay < 0 || *jitter < 0 {
		return fmt.Errorf("bench mirror: -delay %v -jitter %v -loss %v: want non-negative times and a loss in [0, 1)", *delay, *jitter, *loss)
	}
	var err error
	if cfg.Delays, err = parseDelays(*delays); err != nil {
		return fmt.Errorf("bench mirror: -delays: %w", err)
	}
	cfg.Protocols = nil
	for _, f := range strings.Split(*protocols, ",") {
		p, err := mirror.ParseProtocol(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("bench mirror: -protocols: %w", err)
		}
		cfg.Protocols = append(cfg.Protocols, p)
	}
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
	if *jsonF.on {
		return rep.JSON(out)
	}
	rep.Print(out)
	return nil
}
