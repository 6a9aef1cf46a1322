package position_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// TestAdmission: with WithAdmission, updates of a refused player are
// rejected (counted as bad_token) and of a not-yet-admitted one ignored,
// and neither is ever delivered, while admitted players see each other; in
// aggregated mode the coordinator refuses the refused player's uplink.
func TestAdmission(t *testing.T) {
	for _, aggregate := range []bool{false, true} {
		t.Run(fmt.Sprintf("aggregate=%v", aggregate), func(t *testing.T) {
			vnettest.Run(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				mn := newNet(t, time.Millisecond)
				cfg := testConfig(aggregate)
				const honest, refused, pending = 0, 2, 3
				var (
					peers  []*testPeer
					ids    = make([]peer.ID, 4)
					mu     sync.Mutex
					leaked []string
				)
				for i := range ids {
					n := newMockNode(t, mn, nil)
					ids[i] = n.ID()
					peers = append(peers, &testPeer{node: n})
				}
				admission := func(p peer.ID) position.Verdict {
					switch p {
					case ids[refused]:
						return position.Reject
					case ids[pending]:
						return position.Ignore
					}
					return position.Accept
				}
				// A region whose coordinator is admitted, so that its batches
				// are heard.
				region, found := regions.Coord{}, false
				for i := 0; i < cfg.Width*cfg.Height && !found; i++ {
					region = regions.Coord{X: i % cfg.Width, Y: i / cfg.Width}
					co, _ := regions.Placement(regions.Key(cfg.World, region), ids)
					found = co == ids[0] || co == ids[1]
				}
				if !found {
					t.Skip("no region coordinated by an admitted peer (chance 1/512)")
				}
				for i, p := range peers {
					svc, err := position.New(p.node, cfg, position.WithAdmission(admission),
						position.WithDeliveryHook(func(d position.Delivery) {
							if d.Player == ids[refused] || d.Player == ids[pending] {
								mu.Lock()
								leaked = append(leaked, fmt.Sprintf("peer %d got seq %d of %s", i, d.Seq, d.Player))
								mu.Unlock()
							}
						}))
					if err != nil {
						t.Fatal(err)
					}
					p.svc, p.region = svc, region
					svc.Move(centre(cfg, region), position.Vec{})
				}
				connectAll(t, mn, peers)
				runAll(t, ctx, peers)

				a, b := peers[honest], peers[1]
				sees := func(p *testPeer, id peer.ID) bool {
					for _, s := range p.svc.View(time.Now()) {
						if s.Player == id {
							return true
						}
					}
					return false
				}
				waitFor(t, 60*time.Second, "the admitted players to see each other", func() bool {
					return sees(a, b.node.ID()) && sees(b, a.node.ID())
				})
				// Refusals are counted where they happen: on every receiver in
				// direct mode, at the coordinator in aggregated mode.
				waitFor(t, 30*time.Second, "the refused player's updates to be rejected", func() bool {
					for _, p := range peers[:2] {
						st := p.svc.Stats()
						if st.Rejected[position.ReasonBadToken] > 0 && (aggregate || st.Ignored[position.ReasonTokenPending] > 0) {
							return true
						}
					}
					return false
				})
				for i, p := range peers[:2] {
					for _, id := range ids[2:] {
						if sees(p, id) {
							t.Errorf("peer %d sees %s, which is not admitted", i, id)
						}
					}
				}
				mu.Lock()
				defer mu.Unlock()
				if len(leaked) > 0 {
					t.Fatalf("updates of players not admitted were delivered: %v", leaked)
				}
			})
		})
	}
}
