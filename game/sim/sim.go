package sim

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// Config is one simulation run.
type Config struct {
	Players int
	// Regions is the number of regions; the world is the smallest square
	// grid holding them (25 -> 5x5).
	Regions int
	// Warmup runs before measuring: joins, first placements, meshes.
	Warmup time.Duration
	// Duration is the measured window.
	Duration time.Duration
	// Interval is the position update interval.
	Interval time.Duration
	// Radius is the interest radius in regions.
	Radius    int
	Aggregate bool
	// LatencyMin and LatencyMax bound the one-way latency of each link,
	// drawn uniformly per pair of peers from the seed.
	LatencyMin, LatencyMax time.Duration
	// Speed is the bots' walking speed in units per second; it must not
	// exceed the protocol's speed limit.
	Speed int32
	// RegionChange is the bots' mean time between region changes.
	RegionChange time.Duration
	// Step is the bots' movement step.
	Step time.Duration
	// EatEvery and FightEvery are each bot's mean time between two eats
	// and between two attacks (seeded jitter of ±50%); zero turns the
	// action off. See workload.go.
	EatEvery, FightEvery time.Duration
	// Seed makes identities, latencies and walks reproducible.
	Seed uint64
	// Progress, if set, receives a progress bar.
	Progress io.Writer
	Logger   *slog.Logger
	// AtEnd, if set, is called at the end of the measured window while
	// the network still runs (e.g. to write a heap profile).
	AtEnd func()
}

// DefaultConfig is SimMud's setting scaled to one machine: 200 players in
// 25 regions, 150 ms updates, links of 3-100 ms one way.
func DefaultConfig() Config {
	return Config{
		Players:      200,
		Regions:      25,
		Warmup:       10 * time.Second,
		Duration:     60 * time.Second,
		Interval:     150 * time.Millisecond,
		Radius:       1,
		LatencyMin:   3 * time.Millisecond,
		LatencyMax:   100 * time.Millisecond,
		Speed:        2 * position.TileUnits,
		RegionChange: 40 * time.Second,
		Step:         100 * time.Millisecond,
		EatEvery:     5 * time.Second,
		FightEvery:   5 * time.Second,
		Seed:         1,
	}
}

func (c Config) validate() error {
	var errs []error
	if c.Players < 2 {
		errs = append(errs, fmt.Errorf("%d players: want >= 2", c.Players))
	}
	if c.Regions < 1 {
		errs = append(errs, fmt.Errorf("%d regions: want >= 1", c.Regions))
	}
	if c.Warmup < 0 || c.Duration <= 0 {
		errs = append(errs, fmt.Errorf("warm-up %s, duration %s: want warm-up >= 0, duration > 0", c.Warmup, c.Duration))
	}
	if c.LatencyMin < 0 || c.LatencyMax < c.LatencyMin {
		errs = append(errs, fmt.Errorf("latency %s..%s: want 0 <= min <= max", c.LatencyMin, c.LatencyMax))
	}
	if c.EatEvery < 0 || c.FightEvery < 0 {
		errs = append(errs, fmt.Errorf("eat every %s, fight every %s: want >= 0 (0 turns it off)", c.EatEvery, c.FightEvery))
	}
	if c.Speed <= 0 || c.Step <= 0 || c.RegionChange <= 0 {
		errs = append(errs, fmt.Errorf("speed %d, step %s, region change %s: want all > 0", c.Speed, c.Step, c.RegionChange))
	}
	return errors.Join(errs...)
}

// gridSide is the side of the smallest square grid with at least n regions.
func gridSide(n int) int {
	s := int(math.Ceil(math.Sqrt(float64(n))))
	for s*s < n {
		s++
	}
	return s
}

// positionConfig is the protocol configuration the run uses.
func (c Config) positionConfig() position.Config {
	pc := position.DefaultConfig()
	pc.World = "sim"
	side := gridSide(c.Regions)
	pc.Width, pc.Height = side, side
	pc.Interval = c.Interval
	pc.Radius = c.Radius
	pc.Aggregate = c.Aggregate
	// Placement by DHT lookup, trusted for a minute: the population is
	// static during a run.
	pc.CoordinatorTTL = time.Minute
	// Players meet at start-up through pre-connection and on region changes
	// through the rendezvous at subscription; the periodic refresh only
	// catches stragglers.
	pc.Rendezvous = 20 * time.Second
	return pc
}

// SimGossipSubParams are node.GameGossipSubParams with a smaller mesh. With
// flood publishing every subscriber the publisher knows already gets each
// update in one hop; the mesh only repairs what that misses, and every mesh
// peer forwards another copy. At the default degree (D=6) a player received
// each update about seven times.
func SimGossipSubParams() pubsub.GossipSubParams {
	p := node.GameGossipSubParams()
	p.D, p.Dlo, p.Dhi, p.Dout, p.Dscore = 4, 3, 6, 1, 2
	p.Dlazy = 3
	p.HeartbeatInterval = 700 * time.Millisecond
	return p
}

// player is one simulated peer.
type player struct {
	node   *node.Node
	svc    *position.Service
	wire   *wireCounter
	walker *Walker
	host   *latencyHost
	// region is the walker's region, x<<32|y, for the workload.
	region atomic.Int64
}

func (p *player) setRegion(c regions.Coord) { p.region.Store(int64(c.X)<<32 | int64(uint32(c.Y))) }

// keyFor derives peer i's identity from the seed, so that placement (and
// with it the whole run) is reproducible.
func keyFor(seed uint64, i int) (crypto.PrivKey, error) {
	var s [ed25519.SeedSize]byte
	binary.BigEndian.PutUint64(s[:], seed)
	binary.BigEndian.PutUint64(s[8:], uint64(i))
	copy(s[16:], "overworld-sim-id")
	k, _, err := crypto.KeyPairFromStdKey(ptr(ed25519.NewKeyFromSeed(s[:])))
	return k, err
}

func ptr(k ed25519.PrivateKey) *ed25519.PrivateKey { return &k }

// linkLatency is the one-way latency of the link between a and b: uniform
// in [min, max], fixed by the seed and the unordered pair.
func linkLatency(seed uint64, a, b peer.ID, lo, hi time.Duration) time.Duration {
	if a > b {
		a, b = b, a
	}
	h := fnv.New64a()
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seed)
	h.Write(s[:])
	h.Write([]byte(a))
	h.Write([]byte(b))
	span := uint64(hi - lo)
	if span == 0 {
		return lo
	}
	return lo + time.Duration(h.Sum64()%(span+1))
}

func mockAddr(i int) ma.Multiaddr {
	ip := net.ParseIP("100::")
	ip[12], ip[13], ip[14], ip[15] = byte(i>>24), byte(i>>16), byte(i>>8), byte(i)
	return ma.StringCast(fmt.Sprintf("/ip6/%s/tcp/4242", ip))
}

// Run runs the simulation and returns its report. It stops early, with an
// error, if ctx ends.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("sim config: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pc := cfg.positionConfig()
	if cfg.Speed > pc.MaxSpeed {
		return nil, fmt.Errorf("bot speed %d above the speed limit %d", cfg.Speed, pc.MaxSpeed)
	}
	mn := mocknet.New()

	var nodes []*node.Node
	var regionServices []*regions.Service
	var runners sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	defer func() {
		stop()
		began := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			teardown(mn, nodes, regionServices, &runners)
		}()
		select {
		case <-done:
			log.Info("network closed", "took", time.Since(began))
		case <-time.After(cleanupWait):
			// Hundreds of nodes on one in-memory network can take minutes
			// to close; the report is ready, so do not hold it back. The
			// rest closes in the background until the process exits.
			log.Warn("simulation still closing; returning the report", "waited", cleanupWait)
		}
	}()

	rec := &delays{}
	latencyOf := func(a, b peer.ID) time.Duration {
		return linkLatency(cfg.Seed, a, b, cfg.LatencyMin, cfg.LatencyMax)
	}
	grid := pc.Grid()
	players := make([]*player, cfg.Players)
	// The directory of players, as the operator's bootstrap service could
	// hand it out. Placement over it is what every player computes from a
	// settled DHT routing table; the simulator skips the DHT lookups
	// because, without a connection manager on the in-memory network, they
	// connect every peer to nearly every other (about 6 GB at 200 peers).
	keys := make([]crypto.PrivKey, cfg.Players)
	directory := make([]peer.ID, cfg.Players)
	for i := range keys {
		key, err := keyFor(cfg.Seed, i)
		if err != nil {
			return nil, err
		}
		keys[i] = key
		if directory[i], err = peer.IDFromPrivateKey(key); err != nil {
			return nil, err
		}
	}
	for i := range players {
		key := keys[i]
		h, err := mn.AddPeer(key, mockAddr(i+1))
		if err != nil {
			return nil, fmt.Errorf("player %d host: %w", i, err)
		}
		wc := &wireCounter{}
		self := h.ID()
		lh := newLatencyHost(h, func(remote peer.ID) time.Duration { return latencyOf(self, remote) })
		// DHT client mode: a simulation runs no DHT lookups (placement
		// is over the directory), and a DHT server answers the routing
		// table refreshes of every peer that connects to it: at 60
		// players that alone allocated 0.4 GB per 15 simulated seconds.
		n, err := node.New(ctx, node.WithHost(lh),
			node.WithDHTMode(node.DHTClient), node.WithEveryPeerReachable(),
			node.WithRoutingTableRefresh(time.Hour),
			node.WithGossipSubParams(SimGossipSubParams()),
			// Seen message IDs for 20 s instead of gossipsub's two
			// minutes: updates are 150 ms apart and gossip reaches back
			// a few heartbeats; the cache was the largest heap item.
			node.WithPubSubOptions(pubsub.WithRawTracer(wc), pubsub.WithSeenMessagesTTL(20*time.Second)))
		if err != nil {
			return nil, fmt.Errorf("player %d node: %w", i, err)
		}
		nodes = append(nodes, n)
		svc, err := position.New(n, pc,
			position.WithCandidates(func(context.Context, string) ([]peer.ID, error) {
				return directory, nil
			}),
			position.WithDeliveryHook(func(d position.Delivery) {
				rec.record(d.Arrived.Sub(d.Sent), latencyOf(d.Player, self), d.Batched)
			}))
		if err != nil {
			return nil, fmt.Errorf("player %d position: %w", i, err)
		}
		start := regions.Coord{X: i % grid.Width, Y: (i / grid.Width) % grid.Height}
		w := NewWalker(grid, start, cfg.Speed, cfg.RegionChange, cfg.Seed*1_000_003+uint64(i))
		svc.Move(w.Position(), w.Velocity())
		players[i] = &player{node: n, svc: svc, wire: wc, walker: w, host: lh}
		players[i].setRegion(grid.RegionOf(w.Position()))
	}
	stats := newOpStats()
	var actors []*actor
	var food map[regions.Coord]*regionFood
	if cfg.EatEvery > 0 || cfg.FightEvery > 0 {
		g := workloadGame(grid.Width)
		food = worldFood(g, pc.World, directory)
		for i, p := range players {
			rsvc, err := regions.New(p.node, regions.Config{World: pc.World, Width: grid.Width, Height: grid.Height, Logger: log})
			if err != nil {
				return nil, fmt.Errorf("player %d regions: %w", i, err)
			}
			regionServices = append(regionServices, rsvc)
			a := &actor{
				p: p, self: p.node.ID(), mn: mn, store: rsvc.Client(), rsvc: rsvc, grid: grid, game: g, food: food,
				stats: stats, latency: latencyOf, eatEvery: cfg.EatEvery, fightEvery: cfg.FightEvery,
				seed: cfg.Seed*2_000_003 + uint64(i), attackers: map[peer.ID]attackSeen{},
			}
			a.me = game.NewPlayer(game.PlayerID(a.self.String()), "bot", game.Vec{})
			p.host.SetStreamHandler(play.FightProtocol, a.handleFight)
			actors = append(actors, a)
		}
	}
	// Links without latency: latencyHost adds it per stream (see there).
	if err := mn.LinkAll(); err != nil {
		return nil, fmt.Errorf("link peers: %w", err)
	}
	// Connect the players who see each other at the start, one
	// pair at a time, before the game begins: the rendezvous would find
	// them too, but thousands of concurrent dials at start-up stall
	// mocknet's per-peer locks. Later region changes go through the
	// rendezvous.
	conns := 0
	for i, a := range players {
		ra := grid.RegionOf(a.walker.Position())
		for _, b := range players[i+1:] {
			if position.Within(ra, grid.RegionOf(b.walker.Position()), cfg.Radius) {
				if _, err := mn.ConnectPeers(a.node.ID(), b.node.ID()); err != nil {
					return nil, fmt.Errorf("connect players: %w", err)
				}
				conns++
			}
		}
	}
	// Each region's coordinator knows its replica, as after a DHT lookup
	// of the region's key; the bots connect to both before they use the
	// region (actor.locate).
	for _, c := range grid.Neighbourhood(regions.Coord{}, max(grid.Width, grid.Height)) {
		rf := food[c]
		if rf != nil && rf.replica != "" {
			if _, err := mn.ConnectPeers(rf.coordinator, rf.replica); err != nil {
				return nil, fmt.Errorf("connect coordinator and replica: %w", err)
			}
		}
	}
	log.Info("network built", "players", cfg.Players, "grid", fmt.Sprintf("%dx%d", grid.Width, grid.Height), "connections", conns)

	for _, p := range players {
		runners.Go(func() {
			if err := p.svc.Run(runCtx); err != nil {
				log.Warn("position service", "peer", p.node.ID(), "err", err)
			}
		})
	}
	runners.Go(func() { drive(runCtx, players, cfg.Step) })
	for _, a := range actors {
		runners.Go(func() { a.run(runCtx) })
	}

	total := cfg.Warmup + cfg.Duration
	began := time.Now()
	bar := newProgress(cfg.Progress, total)
	var before []snapshot
	var opsBefore map[string]uint64
	var load loadMark
	measuring := false
	tick := time.NewTicker(time.Second)
	for !func() bool {
		select {
		case <-ctx.Done():
			return true
		case <-tick.C:
		}
		el := time.Since(began)
		bar.update(el)
		if !measuring && el >= cfg.Warmup {
			measuring = true
			before = snapshots(players)
			opsBefore = stats.snapshot()
			load = markLoad()
			rec.setRecording(true)
			stats.setRecording(true)
		}
		return el >= total
	}() {
	}
	tick.Stop()
	rec.setRecording(false)
	stats.setRecording(false)
	after := snapshots(players)
	opsAfter := stats.snapshot()
	used := load.since()
	if cfg.AtEnd != nil {
		cfg.AtEnd()
	}
	measured := time.Since(began) - cfg.Warmup
	bar.done()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r := buildReport(cfg, pc, before, after, measured, rec)
	r.Load = used
	if actors != nil {
		r.Workload = buildWorkload(cfg, stats, opsBefore, opsAfter)
		r.Workload.addBandwidth(before, after, measured)
		checkRoles(r.Workload, actors, food, stats)
	}
	stop()
	return r, nil
}

// cleanupWait bounds how long Run waits for the network to close.
const cleanupWait = 30 * time.Second

// teardown waits for the services (their run is cancelled; each resets its
// own streams and unsubscribes while its node still runs), then closes the
// nodes and the network. Closing nodes or the network under running
// services makes every stream reset race with their traffic.
func teardown(mn mocknet.Mocknet, nodes []*node.Node, regionServices []*regions.Service, runners *sync.WaitGroup) {
	runners.Wait()
	var rw sync.WaitGroup
	for _, s := range regionServices {
		rw.Go(func() { s.Close() })
	}
	rw.Wait()
	var wg sync.WaitGroup
	for _, n := range nodes {
		wg.Go(func() { n.Close() })
	}
	wg.Wait()
	_ = mn.Close()
	// A stream opened while its host was closing can outlive the close;
	// give such stragglers a moment, then close what is left, so that no
	// goroutine of the run survives it.
	time.Sleep(time.Second)
	for _, n := range mn.Nets() {
		for _, c := range n.Conns() {
			_ = c.Close()
		}
	}
}

// drive moves every bot each step, in player order.
func drive(ctx context.Context, players []*player, step time.Duration) {
	t := time.NewTicker(step)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, p := range players {
				p.walker.Step(step)
				p.svc.Move(p.walker.Position(), p.walker.Velocity())
				p.setRegion(p.walker.grid.RegionOf(p.walker.Position()))
			}
		}
	}
}

type snapshot struct {
	wire  wireSnapshot
	stats position.Stats
	// workloadOut and workloadIn are the workload's stream bytes.
	workloadOut, workloadIn uint64
}

func snapshots(players []*player) []snapshot {
	out := make([]snapshot, len(players))
	for i, p := range players {
		out[i] = snapshot{wire: p.wire.snapshot(), stats: p.svc.Stats(),
			workloadOut: p.host.workloadOut.Load(), workloadIn: p.host.workloadIn.Load()}
	}
	return out
}

// progress draws a one-line bar.
type progress struct {
	w     io.Writer
	total time.Duration
}

func newProgress(w io.Writer, total time.Duration) *progress { return &progress{w: w, total: total} }

func (p *progress) update(el time.Duration) {
	if p.w == nil {
		return
	}
	const width = 40
	f := min(float64(el)/float64(p.total), 1)
	n := int(f * width)
	bar := make([]byte, width)
	for i := range bar {
		switch {
		case i < n:
			bar[i] = '='
		case i == n:
			bar[i] = '>'
		default:
			bar[i] = ' '
		}
	}
	fmt.Fprintf(p.w, "\r[%s] %3.0f%% %s/%s", bar, f*100, el.Truncate(time.Second), p.total)
}

func (p *progress) done() {
	if p.w != nil {
		fmt.Fprintln(p.w)
	}
}
