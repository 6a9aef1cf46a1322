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
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/vnet"
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
	// SessionMean turns churn on: each player stays online for a session
	// drawn from an exponential distribution with this mean (seeded), then
	// leaves, and a new player joins in its place; zero: no churn. See
	// churn.go.
	SessionMean time.Duration
	// Leave is how a player leaves when its session ends.
	Leave LeaveMode
	// DHTPlacement makes every player serve the DHT and find each
	// region's coordinator with a DHT lookup (regions.Service.Locate), as
	// game/play does, instead of placement over the directory of players.
	DHTPlacement bool
	// PlayBots makes every player game/play's runtime (play.Peer) driven
	// by a game.Bot, the peer a player runs, instead of the simulator's
	// walker and actor: SimMud's workload by the game's own bot, eats and
	// fights by play's code. It implies DHTPlacement (play places regions
	// that way); a leaving play bot closes or crashes (play has no way to
	// step aside first). Speed, RegionChange, Step, EatEvery and
	// FightEvery do not apply: game.DefaultBotPace does.
	PlayBots bool
	// Progress, if set, receives a progress line.
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
		Leave:        LeaveHandoff,
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
	if c.SessionMean < 0 {
		errs = append(errs, fmt.Errorf("mean session %s: want >= 0 (0: no churn)", c.SessionMean))
	}
	switch {
	case c.Leave != LeaveHandoff && c.Leave != LeaveClose && c.Leave != LeaveCrash:
		errs = append(errs, fmt.Errorf("leave mode %q: want %q, %q or %q", c.Leave, LeaveHandoff, LeaveClose, LeaveCrash))
	case c.PlayBots && c.SessionMean > 0 && c.Leave == LeaveHandoff:
		errs = append(errs, fmt.Errorf("leave mode %q with play bots: play cannot step aside before it leaves; use %q or %q", c.Leave, LeaveClose, LeaveCrash))
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
	// Placement over a static population is trusted for a minute; with
	// churn or DHT placement a computed coordinator is kept for the
	// protocol's default, as in play.
	if c.SessionMean == 0 && !c.DHTPlacement {
		pc.CoordinatorTTL = time.Minute
	}
	// Without churn players re-register every 20 s: they meet at
	// start-up through pre-connection and on region changes through the
	// rendezvous at subscription, so the periodic one only catches
	// stragglers. With churn it stays at the protocol's default: a
	// region's coordinator changes every few seconds, and a new one names
	// only the players that registered with it since; at 20 s newcomers
	// and players entering a region met the players around them late, and
	// 1.7 % of direct updates took two hops (60 players, 9 regions).
	if c.SessionMean == 0 {
		pc.Rendezvous = 20 * time.Second
	}
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

// keyFor derives player i's identity from the seed, so that placement
// (and with it the whole run) is reproducible.
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

// run is one simulation's state.
type run struct {
	cfg   Config
	pc    position.Config
	grid  position.Grid
	log   *slog.Logger
	net   *vnet.Network
	place *placer
	rec   *delays
	paths *pathRecorder
	stats *opStats
	roles *roleLog
	game  game.Config
	// initial are each region's objects as the world seed makes them.
	initial map[regions.Coord][]game.Object
	// ctx is the players' context: it ends when the run does.
	ctx context.Context
	// churning runs the churn loop; bg counts the goroutines it starts
	// (leaves, coordinator watches). Wait for churning before bg.
	churning, bg sync.WaitGroup

	dir atomic.Pointer[[]peer.ID] // online players' IDs

	mu        sync.Mutex
	all       []*player // every player that joined, in join order
	live      []*player // online now, in join order
	byID      map[peer.ID]*player
	next      int // index of the next player to join
	measuring bool
	ended     bool
	// windowStart is when the measured window opened.
	windowStart time.Time
	churn       churnCounts
}

func (c Config) churning() bool { return c.SessionMean > 0 }

// workload: the simulator's actors eat and fight (play bots do so on
// their own).
func (c Config) workload() bool { return !c.PlayBots && (c.EatEvery > 0 || c.FightEvery > 0) }

// needRegions: a region service per player for the workload, for churn
// (coordinators come and go), for DHT placement (positions follow the
// region service) and in play bots (play runs one).
func (r *run) needRegions() bool {
	return r.cfg.workload() || r.cfg.churning() || r.cfg.DHTPlacement || r.cfg.PlayBots
}

// onBorder reports whether a player in region c follows regions outside
// the world: c is within the interest radius of the world's edge, so its
// player has fewer regions around it than one further in.
func (r *run) onBorder(c regions.Coord) bool {
	rad := r.cfg.Radius
	return c.X < rad || c.Y < rad || c.X >= r.grid.Width-rad || c.Y >= r.grid.Height-rad
}

func (r *run) latency(a, b peer.ID) time.Duration {
	return linkLatency(r.cfg.Seed, a, b, r.cfg.LatencyMin, r.cfg.LatencyMax)
}

func (r *run) player(id peer.ID) *player {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byID[id]
}

// isOnline reports whether the player with id is online now.
func (r *run) isOnline(id peer.ID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.byID[id]
	return p != nil && p.online
}

// startRegion is where player idx first appears: the initial players fill
// the grid row by row, later ones a region drawn from the seed.
func (r *run) startRegion(idx int) regions.Coord {
	if idx < r.cfg.Players {
		return regions.Coord{X: idx % r.grid.Width, Y: (idx / r.grid.Width) % r.grid.Height}
	}
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(idx)^0x5ea7))
	return regions.Coord{X: rng.IntN(r.grid.Width), Y: rng.IntN(r.grid.Height)}
}

// Run runs the simulation and returns its report. It stops early, with an
// error, if ctx ends.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("sim config: %w", err)
	}
	if cfg.PlayBots {
		cfg.DHTPlacement = true
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pc := cfg.positionConfig()
	if cfg.Speed > pc.MaxSpeed {
		return nil, fmt.Errorf("bot speed %d above the speed limit %d", cfg.Speed, pc.MaxSpeed)
	}
	wallStart := wallClock()
	runCtx, stop := context.WithCancel(ctx)
	r := &run{
		cfg: cfg, pc: pc, grid: pc.Grid(), log: log, net: vnet.New(0), place: newPlacer(pc.World),
		rec: &delays{}, paths: newPathRecorder(), stats: newOpStats(), roles: newRoleLog(), ctx: runCtx, byID: map[peer.ID]*player{},
	}
	var runners sync.WaitGroup
	defer func() {
		stop()
		began := time.Now()
		done := make(chan struct{})
		go func() {
			defer close(done)
			r.teardown(&runners)
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
	if cfg.workload() || cfg.PlayBots {
		r.game = workloadGame(r.grid.Width)
		r.initial = worldObjects(r.game)
	}

	bar := newProgress(cfg.Progress, cfg.Warmup+cfg.Duration, wallStart)
	for i := range cfg.Players {
		p, err := r.newPlayer(ctx, i, r.startRegion(i))
		if err != nil {
			return nil, err
		}
		r.join(p)
		bar.building(i+1, cfg.Players)
	}
	r.mu.Lock()
	r.next = cfg.Players
	players := slices.Clone(r.live)
	r.mu.Unlock()
	// Connect the players who see each other at the start, one pair at a
	// time, before the game begins: the rendezvous would find them too,
	// but thousands of concurrent dials at start-up stall mocknet's
	// per-peer locks. Later region changes go through the rendezvous.
	conns := 0
	for i, a := range players {
		for _, b := range players[i+1:] {
			if position.Within(a.start, b.start, cfg.Radius) {
				if err := r.connect(a.id, b.id); err != nil {
					return nil, fmt.Errorf("connect players: %w", err)
				}
				conns++
			}
		}
	}
	if !cfg.DHTPlacement && r.needRegions() {
		// Each region's coordinator knows its replica, as after a DHT
		// lookup of the region's key; the bots connect to both before
		// they use the region (actor.locate).
		for _, c := range r.grid.Neighbourhood(regions.Coord{}, max(r.grid.Width, r.grid.Height)) {
			if coord, replica := r.place.placed(c); replica != "" {
				if err := r.connect(coord, replica); err != nil {
					return nil, fmt.Errorf("connect coordinator and replica: %w", err)
				}
			}
		}
	}
	buildSeconds := wallClock().Sub(wallStart).Seconds()
	log.Info("network built", "players", cfg.Players, "grid", fmt.Sprintf("%dx%d", r.grid.Width, r.grid.Height),
		"connections", conns, "took", time.Duration(buildSeconds*float64(time.Second)))

	bar.running()
	for _, p := range players {
		r.start(p)
	}
	runners.Go(func() { r.drive(runCtx) })
	churnCtx, stopChurn := context.WithCancel(runCtx)
	defer stopChurn()
	if cfg.churning() {
		r.churning.Go(func() { r.churnLoop(churnCtx) })
	}

	total := cfg.Warmup + cfg.Duration
	began := time.Now()
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
		bar.update(el, len(r.directory()))
		if !measuring && el >= cfg.Warmup {
			measuring = true
			opsBefore = r.stats.record(true)
			r.rec.setRecording(true)
			r.paths.setRecording(true)
			load = markLoad()
			r.beginWindow()
		}
		return el >= total
	}() {
	}
	tick.Stop()
	r.rec.setRecording(false)
	r.paths.setRecording(false)
	opsAfter := r.stats.record(false)
	measured := time.Since(began) - cfg.Warmup
	window := r.endWindow()
	used := load.since()
	mem := measureMemory(r.online())
	if cfg.AtEnd != nil {
		cfg.AtEnd()
	}
	// The churn stops with the window; the leaves under way finish and
	// the watches of their regions' next coordinators end (within
	// nextWait), while the network runs on.
	stopChurn()
	r.churning.Wait()
	r.bg.Wait()
	bar.done()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rep := buildReport(cfg, pc, window, measured, r.rec)
	rep.Load = used
	rep.Paths = r.paths.report()
	rep.Memory = mem
	rep.RegionActivity = r.regionsReport(window)
	if cfg.churning() {
		rep.Churn = r.churnReport()
	}
	if cfg.workload() {
		rep.Workload = buildWorkload(cfg, r.stats, opsBefore, opsAfter)
		rep.Workload.addBandwidth(window)
		if rep.RegionActivity != nil {
			rep.RegionActivity.ObjectRequestsFailed = rep.Workload.failed()
		}
		checkRoles(rep.Workload, r)
	}
	if cfg.PlayBots {
		rep.PlayBots = true
		rep.Play = playActions(window)
		rep.RegionActivity.ObjectRequestsFailed = rep.Play["eat/failed"] + rep.Play["pickup/failed"]
		rep.RegionActivity.Placement = r.placementOfAll()
	}
	rep.BuildSeconds = buildSeconds
	rep.WallSeconds = wallClock().Sub(wallStart).Seconds()
	stop()
	return rep, nil
}

// join puts a built player in the directory (its goroutines start with
// start).
func (r *run) join(p *player) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p.joined = time.Now()
	r.byID[p.id] = p
	r.all = append(r.all, p)
	r.setOnline(p, true)
	if r.measuring {
		// Its counters start at zero with the join.
		p.first = &snapshot{}
	}
	r.roles.joined(p)
}

// cleanupWait bounds how long Run waits for the network to close.
const cleanupWait = 30 * time.Second

// teardown waits for the churn and the services (their run is cancelled;
// each resets its own streams and unsubscribes while its node still runs),
// then closes the nodes and the network. Closing nodes or the network
// under running services makes every stream reset race with their traffic.
func (r *run) teardown(runners *sync.WaitGroup) {
	runners.Wait()
	r.churning.Wait()
	r.bg.Wait()
	r.mu.Lock()
	all := slices.Clone(r.all)
	r.mu.Unlock()
	for _, p := range all {
		if p.stop != nil {
			p.stop()
		}
	}
	for _, p := range all {
		p.done.Wait()
	}
	var rw sync.WaitGroup
	for _, p := range all {
		if p.rsvc != nil {
			rw.Go(func() { p.rsvc.Close() })
		}
	}
	rw.Wait()
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() { p.node.Close() })
	}
	wg.Wait()
	_ = r.net.Close()
	// A stream opened while its host was closing can outlive the close;
	// give such stragglers a moment, then close what is left, so that no
	// goroutine of the run survives it.
	time.Sleep(time.Second)
	r.net.CloseConns()
}

// drive moves every online bot each step, in join order, by one step. On
// a starved machine ticks come late and the bots walk slower than their
// speed; moving them by the time that passed instead would make them jump
// after a stall, between two updates the position service stamped with
// times closer together than the moves (a teleport to the receivers).
// Unlike play's game loop it does not stamp positions with the step's
// time (position.MoveAt): the update delay the simulator reports is the
// network's, from publishing to arrival, as SimMud measured it, not the
// age of the position, which with 100 ms steps would add up to a step.
func (r *run) drive(ctx context.Context) {
	t := time.NewTicker(r.cfg.Step)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			for _, p := range r.online() {
				if p.walker == nil {
					continue // a play bot: its game.Bot walks
				}
				p.walker.Step(r.cfg.Step)
				p.svc.Move(p.walker.Position(), p.walker.Velocity())
				c := p.walker.grid.RegionOf(p.walker.Position())
				p.setRegion(c)
				if r.onBorder(c) {
					p.borderSteps.Add(1)
				}
			}
		}
	}
}
