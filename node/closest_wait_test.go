package node

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestClosestPeersWaitsForFirstPeer: a lookup asked of a node whose
// routing table is still empty waits for its first peer instead of
// failing, and finds it.
func TestClosestPeersWaitsForFirstPeer(t *testing.T) {
	a := startNode(t, WithDHTMode(DHTServer))
	b := startNode(t, WithDHTMode(DHTServer))
	if n := b.DHT().RoutingTable().Size(); n != 0 {
		t.Fatalf("routing table holds %d peers before any connection", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type answer struct {
		found []peer.ID
		err   error
	}
	key := randomKey(t)
	done := make(chan answer, 1)
	go func() {
		found, err := b.ClosestPeers(ctx, key, 3)
		done <- answer{found, err}
	}()
	if err := b.Host().Connect(ctx, a.AddrInfo()); err != nil {
		t.Fatalf("connect: %v", err)
	}
	got := <-done
	if got.err != nil {
		t.Fatalf("lookup with an empty table at first: %v", got.err)
	}
	if !slices.Contains(got.found, a.ID()) {
		t.Fatalf("lookup found %v, want %s among them", got.found, a.ID())
	}
}
