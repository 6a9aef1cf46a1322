package position_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/game/vfc"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// summaryLog counts, per player, the updates a receiver took from
// summaries and from anything else.
type summaryLog struct {
	mu          sync.Mutex
	summary     map[peer.ID]int
	other       map[peer.ID]int
	lastSummary map[peer.ID]uint64
}

func newSummaryLog() *summaryLog {
	return &summaryLog{summary: map[peer.ID]int{}, other: map[peer.ID]int{}, lastSummary: map[peer.ID]uint64{}}
}

func (l *summaryLog) hook(d position.Delivery) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d.Summary {
		l.summary[d.Player]++
		l.lastSummary[d.Player] = d.Seq
	} else {
		l.other[d.Player]++
	}
}

func (l *summaryLog) counts(p peer.ID) (summary, other int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.summary[p], l.other[p]
}

// summaryScene is a region (1,1) in aggregated mode with summaries: its
// coordinator, a player standing one tile from the border with the
// region to the left, two standing deep inside, and a listener in the
// middle of that left region. Real position services on the in-memory
// network; the coordinator of every region is the first peer, as the
// region service would name it.
type summaryScene struct {
	t        *testing.T
	cfg      position.Config
	mn       *vnettest.Cluster
	peers    []*testPeer // coordinator, border player, deep players, listener
	logs     []*summaryLog
	stops    []context.CancelFunc
	coord    atomic.Value
	border   int
	deep     []int
	listener int
}

func newSummaryScene(t *testing.T, sc position.SummaryConfig) *summaryScene {
	t.Helper()
	mn := newNet(t, time.Millisecond)
	cfg := testConfig(true)
	cfg.Interval = 200 * time.Millisecond
	cfg.Expire = time.Minute
	cfg.Summaries = sc
	s := &summaryScene{t: t, cfg: cfg, mn: mn, border: 1, deep: []int{2, 3}, listener: 4}
	mid, left := regions.Coord{X: 1, Y: 1}, regions.Coord{X: 0, Y: 1}
	nodes := make([]*node.Node, 5)
	for i := range nodes {
		nodes[i] = newMockNode(t, mn, nil)
	}
	s.coord.Store(nodes[0].ID())
	named := func(regions.Coord) peer.ID { return s.coord.Load().(peer.ID) }
	for i, n := range nodes {
		r, at := mid, centre(cfg, mid)
		switch {
		case i == s.border:
			at.X = int32(mid.X)*cfg.RegionUnits + position.TileUnits
		case i == s.listener:
			r, at = left, centre(cfg, left)
		default:
			at.Y += int32(i) * position.TileUnits
		}
		log := newSummaryLog()
		svc, err := position.New(n, cfg, position.WithCoordinators(named), position.WithDeliveryHook(log.hook))
		if err != nil {
			t.Fatal(err)
		}
		svc.Move(at, position.Vec{})
		s.peers = append(s.peers, &testPeer{node: n, svc: svc, region: r})
		s.logs = append(s.logs, log)
	}
	connectAll(t, mn, s.peers)
	var wg sync.WaitGroup
	for _, p := range s.peers {
		ctx, stop := context.WithCancel(context.Background())
		s.stops = append(s.stops, stop)
		wg.Go(func() { _ = p.svc.Run(ctx) })
	}
	t.Cleanup(func() {
		for _, stop := range s.stops {
			stop()
		}
		wg.Wait()
	})
	return s
}

// players are the peers of the middle region the listener follows.
func (s *summaryScene) players() []int { return append([]int{0, s.border}, s.deep...) }

// testSummaries: the border zone goes out at least every second, the
// deep one every 20 s (longer than the test looks): a player standing
// still deep inside is summarised once.
func testSummaries() position.SummaryConfig {
	return position.SummaryConfig{
		Enabled: true,
		Zones:   []int32{3 * position.TileUnits},
		Scale:   []vfc.Vector{vfc.V(1, vfc.Unbounded, 25), vfc.V(20, vfc.Unbounded, 100)},
	}
}

// TestSummariesOverPeers: the listener in the adjacent region hears the
// middle region's players only through the coordinator's summaries, at
// the rates of their zones — the deep ones once in a window shorter than
// their time bound, the one at the border about once a second — while
// the players send five updates a second. When the coordinator dies the
// players, publishing directly, summarise themselves, and the listener
// keeps hearing every one of them.
func TestSummariesOverPeers(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		s := newSummaryScene(t, testSummaries())
		listen := s.logs[s.listener]
		lsvc := s.peers[s.listener].svc
		waitFor(t, 3*time.Minute, "the listener hearing every player of the middle region from summaries", func() bool {
			for _, i := range s.players() {
				if n, _ := listen.counts(s.peers[i].node.ID()); n == 0 {
					return false
				}
			}
			return true
		})
		start := make(map[int]int)
		sent := make(map[int]uint64)
		for _, i := range s.players() {
			start[i], _ = listen.counts(s.peers[i].node.ID())
			sent[i] = s.peers[i].svc.Stats().SentUplink
		}
		began := time.Now()
		waitFor(t, 3*time.Minute, "three more summaries of the border player", func() bool {
			n, _ := listen.counts(s.peers[s.border].node.ID())
			return n >= start[s.border]+3
		})
		window := time.Since(began)
		for _, i := range s.players() {
			id := s.peers[i].node.ID()
			got, other := listen.counts(id)
			t.Logf("player %d: %d summary deliveries in %v (%d in all, %d not from summaries), %d updates sent",
				i, got-start[i], window.Round(time.Millisecond), got, other, s.peers[i].svc.Stats().SentUplink-sent[i])
			if other != 0 {
				t.Errorf("the listener took %d updates of player %d from outside summaries: it follows the region at full rate", other, i)
			}
			// A player standing still is sent only when its copy is stale for
			// its zone's time bound: at most once per bound, plus one.
			bound := 20 * time.Second
			if i == s.border {
				bound = time.Second
			}
			if limit := int(window/bound) + 2; got-start[i] > limit {
				t.Errorf("player %d summarised %d times in %v, more than the %d its zone's time bound %v allows", i, got-start[i], window, limit, bound)
			}
		}
		if st := s.peers[0].svc.Stats(); st.SummariesPublished == 0 || st.SummaryEntries == 0 {
			t.Errorf("coordinator stats %+v", st)
		}
		if st := lsvc.Stats(); st.SummaryBytesIn == 0 {
			t.Errorf("listener stats %+v", st)
		}

		// The coordinator dies. Its player (peer 0) goes with it.
		s.stops[0]()
		if err := s.peers[0].node.Close(); err != nil {
			t.Fatal(err)
		}
		survivors := s.players()[1:]
		for _, i := range survivors {
			start[i], _ = listen.counts(s.peers[i].node.ID())
		}
		waitFor(t, 3*time.Minute, "every surviving player summarising itself to the listener", func() bool {
			for _, i := range survivors {
				if n, _ := listen.counts(s.peers[i].node.ID()); n == start[i] {
					return false
				}
			}
			return true
		})
		for _, i := range survivors {
			st := s.peers[i].svc.Stats()
			if st.OwnSummaries == 0 || !st.PublishingDirect {
				t.Errorf("player %d after the crash: %+v", i, st)
			}
			if _, other := listen.counts(s.peers[i].node.ID()); other != 0 {
				t.Errorf("the listener took %d updates of player %d from outside summaries", other, i)
			}
		}
		seen := map[peer.ID]bool{}
		for _, p := range lsvc.View(time.Now()) {
			seen[p.Player] = true
		}
		for _, i := range survivors {
			if !seen[s.peers[i].node.ID()] {
				t.Errorf("the listener's view lacks player %d after the crash", i)
			}
		}
	})
}

// TestAdversarialSummaries plays a player of the middle region that
// publishes summaries of the region itself: one with another player's
// entry at a made-up position (ignored: only the coordinator speaks for
// others), one naming another peer as its author (rejected as forged).
// The listener keeps the honest player where the coordinator put it.
func TestAdversarialSummaries(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		s := newSummaryScene(t, testSummaries())
		listen := s.logs[s.listener]
		lsvc := s.peers[s.listener].svc
		victim, hostile := s.peers[s.deep[0]], s.peers[s.deep[1]]
		waitFor(t, 3*time.Minute, "the listener hearing the victim", func() bool {
			n, _ := listen.counts(victim.node.ID())
			return n > 0
		})
		mid := regions.Coord{X: 1, Y: 1}
		topic, err := hostile.node.PubSub().Join(position.SummaryTopic(s.cfg.World, mid, s.cfg.Summaries))
		if err != nil {
			t.Fatal(err)
		}
		forged := centre(s.cfg, mid)
		forged.X += 5 * position.TileUnits
		publish := func(author peer.ID, seq uint64) {
			entry := &position.Update{Player: []byte(victim.node.ID()), Seq: seq, X: forged.X, Y: forged.Y, RegionX: 1, RegionY: 1,
				SentUnixMicro: time.Now().UnixMicro()}
			data, err := proto.Marshal(&position.Envelope{Body: &position.Envelope_Batch{Batch: &position.Batch{
				Coordinator: []byte(author), RegionX: 1, RegionY: 1, Seq: seq, Updates: []*position.Update{entry},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := topic.Publish(context.Background(), data); err != nil {
				t.Fatal(err)
			}
		}
		for k := range 5 {
			publish(hostile.node.ID(), 1_000_000+uint64(k))
			publish(s.peers[0].node.ID(), 2_000_000+uint64(k))
		}
		waitFor(t, time.Minute, "the listener refusing both kinds", func() bool {
			st := lsvc.Stats()
			return st.Ignored[position.ReasonSummaryNotCoordinator] >= 5 && st.Rejected[position.ReasonForged] >= 5
		})
		for _, p := range lsvc.View(time.Now()) {
			if p.Player == victim.node.ID() && p.Pos == forged {
				t.Fatalf("the listener shows the victim where the hostile summary put it")
			}
		}
		listen.mu.Lock()
		n := listen.lastSummary[victim.node.ID()]
		listen.mu.Unlock()
		if n >= 1_000_000 {
			t.Fatalf("the listener took the hostile entry %d", n)
		}
	})
}

// TestSummaryBandwidth measures what following the middle region costs the
// listener in the adjacent one, with the region's batches at full rate
// and with the coordinator's summaries (the default zones), over the same
// number of the coordinator's batches, the players walking back and
// forth at two tiles a second. Summaries never carry more than the batch
// of the same interval, so they cost no more; the figures are logged.
func TestSummaryBandwidth(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		const intervals = 40
		cost := map[bool]uint64{}
		for _, on := range []bool{false, true} {
			sc := position.SummaryConfig{}
			if on {
				sc = position.DefaultSummaries()
			}
			s := newSummaryScene(t, sc)
			ctx, stop := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for _, i := range s.players() {
				svc, from := s.peers[i].svc, s.peerStart(i)
				wg.Go(func() { walk(ctx, svc, from) })
			}
			lsvc, coord := s.peers[s.listener].svc, s.peers[0].svc
			waitFor(t, 3*time.Minute, "the listener seeing the middle region", func() bool { return len(lsvc.View(time.Now())) == len(s.players()) })
			rounds := func() uint64 { return coord.Stats().BatchesPublished }
			startRound, before := rounds(), lsvc.Stats()
			waitFor(t, 3*time.Minute, "the coordinator's intervals", func() bool { return rounds() >= startRound+intervals })
			after := lsvc.Stats()
			stop()
			wg.Wait()
			cost[on] = after.PositionBytesIn + after.SummaryBytesIn - before.PositionBytesIn - before.SummaryBytesIn
			t.Logf("summaries %v: the listener took %d bytes of the middle region's %d players while the coordinator published %d batches, its region's and the listener's (%d from batches, %d from summaries)",
				on, cost[on], len(s.players()), rounds()-startRound, after.PositionBytesIn-before.PositionBytesIn, after.SummaryBytesIn-before.SummaryBytesIn)
		}
		if cost[false] == 0 || cost[true] > cost[false] {
			t.Errorf("following the region cost %d bytes at full rate and %d with summaries", cost[false], cost[true])
		}
		t.Logf("summaries: %.1f%% of the full-rate bytes", 100*float64(cost[true])/float64(max(cost[false], 1)))
	})
}

// peerStart is where peer i of the scene stands at first.
func (s *summaryScene) peerStart(i int) position.Vec {
	mid := regions.Coord{X: 1, Y: 1}
	at := centre(s.cfg, mid)
	if i == s.border {
		at.X = int32(mid.X)*s.cfg.RegionUnits + position.TileUnits
	} else {
		at.Y += int32(i) * position.TileUnits
	}
	return at
}

// walk moves a player back and forth along x at two tiles a second, two
// tiles each way, until ctx ends.
func walk(ctx context.Context, svc *position.Service, from position.Vec) {
	const speed = 2 * position.TileUnits // units per second
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	// The walk advances by at most 100 ms a step: a loop held up on a
	// loaded machine slows down instead of jumping ahead of the updates
	// already sent (which receivers would call a teleport).
	var walked time.Duration
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		walked += min(now.Sub(last), 100*time.Millisecond)
		last = now
		// A triangle wave of period 2 s: out for a second, back for one.
		ms := walked.Milliseconds() % 2000
		pos, vel := from, position.Vec{X: speed}
		if ms < 1000 {
			pos.X += int32(int64(speed) * ms / 1000)
		} else {
			pos.X += int32(int64(speed) * (2000 - ms) / 1000)
			vel.X = -speed
		}
		svc.Move(pos, vel)
	}
}
