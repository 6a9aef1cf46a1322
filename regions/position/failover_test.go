package position_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// failoverScene is a region in aggregated mode: its coordinator c1, a
// second peer c2 that takes over later, players, and a listener in the
// adjacent region. Each runs a real position service on the in-memory
// network; which peer coordinates is what coordinator() says, as the
// region service would name it.
type failoverScene struct {
	t     *testing.T
	cfg   position.Config
	mn    *vnettest.Cluster
	peers []*testPeer // c1, c2, players..., listener
	logs  []*watchLog
	stops []context.CancelFunc
	coord atomic.Value // peer.ID
}

const (
	sceneC1 = iota
	sceneC2
	scenePlayers // first player index
)

func newFailoverScene(t *testing.T, players int) *failoverScene {
	t.Helper()
	mn := newNet(t, time.Millisecond)
	cfg := testConfig(true)
	cfg.Interval = 200 * time.Millisecond
	sc := &failoverScene{t: t, cfg: cfg, mn: mn}
	mid, left := regions.Coord{X: 1, Y: 1}, regions.Coord{X: 0, Y: 1}
	count := scenePlayers + players + 1
	nodes := make([]*node.Node, count)
	for i := range count {
		nodes[i] = newMockNode(t, mn, nil)
	}
	sc.coord.Store(nodes[sceneC1].ID())
	named := func(regions.Coord) peer.ID { return sc.coord.Load().(peer.ID) }
	for i, n := range nodes {
		r := mid
		if i == count-1 {
			r = left
		}
		log := newWatchLog()
		svc, err := position.New(n, cfg, position.WithCoordinators(named), position.WithDeliveryHook(log.hook))
		if err != nil {
			t.Fatal(err)
		}
		// Spread the players a little over the region.
		at := centre(cfg, r)
		at.X += int32(i) * position.TileUnits
		svc.Move(at, position.Vec{})
		sc.peers = append(sc.peers, &testPeer{node: n, svc: svc, region: r})
		sc.logs = append(sc.logs, log)
	}
	connectAll(t, mn, sc.peers)
	var wg sync.WaitGroup
	for _, p := range sc.peers {
		ctx, stop := context.WithCancel(context.Background())
		sc.stops = append(sc.stops, stop)
		wg.Go(func() { _ = p.svc.Run(ctx) })
	}
	t.Cleanup(func() {
		for _, stop := range sc.stops {
			stop()
		}
		wg.Wait()
	})
	return sc
}

// senders are the peers whose updates the test follows: every player
// that stays up (c2 included: it is a player of the region too).
func (sc *failoverScene) senders() []int {
	out := []int{sceneC2}
	for i := scenePlayers; i < len(sc.peers)-1; i++ {
		out = append(out, i)
	}
	return out
}

// receivers are the peers that stay up.
func (sc *failoverScene) receivers() []int {
	out := []int{}
	for i := sceneC2; i < len(sc.peers); i++ {
		out = append(out, i)
	}
	return out
}

// untilEveryoneHears waits until every receiver took at least n updates
// of every sender numbered above from[sender] (batched: counted only
// from batches), or fails.
func (sc *failoverScene) untilEveryoneHears(what string, n int, batched bool) {
	sc.t.Helper()
	mark := map[[2]int]int{}
	for _, r := range sc.receivers() {
		for _, s := range sc.senders() {
			if r != s {
				all, b := sc.logs[r].count(sc.peers[s].node.ID())
				mark[[2]int{r, s}] = all
				if batched {
					mark[[2]int{r, s}] = b
				}
			}
		}
	}
	waitFor(sc.t, 3*time.Minute, what, func() bool {
		for k, before := range mark {
			all, b := sc.logs[k[0]].count(sc.peers[k[1]].node.ID())
			got := all
			if batched {
				got = b
			}
			if got-before < n {
				return false
			}
		}
		return true
	})
}

// TestAggregatedFailover kills the coordinator of a region in aggregated
// mode, once by crashing its node and once by silencing it (it keeps
// taking the players' updates, and nobody hears its batches: every peer's
// gossipsub drops its messages), and later names a working one. The
// players publish directly while their coordinator does not answer and go
// back to it when it does; through all of it every receiver misses at
// most FallbackAfter consecutive updates of any player (counted in
// sequence numbers, one per interval), and the fallbacks are counted.
func TestAggregatedFailover(t *testing.T) {
	for _, kill := range []string{"crash", "silent"} {
		t.Run(kill, func(t *testing.T) {
			vnettest.Run(t, func(t *testing.T) {
				sc := newFailoverScene(t, 3)
				c1, c2 := sc.peers[sceneC1], sc.peers[sceneC2]
				waitViews(t, sc.peers, sc.cfg.Radius, 3*time.Minute)
				for _, l := range sc.logs {
					l.start()
				}
				sc.untilEveryoneHears("batches from the first coordinator", 5, true)
				for _, i := range sc.senders() {
					if st := sc.peers[i].svc.Stats(); st.PublishingDirect {
						t.Fatalf("peer %d publishes directly with a working coordinator: %+v", i, st)
					}
				}
				before := map[int]uint64{}
				for _, i := range sc.senders() {
					before[i] = sc.peers[i].svc.Stats().FallbackPublished
				}

				// The coordinator goes.
				switch kill {
				case "crash":
					sc.stops[sceneC1]()
					if err := c1.node.Close(); err != nil {
						t.Fatal(err)
					}
				case "silent":
					for _, i := range sc.receivers() {
						sc.peers[i].node.PubSub().BlacklistPeer(c1.node.ID())
					}
				}
				waitFor(t, 3*time.Minute, "every player to publish directly", func() bool {
					for _, i := range sc.senders() {
						if !sc.peers[i].svc.Stats().PublishingDirect {
							return false
						}
					}
					return true
				})
				sc.untilEveryoneHears("direct updates while the coordinator is gone", 10, false)

				// The region service names c2; the players go back to
				// sending it alone.
				sc.coord.Store(c2.node.ID())
				waitFor(t, 3*time.Minute, "every player back in aggregated mode", func() bool {
					for _, i := range sc.senders() {
						if st := sc.peers[i].svc.Stats(); st.PublishingDirect || st.FallbackResumed == 0 {
							return false
						}
					}
					return true
				})
				published := map[int]uint64{}
				for _, i := range sc.senders() {
					published[i] = sc.peers[i].svc.Stats().FallbackPublished
				}
				sc.untilEveryoneHears("batches from the new coordinator", 10, true)
				for _, l := range sc.logs {
					l.stop()
				}

				bound := uint64(sc.cfg.FallbackAfter) + 1
				var worst uint64
				for _, r := range sc.receivers() {
					for _, s := range sc.senders() {
						if r == s {
							continue
						}
						hist, largest := sc.logs[r].gaps(sc.peers[s].node.ID())
						t.Logf("receiver %d, sender %d: steps %s", r, s, formatHist(hist))
						worst = max(worst, largest)
						if largest > bound {
							t.Errorf("receiver %d missed %d consecutive updates of sender %d; the bound is FallbackAfter = %d",
								r, largest-1, s, sc.cfg.FallbackAfter)
						}
					}
				}
				t.Logf("%s: largest step %d (missed %d in a row; bound %d)", kill, worst, worst-1, sc.cfg.FallbackAfter)
				for _, i := range sc.senders() {
					st := sc.peers[i].svc.Stats()
					reasons := st.Fallbacks[position.FallbackUnanswered] + st.Fallbacks[position.FallbackUplinkFailed] + st.Fallbacks[position.FallbackNoCoordinator]
					if reasons == 0 || st.FallbackPublished <= before[i] {
						t.Errorf("peer %d counted no fallback: %+v", i, st)
					}
					if kill == "silent" && st.Fallbacks[position.FallbackUnanswered] == 0 {
						t.Errorf("peer %d: a silent coordinator is a fallback for unanswered updates: %v", i, st.Fallbacks)
					}
					t.Logf("peer %d: fallbacks %v, resumed %d, published directly %d", i, st.Fallbacks, st.FallbackResumed, st.FallbackPublished)
				}
				for _, i := range sc.senders() {
					t.Logf("peer %d published %d updates directly after going back to its coordinator",
						i, sc.peers[i].svc.Stats().FallbackPublished-published[i])
				}
				// The fallbacks reach Prometheus.
				reg := prometheus.NewRegistry()
				reg.MustRegister(position.NewCollector(sc.peers[scenePlayers].svc))
				if got := gathered(t, reg, "overworld_position_fallbacks_total"); got == 0 {
					t.Errorf("overworld_position_fallbacks_total is %v", got)
				}
				if got := gathered(t, reg, "overworld_position_fallback_resumed_total"); got == 0 {
					t.Errorf("overworld_position_fallback_resumed_total is %v", got)
				}
			})
		})
	}
}

// gathered sums the counters of reg's metric family name over its labels.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
