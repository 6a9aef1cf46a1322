package position_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// crossingConfig is a 4x4 world of 8-tile regions, prefetch 2 tiles,
// 200 ms updates.
func crossingConfig(aggregate bool) position.Config {
	cfg := testConfig(aggregate)
	cfg.Width, cfg.Height = 4, 4
	cfg.RegionUnits = 8 * position.TileUnits
	cfg.Prefetch = 2 * position.TileUnits
	cfg.Interval = 200 * time.Millisecond
	cfg.Linger = time.Second
	return cfg
}

// crossing is one walk: the walker goes from a point of one region to a
// point of another and back at a steady speed, watched by a peer in each
// of the regions around the border it crosses, and by peers in regions
// that it comes into or goes out of range of as it crosses.
type crossing struct {
	name     string
	from, to position.Vec
	// watched: regions with a watcher, each of which must see the walker
	// and be seen by it while the walker is within Radius of it: always,
	// for those around the border, from the crossing on (or up to it) for
	// the others.
	watched []regions.Coord
}

// TestBorderCrossing moves a real peer across a region border, and across
// a corner into the diagonal region, and back, while peers watch from
// both sides (and from regions the walker comes into or goes out of range
// of), in direct and in aggregated mode (each watcher coordinating its
// own region, so the walker's updates change coordinator at the border).
// Every watcher within range takes one of the walker's updates at least
// every two intervals throughout (it misses at most one in a row, counted
// in sequence numbers), the walker takes the watchers' likewise, and the
// walker's own view holds every watcher within range at every look: the
// regions on both sides never empty.
func TestBorderCrossing(t *testing.T) {
	cfg := crossingConfig(false)
	ru := cfg.RegionUnits
	// Region (1,1) spans [ru, 2ru) on both axes.
	walks := []crossing{
		{
			name: "border",
			from: position.Vec{X: 2*ru - 3*position.TileUnits, Y: ru + ru/2},
			to:   position.Vec{X: 2*ru + 3*position.TileUnits, Y: ru + ru/2},
			watched: []regions.Coord{
				{X: 1, Y: 1}, {X: 2, Y: 1}, // both sides
				{X: 0, Y: 1}, {X: 3, Y: 1}, // left behind, coming into range
			},
		},
		{
			name: "corner",
			from: position.Vec{X: 2*ru - 3*position.TileUnits, Y: 2*ru - 3*position.TileUnits},
			to:   position.Vec{X: 2*ru + 3*position.TileUnits, Y: 2*ru + 3*position.TileUnits},
			watched: []regions.Coord{
				{X: 1, Y: 1}, {X: 2, Y: 1}, {X: 1, Y: 2}, {X: 2, Y: 2}, // around the corner
				{X: 0, Y: 0}, {X: 3, Y: 3}, {X: 1, Y: 0}, {X: 3, Y: 2}, // left behind, coming into range
			},
		},
	}
	for _, aggregate := range []bool{false, true} {
		for _, w := range walks {
			t.Run(fmt.Sprintf("%s/aggregate=%v", w.name, aggregate), func(t *testing.T) {
				vnettest.Run(t, func(t *testing.T) {
					testCrossing(t, crossingConfig(aggregate), w)
				})
			})
		}
	}
}

func testCrossing(t *testing.T, cfg position.Config, w crossing) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mn := newNet(t, 2*time.Millisecond)
	grid := cfg.Grid()
	// Peer 0 walks; peer i>0 watches from w.watched[i-1] and coordinates
	// it.
	count := 1 + len(w.watched)
	var peers []*testPeer
	var logs []*watchLog
	coordinators := map[regions.Coord]peer.ID{}
	for i := range count {
		n := newMockNode(t, mn, nil)
		r := grid.RegionOf(w.from)
		if i > 0 {
			r = w.watched[i-1]
			coordinators[r] = n.ID()
		}
		peers = append(peers, &testPeer{node: n, region: r})
	}
	for i, p := range peers {
		log := newWatchLog()
		logs = append(logs, log)
		svc, err := position.New(p.node, cfg, position.WithDeliveryHook(log.hook),
			position.WithCoordinators(func(c regions.Coord) peer.ID { return coordinators[c] }))
		if err != nil {
			t.Fatal(err)
		}
		p.svc = svc
		if i == 0 {
			svc.Move(w.from, position.Vec{})
		} else {
			svc.Move(centre(cfg, p.region), position.Vec{})
		}
	}
	connectAll(t, mn, peers)
	runAll(t, ctx, peers)
	waitViews(t, peers, cfg.Radius, 3*time.Minute)

	walker := peers[0]
	for _, l := range logs {
		l.start()
	}
	// Walk there and back at half the speed limit, publishing the position
	// of the moment every few milliseconds; look at the walker's view at
	// every step.
	speed := cfg.MaxSpeed / 2
	dx, dy := w.to.X-w.from.X, w.to.Y-w.from.Y
	length := isqrt(int64(dx)*int64(dx) + int64(dy)*int64(dy))
	leg := time.Duration(length) * time.Second / time.Duration(speed)
	vel := position.Vec{X: int32(int64(dx) * int64(speed) / length), Y: int32(int64(dy) * int64(speed) / length)}
	var emptyLooks []string
	looks := 0
	visited := map[regions.Coord]bool{}
	for _, back := range []bool{false, true} {
		from, v := w.from, vel
		if back {
			from, v = w.to, position.Vec{X: -vel.X, Y: -vel.Y}
		}
		// The walk advances by the time since the last step, but by at
		// most maxStep: a loaded machine that holds this loop up makes
		// the walker slower, as it does a game loop (ticks are dropped,
		// not caught up), instead of making it jump ahead of the updates
		// it already sent, which receivers would rightly call a teleport.
		const maxStep = 40 * time.Millisecond
		var el time.Duration
		lastStep := time.Now()
		for {
			now := time.Now()
			el += min(now.Sub(lastStep), maxStep)
			lastStep = now
			if el > leg {
				el = leg
			}
			us := el.Microseconds()
			at := position.Vec{X: from.X + int32(int64(v.X)*us/1e6), Y: from.Y + int32(int64(v.Y)*us/1e6)}
			if el == leg {
				walker.svc.Move(at, position.Vec{})
			} else {
				walker.svc.Move(at, v)
			}
			visited[grid.RegionOf(at)] = true
			seen := map[peer.ID]bool{}
			for _, s := range walker.svc.View(time.Now()) {
				seen[s.Player] = true
			}
			looks++
			here := grid.RegionOf(at)
			for i, p := range peers[1:] {
				if position.Within(here, w.watched[i], cfg.Radius) && !seen[p.node.ID()] {
					emptyLooks = append(emptyLooks, fmt.Sprintf("at %+v (region %s) the walker does not see the watcher of %s", at, here, w.watched[i]))
				}
			}
			if el == leg {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// A few more intervals standing still, so the last updates arrive.
	end := grid.RegionOf(w.from)
	last := map[int]uint64{}
	for i := 1; i < count; i++ {
		last[i] = logs[i].last(walker.node.ID())
	}
	waitFor(t, time.Minute, "the watchers in range to take the walker's updates after the walk", func() bool {
		for i := 1; i < count; i++ {
			if position.Within(end, w.watched[i-1], cfg.Radius) && logs[i].countSince(walker.node.ID(), last[i]) < 3 {
				return false
			}
		}
		return true
	})
	for _, l := range logs {
		l.stop()
	}
	if a, b := grid.RegionOf(w.from), grid.RegionOf(w.to); a == b || !visited[a] || !visited[b] || len(visited) != 2 {
		t.Fatalf("the walk from region %s to %s went through %v", a, b, visited)
	}
	if len(emptyLooks) > 0 {
		t.Errorf("%d of %d looks at the walker's view missed a watcher in range; first: %s", len(emptyLooks), looks, emptyLooks[0])
	}
	// The watcher of the start region is in range of the whole walk: its
	// record says where the walker was at each update.
	ref := logs[1].regions(walker.node.ID())
	worst := 0
	for i := 1; i < count; i++ {
		r := w.watched[i-1]
		inRange := func(c regions.Coord) bool { return position.Within(c, r, cfg.Radius) }
		run, from := logs[i].missedRun(walker.node.ID(), ref, inRange)
		hist, _ := logs[i].gaps(walker.node.ID())
		t.Logf("watcher of %s takes the walker's updates with steps %s; longest run missed in range %d", r, formatHist(hist), run)
		worst = max(worst, run)
		if run > 1 {
			t.Errorf("the watcher of %s missed %d of the walker's updates in a row from %d, in range", r, run, from)
		}
		// The walker takes the updates of the watchers in range of its
		// whole walk at least every two intervals (those of the others
		// stop and start with its subscriptions; the looks check them).
		if !inRange(grid.RegionOf(w.from)) || !inRange(grid.RegionOf(w.to)) {
			continue
		}
		hist, largest := logs[0].gaps(peers[i].node.ID())
		t.Logf("the walker takes the updates of the watcher of %s with steps %s", r, formatHist(hist))
		worst = max(worst, int(largest)-1)
		if largest > 2 {
			t.Errorf("the walker missed %d updates of the watcher of %s in a row", largest-1, r)
		}
	}
	st := walker.svc.Stats()
	t.Logf("longest run missed %d over %d looks; walker: published %d, uplink %d, fallbacks %v", worst, looks, st.Published, st.SentUplink, st.Fallbacks)
	for i, p := range peers {
		if n := p.svc.Stats().TotalRejected(); n != 0 {
			t.Errorf("peer %d rejected %d honest updates: %v", i, n, p.svc.Stats().Rejected)
		}
	}
}

func isqrt(v int64) int64 {
	r := int64(0)
	for (r+1)*(r+1) <= v {
		r++
	}
	return r
}
