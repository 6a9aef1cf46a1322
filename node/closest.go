package node

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// KeyDistanceLess reports whether a is XOR-closer to key than b, in the
// DHT's keyspace: both the key and the peer IDs are hashed with SHA-256.
// Ties cannot happen between distinct peers.
func KeyDistanceLess(key string, a, b peer.ID) bool {
	return kb.Closer(a, b, key)
}

// SortByDistance orders peers by XOR distance to key, closest first, in
// place, and returns them.
func SortByDistance(key string, peers []peer.ID) []peer.ID {
	sorted := kb.SortClosestPeers(peers, kb.ConvertKey(key))
	copy(peers, sorted)
	return peers
}

// ClosestKnown returns up to count peers closest to key among this node and
// the peers in its routing table, closest first. It asks nobody, so it is
// cheap, and right once the table has settled. Only DHT servers count: the
// routing table holds nothing else, and this node itself only while it
// can coordinate (see CanCoordinate).
func (n *Node) ClosestKnown(key string, count int) []peer.ID {
	if count <= 0 {
		return nil
	}
	candidates := n.dht.RoutingTable().NearestPeers(kb.ConvertKey(key), count)
	return n.closestWithSelf(key, candidates, count)
}

// ClosestPeers runs a network lookup for key and returns up to count peers
// closest to it, this node included while it can coordinate, closest first.
// The DHT's own lookup never returns the asking node, which would make a
// peer believe someone else coordinates the regions it should.
func (n *Node) ClosestPeers(ctx context.Context, key string, count int) ([]peer.ID, error) {
	if count <= 0 {
		return nil, nil
	}
	found, err := n.dht.GetClosestPeers(ctx, key)
	if errors.Is(err, kb.ErrLookupFailure) && n.awaitRoutingPeer(ctx) {
		// The table was empty: a node that has just connected to its
		// first peers adds them only once identify and the DHT's own
		// check of each have answered. Look again once it holds one.
		found, err = n.dht.GetClosestPeers(ctx, key)
	}
	if err != nil && len(found) == 0 {
		return nil, fmt.Errorf("closest peers to %q: %w", key, err)
	}
	// A lookup that timed out still returns what it found; fall back on the
	// routing table's view for the rest.
	found = append(found, n.dht.RoutingTable().NearestPeers(kb.ConvertKey(key), count)...)
	return n.closestWithSelf(key, found, count), nil
}

// routingPoll is how often awaitRoutingPeer looks at the routing table.
const routingPoll = 20 * time.Millisecond

// awaitRoutingPeer waits until the DHT's routing table holds a peer, and
// reports whether it does before ctx ends. It gives up at once when no
// connected peer serves the DHT or may yet turn out to (identify has not
// told its protocols): then the table has nothing to fill from (a network
// of DHT clients, as the simulator's directory placement runs, whose
// callers expect the lookup to fail at once, not at their deadline).
func (n *Node) awaitRoutingPeer(ctx context.Context) bool {
	tick := time.NewTicker(routingPoll)
	defer tick.Stop()
	for n.dht.RoutingTable().Size() == 0 {
		if !slices.ContainsFunc(n.host.Network().Peers(), n.mayServeDHT) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
	return true
}

// mayServeDHT reports whether p serves the DHT or identify has not told
// yet.
func (n *Node) mayServeDHT(p peer.ID) bool {
	if protos, _ := n.host.Peerstore().GetProtocols(p); len(protos) == 0 {
		return true
	}
	return n.ServesDHT(p)
}

// ServesDHT reports whether p answers DHT queries as far as this node
// knows: for itself, whether it is in server mode now; for another peer,
// whether identify told it p speaks DHTProtocol. A peer behind NAT runs the
// DHT in client mode, so it does not: nobody can dial it, and it is never
// placed as a region's coordinator or replica.
func (n *Node) ServesDHT(p peer.ID) bool {
	if p == n.host.ID() {
		return slices.Contains(n.host.Mux().Protocols(), protocol.ID(DHTProtocol))
	}
	protos, err := n.host.Peerstore().SupportsProtocols(p, DHTProtocol)
	return err == nil && len(protos) > 0
}

// CanCoordinate reports whether p may be placed as a region's coordinator
// or replica: whether it serves the DHT (ServesDHT), since a peer behind
// NAT runs it in client mode and others could reach it only through a
// relay. This node itself, in DHTAuto mode, counts only once a bootstrap
// node has shown it is not behind NAT (see natWatch). On a network built
// WithEveryPeerReachable every peer can.
func (n *Node) CanCoordinate(p peer.ID) bool {
	if n.cfg.everyPeerReachable {
		return true
	}
	return n.ServesDHT(p) && (p != n.host.ID() || n.selfCandidate())
}

func (n *Node) closestWithSelf(key string, peers []peer.ID, count int) []peer.ID {
	self := n.host.ID()
	seen := make(map[peer.ID]bool, len(peers)+1)
	all := make([]peer.ID, 0, len(peers)+1)
	if n.CanCoordinate(self) {
		peers = append(peers, self)
	}
	for _, p := range peers {
		if !seen[p] {
			seen[p] = true
			all = append(all, p)
		}
	}
	SortByDistance(key, all)
	if len(all) > count {
		all = all[:count]
	}
	return all
}
