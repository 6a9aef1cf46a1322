package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/overworld-p2p/overworld/game/demo"
)

// startMirrorDemo is `demo -mode mirror`: it prints where the page and the
// mirrors are.
func startMirrorDemo(ctx context.Context, out io.Writer, cfg demo.Config) (demoNetwork, error) {
	fmt.Fprintf(out, "starting the account server, %d mirrors (%s protocol), the bots and your player…\n", demo.MirrorMirrors, cfg.MirrorProtocol)
	d, err := demo.StartMirror(ctx, cfg)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "account server on %s\n", d.AccountsURL)
	fmt.Fprintf(out, "mirrors: %s (mirror 1 is the authority; you play on mirror 2)\n", strings.Join(d.MirrorURLs, " "))
	fmt.Fprintf(out, "open %s in your browser (Ctrl-C stops)\n", d.URL)
	return d, nil
}
