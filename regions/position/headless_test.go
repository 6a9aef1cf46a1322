package position_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// TestHeadlessCoordinatorAggregates: in aggregated mode the region's
// coordinator is a peer without a player (`overworld peer`): its service
// never Moves. The players send it their updates, and it publishes them in
// batches all the same: every player hears every other in its batches, and
// none falls back to publishing directly once they come.
func TestHeadlessCoordinatorAggregates(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		mn := newNet(t, time.Millisecond)
		cfg := testConfig(true)
		cfg.Interval = 200 * time.Millisecond
		mid := regions.Coord{X: 1, Y: 1}
		const players = 3
		headless := newMockNode(t, mn, nil)
		named := func(regions.Coord) peer.ID { return headless.ID() }
		coordSvc, err := position.New(headless, cfg, position.WithCoordinators(named))
		if err != nil {
			t.Fatal(err)
		}
		all := []*testPeer{{node: headless, svc: coordSvc, region: mid}}
		var ps []*testPeer
		var logs []*watchLog
		for i := range players {
			n := newMockNode(t, mn, nil)
			log := newWatchLog()
			svc, err := position.New(n, cfg, position.WithCoordinators(named), position.WithDeliveryHook(log.hook))
			if err != nil {
				t.Fatal(err)
			}
			at := centre(cfg, mid)
			at.X += int32(i) * position.TileUnits
			svc.Move(at, position.Vec{})
			p := &testPeer{node: n, svc: svc, region: mid}
			ps, logs = append(ps, p), append(logs, log)
			all = append(all, p)
		}
		connectAll(t, mn, all)
		for _, l := range logs {
			l.start()
		}
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for _, p := range all {
			wg.Go(func() { _ = p.svc.Run(ctx) })
		}
		defer wg.Wait()
		defer cancel()

		const want = 5
		waitFor(t, 2*time.Minute, "every player to hear every other in the headless coordinator's batches", func() bool {
			for r := range ps {
				for s := range ps {
					if _, batched := logs[r].count(ps[s].node.ID()); r != s && batched < want {
						return false
					}
				}
			}
			return true
		})
		waitFor(t, 2*time.Minute, "every player to send to the coordinator alone", func() bool {
			for _, p := range ps {
				if p.svc.Stats().PublishingDirect {
					return false
				}
			}
			return true
		})
		st := coordSvc.Stats()
		if st.BatchesPublished == 0 || st.UplinkReceived == 0 {
			t.Fatalf("headless coordinator: %d batches published, %d updates received", st.BatchesPublished, st.UplinkReceived)
		}
		if st.Published != 0 {
			t.Errorf("the headless coordinator published %d updates of its own; it has no player", st.Published)
		}
		for i, p := range ps {
			if s := p.svc.Stats(); s.SentUplink == 0 {
				t.Errorf("player %d sent nothing to the coordinator: %+v", i, s)
			}
		}
		t.Logf("headless coordinator: %d batches of %d updates from %d received", st.BatchesPublished, st.BatchEntries, st.UplinkReceived)
	})
}
