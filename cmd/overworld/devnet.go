package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/overworld-p2p/overworld/node/devnet"
)

func devnetCommand() command {
	const summary = "run a bootstrap node and N peers in one process on 127.0.0.1"
	return command{name: "devnet", summary: summary, run: func(ctx context.Context, args []string, out, errOut io.Writer) error {
		fs := newFlagSet("devnet", summary+`.

Prints each peer as it joins, then every -report interval a line of DHT
routing table sizes (bootstrap first). Stops on Ctrl-C or after -duration.`, out)
		peers := fs.Int("peers", 10, "number of peers besides the bootstrap node")
		dataDir := fs.String("data-dir", "", "directory for the identities (default: a temporary one, removed at exit)")
		every := fs.Duration("report", 5*time.Second, "interval of the routing table report")
		duration := fs.Duration("duration", 0, "stop after this long (0: run until interrupted)")
		logF := addLogFlags(fs, "warn")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if *peers < 1 || *peers > 500 {
			return fmt.Errorf("-peers %d: want 1..500", *peers)
		}
		if *every <= 0 {
			return fmt.Errorf("-report %s: want > 0", *every)
		}
		log, err := logF.logger(errOut)
		if err != nil {
			return err
		}
		if *dataDir == "" {
			tmp, err := os.MkdirTemp("", "overworld-devnet-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(tmp)
			*dataDir = tmp
		}
		if *duration > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, *duration)
			defer cancel()
		}
		d, err := devnet.Start(ctx, devnet.Config{Peers: *peers, DataDir: *dataDir, Logger: log})
		if err != nil {
			return err
		}
		defer d.Close()
		fmt.Fprintf(out, "bootstrap node %s\n", d.Bootstrap.ID())
		for _, a := range d.Bootstrap.Addrs() {
			fmt.Fprintf(out, "  %s\n", a)
		}
		report := time.NewTicker(*every)
		defer report.Stop()
		joins := d.Joined()
		joined := 0
		for {
			select {
			case <-ctx.Done():
				fmt.Fprintln(out, "stopping devnet")
				return nil
			case j, ok := <-joins:
				if !ok {
					joins = nil
					continue
				}
				joined++
				fmt.Fprintf(out, "peer %d/%d %s joined in %s\n", j.Index, *peers, j.Node.ID(), j.After.Round(time.Millisecond))
				if joined == *peers {
					fmt.Fprintf(out, "all %d peers joined in %s\n", *peers, j.After.Round(time.Millisecond))
				}
			case <-report.C:
				fmt.Fprintf(out, "dht table sizes: %s\n", formatSizes(d.TableSizes()))
			}
		}
	}}
}

func formatSizes(sizes []int) string {
	parts := make([]string, len(sizes))
	for i, s := range sizes {
		if i == 0 {
			parts[i] = fmt.Sprintf("bootstrap=%d", s)
		} else {
			parts[i] = fmt.Sprintf("p%d=%d", i, s)
		}
	}
	return strings.Join(parts, " ")
}
