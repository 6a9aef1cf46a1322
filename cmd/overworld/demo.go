package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/overworld-p2p/overworld/cmd/overworld/internal/rungroup"
	"github.com/overworld-p2p/overworld/game/demo"
	"github.com/overworld-p2p/overworld/node/mirror"
)

func init() { extraCommands = append(extraCommands, demoCommand()) }

func demoCommand() command {
	const summary = "play alone: a whole network (bootstrap, accounts, bots) on 127.0.0.1 and a page to open"
	return command{name: "demo", summary: summary, run: func(ctx context.Context, args []string, out, errOut io.Writer) error {
		fs := newFlagSet("demo", summary+`.

Starts in this process a bootstrap node, the account server (SQLite in a
temporary directory), -bots bot players and your player, each a full peer
on its own port of 127.0.0.1, and prints the address of your page. Every
player starts in the middle region. Ctrl-C saves the characters and stops.`, out)
		bots := fs.Int("bots", 20, "number of bot players")
		httpAddr := fs.String("http", "127.0.0.1:8080", "address of the web page (a free port is used if this one is taken)")
		shapeF := addWorldShapeFlags(fs, "8x8", "")
		name := fs.String("name", "Wanderer", "your player's name")
		dataDir := fs.String("data-dir", "", "directory for identities and the account database (default: a temporary one, removed at exit)")
		noAccounts := fs.Bool("no-accounts", false, "run without the account server")
		aggregate := fs.Bool("aggregate", false, "aggregated mode: players send their positions to the region's coordinator, which publishes one batch per interval (a player publishes directly while its coordinator does not answer)")
		metricsF := addMetricsFlags(fs, "127.0.0.1:0", "")
		logF := addLogFlags(fs, "warn")
		mode := fs.String("mode", "p2p", "p2p (peers on the libp2p overlay) or mirror (three mirrors over in-memory CRIMP, bots on each)")
		protocol := fs.String("protocol", "command", "with -mode mirror: command (every input reliably to every mirror) or event (moves unreliably, actions decided by the authority)")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		g, err := shapeF.game()
		if err != nil {
			return err
		}
		if *bots < 0 {
			return fmt.Errorf("-bots %d: want 0 or more", *bots)
		}
		log, err := logF.logger(errOut)
		if err != nil {
			return err
		}
		n := *bots
		if n == 0 {
			n = -1 // demo.Config: zero means the default
		}
		if *mode != "mirror" && *protocol != "command" {
			return errors.New("-protocol is mirror mode's (-mode mirror)")
		}
		var proto mirror.Protocol
		switch *mode {
		case "p2p":
		case "mirror":
			if *aggregate {
				return errors.New("-aggregate is position multicast's mode (-mode p2p); mirror mode has no region coordinators")
			}
			if proto, err = mirror.ParseProtocol(*protocol); err != nil {
				return fmt.Errorf("-protocol: %w", err)
			}
		default:
			return fmt.Errorf("-mode %q: want p2p or mirror", *mode)
		}
		// Stop order (lifecycle.go): readiness, the demo network (in
		// game/demo's own order), metrics.
		group := rungroup.New(log)
		reg := newProcessRegistry()
		ops, err := metricsF.start(reg, log)
		if err != nil {
			return err
		}
		group.Add(ops.service())
		cfg := demo.Config{
			Bots: n, HTTP: *httpAddr, RegionsX: g.RegionsX, RegionsY: g.RegionsY, Seed: g.Seed, Name: *name,
			DataDir: *dataDir, NoAccounts: *noAccounts, Aggregate: *aggregate, Logger: log, Registerer: reg,
			MirrorProtocol: proto,
		}
		var network demoNetwork
		if *mode == "mirror" {
			network, err = startMirrorDemo(ctx, out, cfg)
		} else {
			network, err = startP2PDemo(ctx, out, cfg)
		}
		if err != nil {
			group.Close()
			return err
		}
		group.Add(demoService(network, out))
		group.Add(ops.readiness())
		if u := ops.url(); u != "" {
			fmt.Fprintf(out, "metrics of your player on %s\n", u)
		}
		ops.setReady(true)
		return group.Run(ctx)
	}}
}

// demoNetwork is a running demo of either mode.
type demoNetwork interface {
	Err() <-chan error
	Close() error
}

// startP2PDemo is `demo -mode p2p`: it prints where the page is.
func startP2PDemo(ctx context.Context, out io.Writer, cfg demo.Config) (demoNetwork, error) {
	bots := max(cfg.Bots, 0)
	fmt.Fprintf(out, "starting %d bots and your player…\n", bots)
	d, err := demo.Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if d.AccountsURL != "" {
		fmt.Fprintf(out, "account server on %s\n", d.AccountsURL)
	}
	fmt.Fprintf(out, "open %s in your browser (Ctrl-C stops)\n", d.URL)
	return d, nil
}

// demoService runs a demo network until stopped (or until its page fails),
// then closes it: the players save their characters first.
func demoService(d demoNetwork, out io.Writer) rungroup.Service {
	stop := make(chan struct{})
	return rungroup.Service{
		Name: "demo",
		Run: func() error {
			var err error
			select {
			case <-stop:
			case err = <-d.Err():
			}
			fmt.Fprintln(out, "stopping the demo")
			return errors.Join(err, d.Close())
		},
		Stop: func() { close(stop) },
	}
}

// parseWorldSize reads "WxH".
func parseWorldSize(s string) (int, int, error) {
	ws, hs, ok := strings.Cut(strings.ToLower(s), "x")
	if !ok {
		return 0, 0, fmt.Errorf("%q: want WxH, e.g. 8x8", s)
	}
	w, err1 := strconv.Atoi(ws)
	h, err2 := strconv.Atoi(hs)
	if err1 != nil || err2 != nil || w < 1 || h < 1 || w > 64 || h > 64 {
		return 0, 0, fmt.Errorf("%q: want WxH with each side 1..64", s)
	}
	return w, h, nil
}
