package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/overworld-p2p/overworld/cmd/overworld/internal/rungroup"
	"github.com/overworld-p2p/overworld/node"
)

func peerCommand() command {
	const summary = "run a headless full peer: coordinates and replicates regions, no player"
	return command{name: "peer", summary: summary, run: func(ctx context.Context, args []string, out, errOut io.Writer) error {
		fs := newFlagSet("peer", summary+`.

Joins through the bootstrap nodes given with -bootstrap (retrying with
backoff while none answers), serves the DHT, and runs the region services a
player's peer runs (region objects, position rendezvous and aggregation) for
the world named by -world, -world-size and -seed, which must be the
players': operators add capacity with it. With -account it logs in as -user
(the password from -password-file, else OVERWORLD_PASSWORD, else a prompt)
and coordinates only under the lease server's leases, checking every
peer's token, as players do. For each region it coordinates it publishes
one batch per interval of the positions that players in aggregated mode
(play -aggregate) send it. /metrics on -metrics shows the regions it holds
(overworld_regions_held) and the batches it published
(overworld_position_batches_published_total). Ctrl-C stops it and releases
its leases.`, out)
		dataDir := fs.String("data-dir", defaultDataDir("peer"), "directory for the identity key")
		bootF := addBootstrapFlags(fs)
		listenF := addP2PListenFlags(fs, 0)
		dhtMode := fs.String("dht", "auto", "DHT mode: auto (server unless AutoNAT finds this peer behind NAT), server or client")
		dhtClient := fs.Bool("dht-client", false, "same as -dht client")
		worldF := addWorldFlags(fs)
		accountF := addAccountFlags(fs)
		metricsF := addMetricsFlags(fs, "", "127.0.0.1:9101")
		logF := addLogFlags(fs, "info")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		log, err := logF.logger(errOut)
		if err != nil {
			return err
		}
		boot, err := bootF.require("see 'overworld bootstrap'")
		if err != nil {
			return err
		}
		g, err := worldF.game()
		if err != nil {
			return err
		}
		summaries, err := worldF.summaryConfig()
		if err != nil {
			return err
		}
		acct, err := accountF.account(out)
		if err != nil {
			return err
		}
		addrs, err := listenF.addrs()
		if err != nil {
			return err
		}
		mode, err := node.ParseDHTMode(*dhtMode)
		if err != nil {
			return fmt.Errorf("-dht: %w", err)
		}
		if *dhtClient {
			mode = node.DHTClient
		}
		// Stop order (lifecycle.go): readiness, region services, node, metrics.
		group := rungroup.New(log)
		reg := newProcessRegistry()
		ops, err := metricsF.start(reg, log)
		if err != nil {
			return err
		}
		group.Add(ops.service())
		n, err := node.New(ctx,
			node.WithDataDir(*dataDir), node.WithListenAddrs(addrs...), node.WithBootstrapPeers(boot...),
			node.WithDHTMode(mode), node.WithLogger(log), node.WithRegisterer(reg))
		if err != nil {
			group.Close()
			return err
		}
		group.Add(nodeService(n))
		hp, err := startHeadless(ctx, n, headlessConfig{World: *worldF.name, Game: g, Summaries: summaries, Account: acct, Logger: log, Registerer: reg})
		if err != nil {
			group.Close()
			return err
		}
		group.Add(rungroup.Service{Name: "region services", Stop: hp.Close})
		group.Add(ops.readiness())
		fmt.Fprintf(out, "peer %s started; joining through %d bootstrap node(s)\n", n.ID(), len(boot))
		if u := ops.url(); u != "" {
			fmt.Fprintf(out, "metrics on %s\n", u)
		}
		start := time.Now()
		if err := n.WaitJoined(ctx); err != nil {
			group.Close()
			if ctx.Err() != nil {
				return nil // stopped before joining
			}
			return err
		}
		fmt.Fprintf(out, "peer %s joined the overlay in %s\n", n.ID(), time.Since(start).Round(time.Millisecond))
		ops.setReady(true)
		return group.Run(ctx)
	}}
}
