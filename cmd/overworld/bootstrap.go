package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/overworld-p2p/overworld/bootstrap"
	"github.com/overworld-p2p/overworld/cmd/overworld/internal/rungroup"
)

func bootstrapCommand() command {
	const summary = "run a bootstrap node: DHT server, relay v2 and AutoNAT for players"
	return command{name: "bootstrap", summary: summary, run: func(ctx context.Context, args []string, out, errOut io.Writer) error {
		fs := newFlagSet("bootstrap", summary+`.

Prints its full multiaddrs (with /p2p/<ID>) at start: hand those to players
as -bootstrap. The identity comes from -key-file, so they stay valid across
restarts.`, out)
		keyFile := fs.String("key-file", defaultDataDir("bootstrap.key"), "identity key file (created, mode 0600, if missing)")
		listenF := addP2PListenFlags(fs, 4001)
		peers := fs.String("peers", "", "comma-separated multiaddrs of other bootstrap nodes to join")
		metricsF := addMetricsFlags(fs, "127.0.0.1:9100", "")
		logF := addLogFlags(fs, "info")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		log, err := logF.logger(errOut)
		if err != nil {
			return err
		}
		addrs, err := listenF.addrs()
		if err != nil {
			return err
		}
		// Stop order (lifecycle.go): readiness, bootstrap node, metrics.
		group := rungroup.New(log)
		reg := newProcessRegistry()
		ops, err := metricsF.start(reg, log)
		if err != nil {
			return err
		}
		group.Add(ops.service())
		b, err := bootstrap.Start(ctx, bootstrap.Config{
			KeyFile: *keyFile, ListenAddrs: addrs, Peers: splitList(*peers), Logger: log, Registerer: reg,
		})
		if err != nil {
			group.Close()
			return err
		}
		group.Add(rungroup.Service{Name: "bootstrap node", Stop: func() { b.Close() }})
		group.Add(ops.readiness())
		fmt.Fprintf(out, "bootstrap node %s listening on:\n", b.ID())
		for _, a := range b.Addrs() {
			fmt.Fprintf(out, "  %s\n", a)
		}
		ops.setReady(true)
		return group.Run(ctx)
	}}
}

// defaultDataDir is name under the user's overworld data dir
// ($XDG_DATA_HOME/overworld or ~/.local/share/overworld).
func defaultDataDir(name string) string {
	base := os.Getenv("XDG_DATA_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return filepath.Join(".overworld", name)
		}
		base = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(base, "overworld", name)
}
