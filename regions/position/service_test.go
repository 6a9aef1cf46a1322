package position_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

type testPeer struct {
	node    *node.Node
	svc     *position.Service
	scoring *position.Scoring
	region  regions.Coord
}

// newNet returns a virtual network (vnettest) without a bootstrap node,
// whose links have the one-way latency given: the peers meet through
// connectAll. It closes when the test ends, after the services on it
// (cleanups run last-registered first): closing the network under running
// services makes every stream reset race with their traffic.
func newNet(t *testing.T, latency time.Duration) *vnettest.Cluster {
	return vnettest.New(t, 0, vnettest.Options{Latency: latency, NoBootstrap: true})
}

// newMockNode adds a peer to mn, with scoring's gossipsub options if it is
// not nil.
func newMockNode(t *testing.T, mn *vnettest.Cluster, scoring *position.Scoring) *node.Node {
	t.Helper()
	var opts []node.Option
	if scoring != nil {
		opts = append(opts, node.WithPubSubOptions(scoring.Options()...))
	}
	return mn.Add(opts...).Node
}

func centre(cfg position.Config, c regions.Coord) position.Vec {
	return position.Vec{X: int32(c.X)*cfg.RegionUnits + cfg.RegionUnits/2, Y: int32(c.Y)*cfg.RegionUnits + cfg.RegionUnits/2}
}

// startPeers builds n players spread over the world, all connected to each
// other, each standing still in the centre of its region.
func startPeers(t *testing.T, ctx context.Context, mn *vnettest.Cluster, cfg position.Config, count int) []*testPeer {
	t.Helper()
	var peers []*testPeer
	for i := range count {
		sc := position.NewScoring()
		n := newMockNode(t, mn, sc)
		svc, err := position.New(n, cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := regions.Coord{X: i % cfg.Width, Y: (i / cfg.Width) % cfg.Height}
		svc.Move(centre(cfg, r), position.Vec{})
		peers = append(peers, &testPeer{node: n, svc: svc, scoring: sc, region: r})
	}
	connectAll(t, mn, peers)
	// The services stop first when the test ends, while their nodes and
	// the network still run.
	ctx, stop := context.WithCancel(ctx)
	done := make(chan struct{}, count)
	for _, p := range peers {
		go func() {
			defer func() { done <- struct{}{} }()
			if err := p.svc.Run(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	t.Cleanup(func() {
		stop()
		for range count {
			<-done
		}
	})
	return peers
}

// connectAll links and connects every pair of peers of mn and waits until
// the routing table of each of peers holds all the others of peers:
// placement reads the routing table.
func connectAll(t *testing.T, mn *vnettest.Cluster, peers []*testPeer) {
	t.Helper()
	mn.ConnectAll()
	polls := 0
	vnettest.EventuallyWithin(t, 60*time.Second, "full routing tables", func() bool {
		polls++
		full := true
		for _, p := range peers {
			if p.node.DHT().RoutingTable().Size() < len(peers)-1 {
				full = false
				// A peer whose identify finished before its DHT watched
				// for it is only added by a lookup: ask for one now and
				// then rather than wait for the periodic refresh (forced:
				// a plain refresh skips buckets refreshed moments ago).
				if polls%200 == 0 {
					p.node.DHT().ForceRefresh()
				}
			}
		}
		return full
	})
}

// runAll runs every peer's Service until the test ends (or ctx does).
func runAll(t *testing.T, ctx context.Context, peers []*testPeer) {
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, p := range peers {
		wg.Go(func() { _ = p.svc.Run(runCtx) })
	}
	t.Cleanup(func() { stop(); wg.Wait() })
}

// expected lists who each peer should see: everyone else within the radius.
func expected(peers []*testPeer, radius int) []map[peer.ID]bool {
	out := make([]map[peer.ID]bool, len(peers))
	for i, p := range peers {
		out[i] = map[peer.ID]bool{}
		for j, q := range peers {
			if i != j && position.Within(p.region, q.region, radius) {
				out[i][q.node.ID()] = true
			}
		}
	}
	return out
}

// waitViews polls until every peer's view is exactly what it should see.
func waitViews(t *testing.T, peers []*testPeer, radius int, deadline time.Duration) {
	t.Helper()
	want := expected(peers, radius)
	stop := time.Now().Add(deadline)
	for {
		bad := -1
		var got []position.Seen
		for i, p := range peers {
			got = p.svc.View(time.Now())
			ok := len(got) == len(want[i])
			for _, s := range got {
				ok = ok && want[i][s.Player]
			}
			if !ok {
				bad = i
				break
			}
		}
		if bad < 0 {
			return
		}
		if time.Now().After(stop) {
			t.Fatalf("peer %d in region %s sees %d players, want %d (stats %+v)", bad, peers[bad].region, len(got), len(want[bad]), peers[bad].svc.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// manyPeers is the size of the multi-peer tests: 30 players in 9 regions.
// In a synctest bubble the race detector slows the test's wall time, not
// the peers' simulated time, so it needs no smaller cluster.
func manyPeers() int { return 30 }

func testConfig(aggregate bool) position.Config {
	cfg := position.DefaultConfig()
	cfg.World = "test"
	cfg.Width, cfg.Height = 3, 3
	cfg.Aggregate = aggregate
	cfg.Rendezvous = time.Second
	// Lighter than the game's 150 ms and forgiving expiry: the test checks
	// who sees whom, and the machine running it may be busy.
	cfg.Interval = 300 * time.Millisecond
	cfg.Expire = 10 * time.Second
	return cfg
}

// TestRegionMulticast: 30 peers in 9 regions each see
// exactly the peers of their own and adjacent regions, in direct and in
// aggregated mode; every delivered update comes from a region within the
// radius.
func TestRegionMulticast(t *testing.T) {
	for _, aggregate := range []bool{false, true} {
		t.Run(fmt.Sprintf("aggregate=%v", aggregate), func(t *testing.T) {
			vnettest.Run(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				mn := newNet(t, 2*time.Millisecond)
				cfg := testConfig(aggregate)
				start := time.Now()
				peers := startPeers(t, ctx, mn, cfg, manyPeers())
				t.Logf("%d peers up and connected in %s", len(peers), time.Since(start))
				start = time.Now()
				waitViews(t, peers, cfg.Radius, 3*time.Minute)
				t.Logf("views complete in %s", time.Since(start))
				for i, p := range peers {
					st := p.svc.Stats()
					if st.TotalRejected() != 0 {
						t.Errorf("peer %d rejected honest updates: %v", i, st.Rejected)
					}
				}
			})
		})
	}
}

// TestDeliveriesStayInRadius checks the deliveries themselves, not only the
// view: no update from beyond the radius ever arrives.
func TestDeliveriesStayInRadius(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		mn := newNet(t, time.Millisecond)
		cfg := testConfig(false)
		cfg.Width, cfg.Height = 4, 1
		var peers []*testPeer
		far := make(chan position.Delivery, 1)
		for i := range 8 {
			n := newMockNode(t, mn, nil)
			r := regions.Coord{X: i % 4}
			svc, err := position.New(n, cfg, position.WithDeliveryHook(func(d position.Delivery) {
				if !position.Within(r, d.Region, cfg.Radius) {
					select {
					case far <- d:
					default:
					}
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			svc.Move(centre(cfg, r), position.Vec{})
			peers = append(peers, &testPeer{node: n, svc: svc, region: r})
		}
		// Everyone connected to everyone: gossipsub knows every subscription,
		// so only the topic filter keeps far updates away.
		connectAll(t, mn, peers)
		done := make(chan struct{}, len(peers))
		for _, p := range peers {
			go func() { p.svc.Run(ctx); done <- struct{}{} }()
		}
		waitViews(t, peers, cfg.Radius, 30*time.Second)
		cancel()
		for range peers {
			<-done
		}
		select {
		case d := <-far:
			t.Fatalf("update from region %s delivered beyond the radius", d.Region)
		default:
		}
	})
}

// TestRejectsBadUpdates: forged, replayed and teleporting updates from an
// attacker in the middle region are rejected by every receiver, never reach
// a view, and cost the attacker gossipsub score.
func TestRejectsBadUpdates(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		mn := newNet(t, time.Millisecond)
		cfg := testConfig(false)
		peers := startPeers(t, ctx, mn, cfg, manyPeers())
		waitViews(t, peers, cfg.Radius, 3*time.Minute)

		attacker := newMockNode(t, mn, nil)
		mid := regions.Coord{X: 1, Y: 1}
		for _, p := range peers {
			if err := mn.Net.Connect(attacker.ID(), p.node.ID()); err != nil {
				t.Fatal(err)
			}
		}
		topic, err := attacker.PubSub().Join(position.Topic(cfg.World, mid))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := topic.Subscribe(); err != nil {
			t.Fatal(err)
		}
		victim := peers[4] // in the middle region
		pos := centre(cfg, mid)
		send := func(player peer.ID, seq uint64, at position.Vec) {
			t.Helper()
			u := &position.Update{Player: []byte(player), Seq: seq, X: at.X, Y: at.Y, RegionX: 1, RegionY: 1, SentUnixMicro: time.Now().UnixMicro()}
			data, err := proto.Marshal(&position.Envelope{Body: &position.Envelope_Update{Update: u}})
			if err != nil {
				t.Fatal(err)
			}
			if err := topic.Publish(ctx, data); err != nil {
				t.Fatal(err)
			}
		}
		// takeHonest sends a fresh honest update and waits until every peer of
		// the neighbourhood has taken one of this round, so that each receiver
		// holds a recent position to judge a jump against (one that missed
		// updates for a while could not tell a long walk from a jump). Newer
		// ones follow every few seconds in case one was dropped from a full
		// queue; any of them will do (the attacker never moves), so a receiver
		// slower than the resends still gets there.
		seq := uint64(99)
		takeHonest := func() {
			t.Helper()
			seq++
			round := seq
			send(attacker.ID(), seq, pos)
			sent := time.Now()
			stop := sent.Add(2 * time.Minute)
			for {
				var behind []int
				for i, p := range peers {
					found := false
					for _, s := range p.svc.View(time.Now()) {
						found = found || (s.Player == attacker.ID() && s.Seq >= round)
					}
					if !found {
						behind = append(behind, i)
					}
				}
				if len(behind) == 0 {
					return
				}
				if time.Now().After(stop) {
					var lines []string
					for _, i := range behind {
						lines = append(lines, fmt.Sprintf("peer %d in %s: %+v", i, peers[i].region, peers[i].svc.Stats()))
					}
					t.Fatalf("%d receivers took none of the attacker's honest updates %d..%d:\n%s", len(behind), round, seq, strings.Join(lines, "\n"))
				}
				if time.Since(sent) > 3*time.Second {
					seq++
					send(attacker.ID(), seq, pos)
					sent = time.Now()
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		takeHonest()
		forgedAt := position.Vec{X: pos.X + 100, Y: pos.Y}
		// Each round starts with honest updates every receiver has taken.
		sendBad := func() {
			takeHonest()
			send(victim.node.ID(), 1<<40, forgedAt)                             // forged: names the victim
			send(attacker.ID(), 3, pos)                                         // replay: far behind
			send(attacker.ID(), seq+1, position.Vec{X: pos.X + 4000, Y: pos.Y}) // teleport: 16 tiles at once
			seq++                                                               // the next honest update follows the teleport's number
		}
		// Sent again while some receiver has not rejected all three yet: on a
		// busy machine gossipsub may drop a message from a full outbound queue,
		// and a one-shot message would then never arrive.
		reasons := []string{position.ReasonForged, position.ReasonReplay, position.ReasonTeleport}
		missing := func() []string {
			var out []string
			for i, p := range peers {
				rej := p.svc.Stats().Rejected
				for _, r := range reasons {
					if rej[r] == 0 {
						out = append(out, fmt.Sprintf("peer %d: %s", i, r))
					}
				}
			}
			return out
		}
		polls := 0
		sendBad()
		waitFor(t, 2*time.Minute, "every receiver rejects all three", func() bool {
			if len(missing()) == 0 {
				return true
			}
			if polls++; polls%20 == 0 {
				t.Logf("still missing: %v", missing())
				sendBad()
			}
			return false
		})
		for i, p := range peers {
			for _, s := range p.svc.View(time.Now()) {
				if s.Player == victim.node.ID() && s.Seq >= 1<<40 {
					t.Errorf("peer %d took the forged update", i)
				}
				if s.Player == attacker.ID() && s.Pos != pos {
					t.Errorf("peer %d took attacker update %d to %+v; it only ever stood at %+v", i, s.Seq, s.Pos, pos)
				}
			}
		}
		waitFor(t, 2*time.Minute, "attacker's score falls below zero", func() bool {
			for _, p := range peers {
				if s, ok := p.scoring.Score(attacker.ID()); !ok || s >= 0 {
					return false
				}
			}
			return true
		})
	})
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	vnettest.EventuallyWithin(t, d, what, cond)
}

var _ = pubsub.ValidationAccept
