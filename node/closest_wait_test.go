package node

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/peer"
)

// TestClosestPeersWaitsForFirstPeer: a lookup asked of a node whose
// routing table is still empty, though it is connected to a DHT server,
// waits for its first peer instead of failing, and finds it.
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
	// Connect returns once identify has answered; the DHT adds the peer
	// to the table only after its own check, a round trip later.
	if err := b.Host().Connect(ctx, a.AddrInfo()); err != nil {
		t.Fatalf("connect: %v", err)
	}
	found, err := b.ClosestPeers(ctx, randomKey(t), 3)
	got := answer{found, err}
	if got.err != nil {
		t.Fatalf("lookup with an empty table at first: %v", got.err)
	}
	if !slices.Contains(got.found, a.ID()) {
		t.Fatalf("lookup found %v, want %s among them", got.found, a.ID())
	}
}

// TestClosestPeersAloneFails: with no peer that serves the DHT to fill its
// routing table from, a lookup fails at once rather than waiting for its
// context, which here never ends.
func TestClosestPeersAloneFails(t *testing.T) {
	b := startNode(t, WithDHTMode(DHTServer))
	done := make(chan error, 1)
	key := randomKey(t)
	go func() {
		_, err := b.ClosestPeers(context.Background(), key, 3)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, kb.ErrLookupFailure) {
			t.Fatalf("lookup alone: %v, want the DHT's lookup failure", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("lookup with nobody to ask did not return")
	}
}
