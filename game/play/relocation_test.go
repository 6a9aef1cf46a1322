package play

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions/position"
)

// TestRespawnIsNoTeleport kills a player far from where it will respawn and
// checks that another peer follows it to its spawn point at once: the
// position updates announce the respawn as a relocation, so the receiver
// neither rejects them as a teleport nor penalises the sender.
func TestRespawnIsNoTeleport(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cfg := testGame()
		rc := game.RegionCoord{X: 0, Y: 1}
		var spawn game.Vec // where player 0 respawns after its first death
		tn := newTestNet(t, 2, rc, func(i int, p *Peer) {
			if i != 0 {
				return
			}
			p.With(func(av *Avatar) {
				w := av.World()
				spawn = w.SpawnPoint(p.ID(), rc, av.Player().Deaths+1)
				// Stand at least 6 tiles away from it, in the same region.
				far := int64(6*game.TileUnits) * int64(6*game.TileUnits)
				for ty := int32(1); ty < int32(cfg.RegionTiles)-1; ty++ {
					for tx := int32(1); tx < int32(cfg.RegionTiles)-1; tx++ {
						pos := game.Vec{
							X: (int32(rc.X)*int32(cfg.RegionTiles)+tx)*game.TileUnits + game.TileUnits/2,
							Y: (int32(rc.Y)*int32(cfg.RegionTiles)+ty)*game.TileUnits + game.TileUnits/2,
						}
						if game.DistSq(pos, spawn) > far && av.Place(pos) {
							return
						}
					}
				}
				t.Fatalf("no open ground 6 tiles from the spawn point %+v", spawn)
			})
		})
		a, b := tn.peers[0], tn.peers[1]
		near := func(want game.Vec) func() bool {
			return func() bool {
				v, ok := sees(b, a.ID())
				return ok && game.DistSq(game.Vec{X: v.X, Y: v.Y}, want) <= int64(game.TileUnits)*int64(game.TileUnits)
			}
		}
		before := a.Player().Pos
		waitFor(t, 30*time.Second, "P1 to see P0 where it stands", near(before))

		a.With(func(av *Avatar) { av.die(av.Tick(), "") })
		waitFor(t, 30*time.Second, "P0 to respawn", func() bool {
			p := a.Player()
			return p.Alive && p.Deaths == 1
		})
		if got := a.Player().Pos; got != spawn {
			t.Fatalf("P0 respawned at %+v, the world's spawn point is %+v", got, spawn)
		}
		waitFor(t, 30*time.Second, "P1 to see P0 at its spawn point", near(spawn))
		// The same counts reach Prometheus, with the region service's series.
		families, err := b.cfg.Registerer.(prometheus.Gatherer).Gather()
		if err != nil {
			t.Fatal(err)
		}
		series := map[string]float64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				series[f.GetName()] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
		if series["overworld_position_delivered_total"] == 0 {
			t.Errorf("P1 exports no delivered position updates: %v", series)
		}
		if _, ok := series["overworld_regions_held"]; !ok {
			t.Errorf("P1 exports no region series: %v", series)
		}
		st := b.pos.Stats()
		for _, reason := range []string{position.ReasonTeleport, position.ReasonRelocation} {
			if n := st.Rejected[reason]; n != 0 {
				t.Fatalf("P1 rejected %d of P0's updates as %s", n, reason)
			}
		}
	})
}
