package play

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
)

// TestEatUnderLocks: two players over TCP on 127.0.0.1 eat at once from
// food with two units left. Each eat locks the food at the region's
// coordinator, decides with the game's rule on the value the lock returns
// and writes with the release, so the second waits for the first and
// both eat (a read-write against the version read would have let one of
// them conflict).
func TestEatUnderLocks(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cfg := testGame()
		rc := game.RegionCoord{X: 1, Y: 0}
		food := isolatedFood(t, cfg, rc)
		tn := newTestNet(t, 2, rc, func(i int, p *Peer) {
			if !p.Place(food.Pos) {
				t.Fatalf("cannot place P%d on the food at %+v", i, food.Pos)
			}
		})
		a, b := tn.peers[0], tn.peers[1]
		for _, p := range tn.peers {
			waitFor(t, 30*time.Second, p.Name()+" loading the region", func() bool { return p.Loaded(rc) })
		}
		waitFor(t, 30*time.Second, "the peers to agree on the region's coordinator", func() bool {
			c0, r0 := a.Regions().Coordinator(coordOf(rc))
			c1, r1 := b.Regions().Coordinator(coordOf(rc))
			return c0 == c1 && r0 == r1
		})
		var cur game.VersionedObject
		a.With(func(av *Avatar) { cur, _ = av.World().ObjectTable().Get(food.ID) })
		two := cur.Object
		two.Amount = 2
		value, _ := two.MarshalBinary()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		obj, err := a.Regions().Client().ReadWrite(ctx, coordOf(rc), food.ID.Key(), cur.Version, value)
		if err != nil {
			t.Fatalf("leaving two units: %v", err)
		}
		for _, p := range tn.peers {
			waitFor(t, 20*time.Second, p.Name()+" seeing two units left", func() bool {
				var v game.VersionedObject
				p.With(func(av *Avatar) { v, _ = av.World().ObjectTable().Get(food.ID) })
				return v.Version == obj.Version && v.Object.Amount == 2
			})
		}
		var wg sync.WaitGroup
		results := make([]TakeResult, 2)
		errs := make([]error, 2)
		for i, p := range tn.peers {
			wg.Go(func() { results[i], errs[i] = p.EatNearest(ctx) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("P%d's eat: %v", i, err)
			}
		}
		amounts := map[uint16]bool{results[0].After.Object.Amount: true, results[1].After.Object.Amount: true}
		if !amounts[0] || !amounts[1] {
			t.Errorf("the two eats left %d and %d units, want 1 and 0", results[0].After.Object.Amount, results[1].After.Object.Amount)
		}
		if sa, sb := a.Player().Score, b.Player().Score; sa+sb != 2 {
			t.Errorf("scores %d and %d: both meals should count", sa, sb)
		}
		st, err := a.Regions().Client().Get(ctx, coordOf(rc))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range st.Objects {
			if o.ID == food.ID.Key() {
				v, err := game.UnmarshalObject(o.Value)
				if err != nil || v.Amount != 0 || o.Version != obj.Version+2 || o.LockHolder != "" {
					t.Errorf("the store holds %+v (%v) at version %d, lock %q; want amount 0 at version %d, unlocked", v, err, o.Version, o.LockHolder, obj.Version+2)
				}
			}
		}
	})
}
