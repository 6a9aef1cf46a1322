// Package devnet runs a whole overlay in one process on 127.0.0.1: one
// bootstrap node and N peers, each a real libp2p host on its own TCP port.
// It is what `overworld devnet` runs and what the demo builds on.
//
// Start brings up the bootstrap node first, then the peers, all pointed at
// it; each peer's join is reported on the Joined channel as it happens.
// Close stops the peers, then the bootstrap node.
package devnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/overworld-p2p/overworld/bootstrap"
	"github.com/overworld-p2p/overworld/node"
)

// Config sizes the devnet.
type Config struct {
	// Peers is how many peers to start besides the bootstrap node.
	Peers int
	// DataDir holds every identity (bootstrap.key, peer-N/identity.key), so
	// a devnet restarted on the same dir has the same peer IDs.
	DataDir string
	// Logger defaults to discarding.
	Logger *slog.Logger
	// NodeOptions are added to every peer (not the bootstrap node).
	NodeOptions []node.Option
}

// Join is one peer's join, as it happened.
type Join struct {
	Index int // 1..Peers
	Node  *node.Node
	After time.Duration // since Start was called
}

// Devnet is a running local overlay.
type Devnet struct {
	Bootstrap *bootstrap.Node
	Peers     []*node.Node
	joined    chan Join
	cancel    context.CancelFunc
	done      chan struct{}
}

var loopback = ma.StringCast("/ip4/127.0.0.1/tcp/0")

// Start starts the bootstrap node and the peers; it returns once all are
// started, not joined (watch Joined for that).
func Start(ctx context.Context, cfg Config) (_ *Devnet, err error) {
	if cfg.Peers < 0 {
		return nil, fmt.Errorf("devnet: %d peers", cfg.Peers)
	}
	if cfg.DataDir == "" {
		return nil, errors.New("devnet: no data dir")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	began := time.Now()
	d := &Devnet{joined: make(chan Join, cfg.Peers), done: make(chan struct{})}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	d.Bootstrap, err = bootstrap.Start(ctx, bootstrap.Config{
		KeyFile:     filepath.Join(cfg.DataDir, "bootstrap.key"),
		ListenAddrs: []ma.Multiaddr{loopback},
		Logger:      log.With("node", "bootstrap"),
	})
	if err != nil {
		return nil, err
	}
	boot := d.Bootstrap.AddrInfo()
	for i := 1; i <= cfg.Peers; i++ {
		opts := append([]node.Option{
			node.WithDataDir(filepath.Join(cfg.DataDir, fmt.Sprintf("peer-%d", i))),
			node.WithListenAddrs(loopback),
			node.WithBootstrapPeers(boot),
			node.WithLogger(log.With("node", fmt.Sprintf("peer-%d", i))),
		}, cfg.NodeOptions...)
		n, err := node.New(ctx, opts...)
		if err != nil {
			return nil, fmt.Errorf("devnet peer %d: %w", i, err)
		}
		d.Peers = append(d.Peers, n)
	}
	watchCtx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	go d.watchJoins(watchCtx, began)
	return d, nil
}

// watchJoins reports each peer's join once, in the order they happen.
func (d *Devnet) watchJoins(ctx context.Context, began time.Time) {
	defer close(d.done)
	defer close(d.joined)
	pending := make(map[int]*node.Node, len(d.Peers))
	for i, n := range d.Peers {
		pending[i+1] = n
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for len(pending) > 0 {
		for i := 1; i <= len(d.Peers); i++ {
			n, ok := pending[i]
			if !ok {
				continue
			}
			select {
			case <-n.Joined():
				delete(pending, i)
				d.joined <- Join{Index: i, Node: n, After: time.Since(began)}
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// Joined yields each peer's join once and is closed when all have joined
// (or the devnet is closed).
func (d *Devnet) Joined() <-chan Join { return d.joined }

// TableSizes returns the routing table size of the bootstrap node and of
// each peer, in order.
func (d *Devnet) TableSizes() []int {
	sizes := []int{d.Bootstrap.DHT().RoutingTable().Size()}
	for _, n := range d.Peers {
		sizes = append(sizes, n.DHT().RoutingTable().Size())
	}
	return sizes
}

// Close stops the peers, then the bootstrap node.
func (d *Devnet) Close() error {
	if d.cancel != nil {
		d.cancel()
		<-d.done
	}
	var errs []error
	for _, n := range d.Peers {
		errs = append(errs, n.Close())
	}
	if d.Bootstrap != nil {
		errs = append(errs, d.Bootstrap.Close())
	}
	return errors.Join(errs...)
}
