// Package bootstrap holds the operator's services. This file is the
// bootstrap node: the stable, publicly reachable peer that players dial
// first. It serves the DHT (so a newcomer's first lookup fills its routing
// table), a circuit relay v2 (so players behind NAT can be reached while
// hole punching is tried) and AutoNAT (so players learn whether they are
// reachable). Players trust it, and only it, to tell them the address they
// are seen at, which is how a player behind NAT knows at once to run the
// DHT as a client (see package node). The relay keeps libp2p's default
// per-circuit limits (2 minutes, 128 KiB each way): enough for the small
// exchanges allowed over it (region requests, fights, whispers, tokens),
// not for position streams, which never need it. Its identity comes from a
// key file, so the multiaddrs the operator hands out stay valid across
// restarts.
//
// The account server and the coordinator lease service live in the
// subpackages accounts and leases.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/libp2p/go-libp2p"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/node"
)

// Config is what an operator sets for a bootstrap node.
type Config struct {
	// KeyFile holds the node's identity; created (0600) if missing.
	KeyFile string
	// ListenAddrs default to TCP and QUIC on port 4001 of every interface.
	ListenAddrs []ma.Multiaddr
	// Peers are other bootstrap nodes to join, for a fleet of several.
	Peers []string
	// Logger defaults to discarding.
	Logger *slog.Logger
	// Registerer receives the node's metrics; nil keeps them private.
	Registerer prometheus.Registerer
}

// Node is a running bootstrap node.
type Node struct {
	*node.Node
}

// Start starts a bootstrap node.
func Start(ctx context.Context, cfg Config) (*Node, error) {
	if cfg.KeyFile == "" {
		return nil, errors.New("bootstrap node: no key file given")
	}
	key, err := node.LoadOrCreateIdentity(cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("bootstrap node: %w", err)
	}
	peers, err := node.ParseBootstrapAddrs(cfg.Peers)
	if err != nil {
		return nil, fmt.Errorf("bootstrap node: %w", err)
	}
	opts := []node.Option{
		node.WithIdentity(key),
		node.WithDHTMode(node.DHTServer),
		node.WithLibp2pOptions(
			// An operator's bootstrap node is public by definition; without
			// this the relay service waits for AutoNAT peers to confirm it.
			libp2p.ForceReachabilityPublic(),
			libp2p.EnableRelayService(),
			libp2p.EnableNATService(),
		),
	}
	if len(cfg.ListenAddrs) > 0 {
		opts = append(opts, node.WithListenAddrs(cfg.ListenAddrs...))
	}
	if len(peers) > 0 {
		opts = append(opts, node.WithBootstrapPeers(peers...))
	}
	if cfg.Logger != nil {
		opts = append(opts, node.WithLogger(cfg.Logger))
	}
	if cfg.Registerer != nil {
		opts = append(opts, node.WithRegisterer(cfg.Registerer))
	}
	n, err := node.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("bootstrap node: %w", err)
	}
	return &Node{Node: n}, nil
}
