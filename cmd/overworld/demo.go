package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/overworld-p2p/overworld/game/demo"
	"github.com/overworld-p2p/overworld/node/mirror"
)

func init() { extraCommands = append(extraCommands, demoCommand()) }

func demoCommand() command {
	const summary = "play alone: a whole network (bootstrap, accounts, bots) on 127.0.0.1 and a page to open"
	return command{name: "demo", summary: summary, run: func(ctx context.Context, args []string, out io.Writer) error {
		fs := newFlagSet("demo", summary+`.

Starts in this process a bootstrap node, the account server (SQLite in a
temporary directory), -bots bot players and your player, each a full peer
on its own port of 127.0.0.1, and prints the address of your page. Every
player starts in the middle region. Ctrl-C saves the characters and stops.`, out)
		bots := fs.Int("bots", 20, "number of bot players")
		httpAddr := fs.String("http", "127.0.0.1:8080", "address of the web page (a free port is used if this one is taken)")
		size := fs.String("world-size", "8x8", "world size in regions, WxH")
		seed := fs.Uint64("seed", 1, "world seed")
		name := fs.String("name", "Wanderer", "your player's name")
		dataDir := fs.String("data-dir", "", "directory for identities and the account database (default: a temporary one, removed at exit)")
		noAccounts := fs.Bool("no-accounts", false, "run without the account server")
		aggregate := fs.Bool("aggregate", false, "aggregated mode: players send their positions to the region's coordinator, which publishes one batch per interval (a player publishes directly while its coordinator does not answer)")
		level := fs.String("log-level", "warn", "log level: debug, info, warn or error")
		mode := fs.String("mode", "p2p", "p2p (peers on the libp2p overlay) or mirror (three mirrors over in-memory CRIMP, bots on each)")
		protocol := fs.String("protocol", "command", "with -mode mirror: command (every input reliably to every mirror) or event (moves unreliably, actions decided by the authority)")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		w, h, err := parseWorldSize(*size)
		if err != nil {
			return fmt.Errorf("-world-size: %w", err)
		}
		if *bots < 0 {
			return fmt.Errorf("-bots %d: want 0 or more", *bots)
		}
		log, err := newLogger(os.Stderr, *level)
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
		if *mode == "mirror" {
			if *aggregate {
				return errors.New("-aggregate is position multicast's mode (-mode p2p); mirror mode has no region coordinators")
			}
			proto, err := mirror.ParseProtocol(*protocol)
			if err != nil {
				return fmt.Errorf("-protocol: %w", err)
			}
			return runMirrorDemo(ctx, out, demo.Config{
				Bots: n, HTTP: *httpAddr, RegionsX: w, RegionsY: h, Seed: *seed, Name: *name, DataDir: *dataDir, Logger: log,
				MirrorProtocol: proto,
			})
		} else if *mode != "p2p" {
			return fmt.Errorf("-mode %q: want p2p or mirror", *mode)
		}
		fmt.Fprintf(out, "starting %d bots and your player…\n", *bots)
		d, err := demo.Start(ctx, demo.Config{
			Bots: n, HTTP: *httpAddr, RegionsX: w, RegionsY: h, Seed: *seed, Name: *name,
			DataDir: *dataDir, NoAccounts: *noAccounts, Aggregate: *aggregate, Logger: log,
		})
		if err != nil {
			return err
		}
		defer d.Close()
		if d.AccountsURL != "" {
			fmt.Fprintf(out, "account server on %s\n", d.AccountsURL)
		}
		fmt.Fprintf(out, "open %s in your browser (Ctrl-C stops)\n", d.URL)
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "stopping the demo")
			return nil
		case err := <-d.Err():
			return err
		}
	}}
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
