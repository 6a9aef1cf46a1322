package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/overworld-p2p/overworld/bootstrap"
)

func bootstrapCommand() command {
	const summary = "run a bootstrap node: DHT server, relay v2 and AutoNAT for players"
	return command{name: "bootstrap", summary: summary, run: func(ctx context.Context, args []string, out io.Writer) error {
		fs := newFlagSet("bootstrap", summary+`.

Prints its full multiaddrs (with /p2p/<ID>) at start: hand those to players
as -bootstrap. The identity comes from -key-file, so they stay valid across
restarts.`, out)
		keyFile := fs.String("key-file", defaultDataDir("bootstrap.key"), "identity key file (created, mode 0600, if missing)")
		port := fs.Int("listen-port", 4001, "TCP and UDP (QUIC) port on every interface")
		listen := fs.String("listen", "", "comma-separated listen multiaddrs (overrides -listen-port)")
		peers := fs.String("peers", "", "comma-separated multiaddrs of other bootstrap nodes to join")
		metrics := fs.String("metrics", "127.0.0.1:9100", "address for /metrics, /healthz and /readyz (empty: off)")
		level := fs.String("log-level", "info", "log level: debug, info, warn or error")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		log, err := newLogger(os.Stderr, *level)
		if err != nil {
			return err
		}
		if *listen == "" {
			*listen = listenAddrsForPort("0.0.0.0", *port)
		}
		addrs, err := parseMultiaddrs(*listen)
		if err != nil {
			return fmt.Errorf("-listen: %w", err)
		}
		reg := newProcessRegistry()
		ops, err := startOps(ctx, *metrics, reg, log)
		if err != nil {
			return err
		}
		b, err := bootstrap.Start(ctx, bootstrap.Config{
			KeyFile: *keyFile, ListenAddrs: addrs, Peers: splitList(*peers), Logger: log, Registerer: reg,
		})
		if err != nil {
			return err
		}
		defer b.Close()
		fmt.Fprintf(out, "bootstrap node %s listening on:\n", b.ID())
		for _, a := range b.Addrs() {
			fmt.Fprintf(out, "  %s\n", a)
		}
		ops.setReady(true)
		<-ctx.Done()
		ops.setReady(false)
		log.Info("shutting down")
		return nil
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
