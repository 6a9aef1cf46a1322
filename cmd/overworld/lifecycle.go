package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/overworld-p2p/overworld/cmd/overworld/internal/rungroup"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/game/webui"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/mirror"
)

// How each long-running subcommand stops on SIGINT/SIGTERM. Its services
// run in a rungroup.Group and stop one at a time, in the reverse of the
// order the subcommand adds them; each stop is logged as msg=stopped
// service=NAME. A second Ctrl-C kills a shutdown that hangs (main).
//
//	play:      readiness (/readyz 503) → page (no more input) → player (saves
//	           the character, leaves its regions, releases its leases) →
//	           node (DHT, pubsub, host) → metrics → page listener
//	peer:      readiness → region services (release the leases) → node → metrics
//	bootstrap: readiness → bootstrap node → metrics
//	mirror:    readiness → clients (no new ones) → players (saved, 15 s at most)
//	           → group (leave CRIMP) → state server → CRIMP → client listener
//	lan:       readiness → page → mirror (as mirror's, leaving the duty first)
//	           → discovery group
//	demo:      the demo network (game/demo's Close, in its own order) → metrics
//
// The rule behind every order: what serves players stops first, what the
// player's last save needs (the node, the lease server's leases, /metrics
// for whoever watches the shutdown) stops last.

// nodeService closes a libp2p node.
func nodeService(n *node.Node) rungroup.Service {
	return rungroup.Service{Name: "node", Stop: func() { n.Close() }}
}

// playerService runs a player until stopped; Run returns once the
// character is saved and the peer has left its regions and released its
// leases.
func playerService(p *play.Peer) rungroup.Service {
	ctx, stop := context.WithCancel(context.Background())
	return rungroup.Service{Name: "player", Run: func() error { return p.Run(ctx) }, Stop: stop}
}

// pageService serves the player's page on ln until stopped.
func pageService(srv *webui.Server, ln net.Listener) rungroup.Service {
	ctx, stop := context.WithCancel(context.Background())
	return rungroup.Service{
		Name: "page",
		Run: func() error {
			if err := srv.Serve(ctx, ln); err != nil && !errors.Is(err, net.ErrClosed) {
				return err
			}
			return nil
		},
		Stop: stop,
	}
}

// clientListenerService serves a mirror's clients (/ws), its probes
// (/healthz, /readyz) and reg's /metrics on ln until stopped.
func clientListenerService(ln net.Listener, m *mirror.Server, reg prometheus.Gatherer) rungroup.Service {
	mux := http.NewServeMux()
	mux.Handle("/", m.Handler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return rungroup.Service{
		Name: "client listener",
		Run: func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("client listener: %w", err)
			}
			return nil
		},
		Stop: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
		},
	}
}

// mirrorShutdownLimit bounds how long a stopping mirror waits for its
// players' last saves.
const mirrorShutdownLimit = 15 * time.Second

// mirrorService shuts a started mirror down when stopped: its players
// leave and are saved (mirrorShutdownLimit at most), a rotating authority
// hands its duty on, and the group, state server and CRIMP close.
func mirrorService(m *mirror.Server, out io.Writer) rungroup.Service {
	stop := make(chan struct{})
	return rungroup.Service{
		Name: "mirror",
		Run: func() error {
			<-stop
			fmt.Fprintln(out, "stopping: players leave and are saved")
			ctx, cancel := context.WithTimeout(context.Background(), mirrorShutdownLimit)
			defer cancel()
			return m.Shutdown(ctx)
		},
		Stop: func() { close(stop) },
	}
}

// pageSessionService runs a player's session with its mirror (the page's
// or a bot's client) until stopped.
func pageSessionService(page *mirror.PageSession) rungroup.Service {
	ctx, stop := context.WithCancel(context.Background())
	return rungroup.Service{Name: "player", Run: func() error { return page.Run(ctx) }, Stop: stop}
}
