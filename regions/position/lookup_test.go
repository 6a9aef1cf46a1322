package position_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// TestWithLookup: each player's view names itself as its region's
// coordinator until its lookup (WithLookup) has run, as a thin routing
// table would, and the named coordinator after. The lookup runs, the
// players turn to the one coordinator, only it goes on publishing the
// region's batches, and the players see each other.
func TestWithLookup(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		mn := newNet(t, time.Millisecond)
		cfg := testConfig(true)
		region := regions.Coord{X: 1, Y: 1}
		var peers []*testPeer
		for range 3 {
			n := newMockNode(t, mn, nil)
			peers = append(peers, &testPeer{node: n, region: region})
		}
		named := peers[0].node.ID()
		looked := make([]atomic.Bool, len(peers))
		for i, p := range peers {
			self := p.node.ID()
			view := func(regions.Coord) peer.ID {
				if looked[i].Load() {
					return named
				}
				return self
			}
			lookup := func(context.Context, regions.Coord) error {
				looked[i].Store(true)
				return nil
			}
			svc, err := position.New(p.node, cfg, position.WithCoordinators(view), position.WithLookup(lookup))
			if err != nil {
				t.Fatal(err)
			}
			p.svc = svc
			svc.Move(centre(cfg, region), position.Vec{})
		}
		connectAll(t, mn, peers)
		runAll(t, ctx, peers)

		waitViews(t, peers, cfg.Radius, 3*time.Minute)
		for i := range peers {
			if !looked[i].Load() {
				t.Fatalf("peer %d never ran its lookup", i)
			}
		}
		// Once every peer has turned to the named coordinator, the others
		// publish no more batches while it publishes several.
		before := make([]uint64, len(peers))
		for i, p := range peers {
			before[i] = p.svc.Stats().BatchesPublished
		}
		vnettest.EventuallyWithin(t, time.Minute, "five batches more from the named coordinator", func() bool {
			return peers[0].svc.Stats().BatchesPublished >= before[0]+5
		})
		for i, p := range peers[1:] {
			if got := p.svc.Stats().BatchesPublished; got != before[i+1] {
				t.Fatalf("peer %d, not named, published %d batches after the lookup (had %d)", i+1, got, before[i+1])
			}
		}
	})
}
