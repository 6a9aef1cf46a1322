package node

import (
	"context"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// natWatch keeps a node in DHTAuto mode from ever serving the DHT, or
// coordinating a region, from behind a NAT.
//
// AutoNAT would find the NAT too, but only after a dial-back times out
// (some 15 s): long enough for other peers to place regions on the node,
// and for the node, alone at start, to take regions itself. So the node
// decides at its first connection to a bootstrap node instead. Identify
// tells each side the address the other sees it at; a public address other
// than the connection's own local one means the address was translated on
// the way. The node then reports itself private on the event bus, as
// AutoNAT does, which turns the DHT to client mode and starts the relay
// client. Until a bootstrap node has identified it, the node does not
// count itself a coordinator candidate (CanCoordinate). Only the operator's
// bootstrap nodes are believed: any other peer could claim to see a public
// peer elsewhere and so knock it out of region placement. AutoNAT keeps
// the last word: its Public verdict (a one-to-one NAT with every port
// forwarded) makes the node a candidate again, its Private verdict makes
// it one no longer.
type natWatch struct {
	sub     event.Subscription
	emit    event.Emitter
	running bool    // natLoop started, and closes sub and emit
	by      peer.ID // the bootstrap node that saw the NAT; written before behind
	decided atomic.Bool
	behind  atomic.Bool
}

func (n *Node) startNATWatch() error {
	sub, err := n.host.EventBus().Subscribe(
		[]any{new(event.EvtPeerIdentificationCompleted), new(event.EvtLocalReachabilityChanged)},
		eventbus.Name("overworld nat watch"))
	if err != nil {
		return err
	}
	emit, err := n.host.EventBus().Emitter(new(event.EvtLocalReachabilityChanged), eventbus.Stateful)
	if err != nil {
		sub.Close()
		return err
	}
	n.nat = &natWatch{sub: sub, emit: emit}
	// With nobody to ask (tests, the simulator) there is nothing to wait for.
	n.nat.decided.Store(len(n.cfg.bootstrap) == 0)
	return nil
}

// natLoop follows identifications and reachability verdicts until ctx
// ends.
func (n *Node) natLoop(ctx context.Context) {
	defer n.wg.Done()
	defer n.nat.sub.Close()
	defer n.nat.emit.Close()
	reported, public := false, false
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-n.nat.sub.Out():
			if !ok {
				return
			}
			switch e := e.(type) {
			case event.EvtLocalReachabilityChanged:
				switch e.Reachability {
				case network.ReachabilityPublic:
					public = true
					n.nat.behind.Store(false)
				case network.ReachabilityPrivate:
					n.nat.behind.Store(true)
				}
			case event.EvtPeerIdentificationCompleted:
				if !n.isBootstrap(e.Peer) || e.Conn == nil {
					continue
				}
				if !reported && !public && translated(e.Conn.LocalMultiaddr(), e.ObservedAddr) {
					reported = true
					n.nat.by = e.Peer
					n.nat.behind.Store(true)
					n.log.Info("behind NAT: running the DHT as a client and reserving relay slots",
						"seen_as", e.ObservedAddr, "by", e.Peer, "local", e.Conn.LocalMultiaddr())
					if err := n.nat.emit.Emit(event.EvtLocalReachabilityChanged{Reachability: network.ReachabilityPrivate}); err != nil {
						n.log.Warn("reporting NAT", "err", err)
					}
				}
				n.nat.decided.Store(true)
			}
		}
	}
}

func (n *Node) isBootstrap(p peer.ID) bool {
	for _, b := range n.cfg.bootstrap {
		if b.ID == p {
			return true
		}
	}
	return false
}

// translated reports whether a peer saw this node at a public address
// whose IP is not the connection's local one.
func translated(local, observed ma.Multiaddr) bool {
	if local == nil || observed == nil || !manet.IsPublicAddr(observed) {
		return false
	}
	lip, err1 := manet.ToIP(local)
	oip, err2 := manet.ToIP(observed)
	return err1 == nil && err2 == nil && !lip.Equal(oip)
}

// BehindNAT reports whether the node believes it is behind a NAT (see
// DHTAuto). Always false in the server and client modes, which do not look.
func (n *Node) BehindNAT() bool { return n.nat != nil && n.nat.behind.Load() }

// selfCandidate reports whether this node may count itself a coordinator
// candidate: in DHTAuto mode only once a bootstrap node has identified it
// and it is not behind NAT.
func (n *Node) selfCandidate() bool {
	return n.nat == nil || (n.nat.decided.Load() && !n.nat.behind.Load())
}
