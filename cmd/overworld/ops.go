package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/overworld-p2p/overworld/cmd/overworld/internal/rungroup"
	"github.com/overworld-p2p/overworld/node"
)

// opsServer serves what an operator's monitoring scrapes: /metrics,
// /healthz (alive) and /readyz (503 until ready and again while stopping).
type opsServer struct {
	ready atomic.Bool
	srv   *http.Server
	ln    net.Listener
}

// newProcessRegistry returns a registry with the Go runtime and process
// collectors, for a process's own /metrics.
func newProcessRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// startOps listens on addr (empty: no server) and serves until stopped:
// add service() to the process's run group first and readiness() last, so
// /readyz fails as soon as the process starts stopping and /metrics stays
// up until everything else has stopped.
func startOps(addr string, g prometheus.Gatherer, log *slog.Logger) (*opsServer, error) {
	o := &opsServer{}
	if addr == "" {
		return o, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listener %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !o.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	o.ln = ln
	o.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := o.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	return o, nil
}

func (o *opsServer) setReady(v bool) { o.ready.Store(v) }

// service stops the server; it goes first into a run group, to stop last.
func (o *opsServer) service() rungroup.Service {
	return rungroup.Service{Name: "metrics", Stop: o.stop}
}

// readiness turns /readyz to 503; it goes last into a run group, to stop
// first.
func (o *opsServer) readiness() rungroup.Service {
	return rungroup.Service{Name: "readiness", Stop: func() { o.setReady(false) }}
}

// url is where /metrics is served ("" when off).
func (o *opsServer) url() string {
	if o.ln == nil {
		return ""
	}
	return "http://" + o.ln.Addr().String() + "/metrics"
}

func (o *opsServer) stop() {
	o.ready.Store(false)
	if o.srv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	o.srv.Shutdown(ctx)
}

// parseMultiaddrs parses a comma-separated list of multiaddrs.
func parseMultiaddrs(list string) ([]ma.Multiaddr, error) {
	var out []ma.Multiaddr
	for _, s := range splitList(list) {
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("multiaddr %q: %w", s, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// requireBootstrap parses the -bootstrap flag's list of full multiaddrs
// and insists on at least one; hint tells the user where to get one.
func requireBootstrap(list, hint string) ([]peer.AddrInfo, error) {
	boot, err := node.ParseBootstrapAddrs(splitList(list))
	if err != nil {
		return nil, fmt.Errorf("-bootstrap: %w", err)
	}
	if len(boot) == 0 {
		return nil, fmt.Errorf("-bootstrap: give at least one bootstrap node's multiaddr (%s)", hint)
	}
	return boot, nil
}

// splitList splits a comma-separated flag value, dropping empty entries.
func splitList(list string) []string {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// listenAddrsForPort is TCP and QUIC on every interface at port.
func listenAddrsForPort(host string, port int) string {
	return fmt.Sprintf("/ip4/%s/tcp/%d,/ip4/%s/udp/%d/quic-v1", host, port, host, port)
}
