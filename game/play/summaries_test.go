package play

import (
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions/position"
)

// summaryCounts counts, per player, the updates a peer took from
// summaries.
type summaryCounts struct {
	mu sync.Mutex
	n  map[peer.ID]int
}

func (c *summaryCounts) hook(d position.Delivery) {
	if !d.Summary {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[d.Player]++
}

func (c *summaryCounts) of(p peer.ID) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[p]
}

// TestSummariesBetweenRegions runs four players with the world's position
// summaries on, two in the middle of each of two adjacent regions, over
// TCP on 127.0.0.1: every player sees the other three, and hears the two of the
// other region from their coordinator's summaries.
func TestSummariesBetweenRegions(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		const count = 4
		counts := make([]*summaryCounts, count)
		// Each stands near its region's middle, far from the border (a player
		// within Prefetch of it follows the region across at full rate).
		middle := func(i int, p *Peer) {
			g := testGame()
			side := int32(g.RegionTiles) * game.TileUnits
			for d := int32(0); d < 4*game.TileUnits; d += game.TileUnits / 2 {
				at := game.Vec{X: int32(i%2)*side + side/2 + d, Y: side/2 + d}
				if p.Place(at) {
					return
				}
			}
			t.Fatalf("no free spot near the middle of P%d's region", i)
		}
		tn := newTestNetWith(t, count, game.RegionCoord{}, middle, func(i int, c *Config) {
			c.Summaries = position.DefaultSummaries()
			c.StartRegion = &game.RegionCoord{X: i % 2}
			counts[i] = &summaryCounts{n: map[peer.ID]int{}}
			c.positionOptions = []position.Option{position.WithDeliveryHook(counts[i].hook)}
		})
		for i, p := range tn.peers {
			for j, q := range tn.peers {
				if i == j {
					continue
				}
				waitFor(t, 60*time.Second, "every player seeing every other", func() bool {
					_, ok := sees(p, q.ID())
					return ok
				})
				if i%2 != j%2 {
					waitFor(t, 60*time.Second, "a summary of the other region's players", func() bool {
						return counts[i].of(q.h.ID()) > 0
					})
				}
			}
		}
		var published uint64
		for _, p := range tn.peers {
			published += p.pos.Stats().SummariesPublished
		}
		if published == 0 {
			t.Error("no coordinator published a summary")
		}
	})
}
