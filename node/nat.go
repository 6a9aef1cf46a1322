package node

import (
	"context"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// natWatch spots a NAT at the first connection that shows one, so that a
// node in DHTAuto mode never serves the DHT (and so never counts as a
// coordinator candidate) from behind it. AutoNAT would say so too, but
// only after a dial-back times out (some 15 s), long enough for other
// peers to place regions on it. The evidence: identify tells each side
// the address the other sees it at, and a public address other than the
// connection's own local one means the address was translated on the way.
// The node then reports itself private on the event bus, as AutoNAT does,
// which turns the DHT to client mode and starts the relay client; should
// AutoNAT later find the node reachable after all (a one-to-one NAT with
// every port forwarded), its Public verdict turns both back.
type natWatch struct {
	sub     event.Subscription
	emit    event.Emitter
	running bool // natLoop started, and closes sub and emit
	behind  atomic.Bool
}

func (n *Node) startNATWatch() error {
	sub, err := n.host.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted), eventbus.Name("overworld nat watch"))
	if err != nil {
		return err
	}
	emit, err := n.host.EventBus().Emitter(new(event.EvtLocalReachabilityChanged), eventbus.Stateful)
	if err != nil {
		sub.Close()
		return err
	}
	n.nat = &natWatch{sub: sub, emit: emit}
	return nil
}

// natLoop reads identifications until the first that shows a NAT, or until
// ctx ends.
func (n *Node) natLoop(ctx context.Context) {
	defer n.wg.Done()
	defer n.nat.sub.Close()
	defer n.nat.emit.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-n.nat.sub.Out():
			if !ok {
				return
			}
			id := e.(event.EvtPeerIdentificationCompleted)
			if id.Conn == nil || !translated(id.Conn.LocalMultiaddr(), id.ObservedAddr) {
				continue
			}
			n.nat.behind.Store(true)
			n.log.Info("behind NAT: running the DHT as a client and reserving relay slots",
				"seen_as", id.ObservedAddr, "by", id.Peer, "local", id.Conn.LocalMultiaddr())
			if err := n.nat.emit.Emit(event.EvtLocalReachabilityChanged{Reachability: network.ReachabilityPrivate}); err != nil {
				n.log.Warn("reporting NAT", "err", err)
			}
			return
		}
	}
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

// BehindNAT reports whether the node has seen itself behind a NAT (see
// DHTAuto). Always false in the server and client modes, which do not look.
func (n *Node) BehindNAT() bool { return n.nat != nil && n.nat.behind.Load() }
