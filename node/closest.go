package node

import (
	"context"
	"fmt"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
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
// cheap, and right once the table has settled.
func (n *Node) ClosestKnown(key string, count int) []peer.ID {
	if count <= 0 {
		return nil
	}
	candidates := n.dht.RoutingTable().NearestPeers(kb.ConvertKey(key), count)
	return closestWithSelf(key, n.host.ID(), candidates, count)
}

// ClosestPeers runs a network lookup for key and returns up to count peers
// closest to it, this node included, closest first. The DHT's own lookup
// never returns the asking node, which would make a peer believe someone
// else coordinates the regions it should.
func (n *Node) ClosestPeers(ctx context.Context, key string, count int) ([]peer.ID, error) {
	if count <= 0 {
		return nil, nil
	}
	found, err := n.dht.GetClosestPeers(ctx, key)
	if err != nil && len(found) == 0 {
		return nil, fmt.Errorf("closest peers to %q: %w", key, err)
	}
	// A lookup that timed out still returns what it found; fall back on the
	// routing table's view for the rest.
	found = append(found, n.dht.RoutingTable().NearestPeers(kb.ConvertKey(key), count)...)
	return closestWithSelf(key, n.host.ID(), found, count), nil
}

func closestWithSelf(key string, self peer.ID, peers []peer.ID, count int) []peer.ID {
	seen := make(map[peer.ID]bool, len(peers)+1)
	all := make([]peer.ID, 0, len(peers)+1)
	for _, p := range append(peers, self) {
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
