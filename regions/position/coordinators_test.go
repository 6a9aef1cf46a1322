package position_test

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// TestWithCoordinators: in aggregated mode, the peer WithCoordinators names
// (here not the one placement picks) is the one that receives the
// players' uplink and publishes the region's batches, and the players see
// each other through it.
func TestWithCoordinators(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		mn := newNet(t, time.Millisecond)
		cfg := testConfig(true)
		region := regions.Coord{X: 1, Y: 1}
		var peers []*testPeer
		var ids []peer.ID
		for range 3 {
			n := newMockNode(t, mn, nil)
			peers = append(peers, &testPeer{node: n, region: region})
			ids = append(ids, n.ID())
		}
		placed, _ := regions.Placement(regions.Key(cfg.World, region), ids)
		var named peer.ID // any peer but the placement's coordinator
		for _, id := range ids {
			if id != placed {
				named = id
			}
		}
		for _, p := range peers {
			svc, err := position.New(p.node, cfg, position.WithCoordinators(func(regions.Coord) peer.ID { return named }))
			if err != nil {
				t.Fatal(err)
			}
			p.svc = svc
			svc.Move(centre(cfg, region), position.Vec{})
		}
		connectAll(t, mn, peers)
		runAll(t, ctx, peers)

		waitViews(t, peers, cfg.Radius, 3*time.Minute)
		for _, p := range peers {
			st := p.svc.Stats()
			if p.node.ID() == named {
				if st.UplinkReceived == 0 || st.BatchesPublished == 0 {
					t.Fatalf("the named coordinator received %d updates and published %d batches", st.UplinkReceived, st.BatchesPublished)
				}
			} else if st.BatchesPublished != 0 {
				t.Fatalf("peer %s, not named, published %d batches", p.node.ID(), st.BatchesPublished)
			}
		}
	})
}
