package sim

import (
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/vnet"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// The population: every player that is or was online, the directory of
// those online, and how a player joins and leaves.
//
// A player is a full peer: a host of the virtual network (node/vnet), a node
// (gossipsub and the DHT), a position service, and, when the run needs
// regions (workload, churn or DHT placement), a region service and the
// eat-and-fight actor. Links of the in-memory network are made on first
// contact (vnet.Network), not between every pair up front: the all-pairs links
// grow as the square of the players (about 0.7 GB at 1000).

// player is one simulated peer.
type player struct {
	idx    int
	id     peer.ID
	node   *node.Node
	svc    *position.Service
	rsvc   *regions.Service // nil when the run has no region services
	gate   *leaveGate
	reg    *prometheus.Registry // the node's and region service's metrics
	wire   *wireCounter
	follow *follower
	walker *Walker
	host   *vnet.Host
	actor  *actor     // nil without workload or with play bots
	peer   *play.Peer // with play bots: the player's runtime (svc, walker and actor are nil)

	// start is the region the player first appears in; region is the
	// walker's region, x<<32|y, for the workload.
	start  regions.Coord
	region atomic.Int64
	// regionSince is when the player entered its region (Unix ns).
	regionSince atomic.Int64
	// borderSteps counts the drive steps the player was in a border
	// region (see run.onBorder).
	borderSteps atomic.Uint64
	// conns are the player's connections, since when (see positionPath).
	conns since[peer.ID]

	// stop ends the player's goroutines (position service, actor); done
	// counts them.
	stop context.CancelFunc
	done sync.WaitGroup

	// Guarded by run.mu.
	joined, left time.Time
	online       bool
	// first and last are the player's counters at the start of the
	// measured window (or its join) and at its end (or its leave).
	first, last *snapshot
}

// currentRegion is the region setRegion last stored.
func (p *player) currentRegion() regions.Coord {
	v := p.region.Load()
	return regions.Coord{X: int(v >> 32), Y: int(int32(uint32(v)))}
}

func (p *player) setRegion(c regions.Coord) {
	if v := int64(c.X)<<32 | int64(uint32(c.Y)); p.region.Swap(v) != v || p.regionSince.Load() == 0 {
		p.regionSince.Store(time.Now().UnixNano())
	}
}

// positionStats are the player's position service's counters.
func (p *player) positionStats() position.Stats {
	if p.peer != nil {
		return p.peer.PositionStats()
	}
	return p.svc.Stats()
}

// leaveGate lets every commit through (no lease service in the
// simulator) and tells the region service, through regions.Eligibility,
// when its player is leaving, so that it hands its regions on.
type leaveGate struct{ leaving atomic.Bool }

func (g *leaveGate) Allowed(regions.Coord) (uint64, bool) { return 0, true }

func (g *leaveGate) Eligible(regions.Coord) bool { return !g.leaving.Load() }

var _ regions.Eligibility = (*leaveGate)(nil)

// placer orders the online players by XOR distance to a region's key, as
// regions.Placement does over the same list, with every hash computed
// once. Its answer for a region is cached until the directory changes.
type placer struct {
	mu      sync.Mutex
	version uint64
	hashes  map[peer.ID][sha256.Size]byte
	keys    map[regions.Coord][sha256.Size]byte
	cache   map[regions.Coord][]peer.ID
	world   string
}

// placedTop is how many peers placer keeps per region.
const placedTop = 8

func newPlacer(world string) *placer {
	return &placer{hashes: map[peer.ID][sha256.Size]byte{}, keys: map[regions.Coord][sha256.Size]byte{},
		cache: map[regions.Coord][]peer.ID{}, world: world}
}

func (pl *placer) add(p peer.ID) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.hashes[p] = sha256.Sum256([]byte(p))
	clear(pl.cache)
}

func (pl *placer) remove(p peer.ID) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	delete(pl.hashes, p)
	clear(pl.cache)
}

// order returns up to placedTop online players closest to region c's key,
// closest first: the coordinator placement names, then the replica, then
// the peers next in line.
func (pl *placer) order(c regions.Coord) []peer.ID {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if out, ok := pl.cache[c]; ok {
		return out
	}
	key, ok := pl.keys[c]
	if !ok {
		key = sha256.Sum256([]byte(regions.Key(pl.world, c)))
		pl.keys[c] = key
	}
	type item struct {
		p peer.ID
		d [sha256.Size]byte
	}
	best := make([]item, 0, placedTop+1)
	less := func(a, b [sha256.Size]byte) bool { return slices.Compare(a[:], b[:]) < 0 }
	for p, h := range pl.hashes {
		var it item
		it.p = p
		for i := range h {
			it.d[i] = h[i] ^ key[i]
		}
		if len(best) == placedTop && !less(it.d, best[len(best)-1].d) {
			continue
		}
		i, _ := slices.BinarySearchFunc(best, it, func(a, b item) int { return slices.Compare(a.d[:], b.d[:]) })
		best = slices.Insert(best, i, it)
		if len(best) > placedTop {
			best = best[:placedTop]
		}
	}
	out := make([]peer.ID, len(best))
	for i, it := range best {
		out[i] = it.p
	}
	pl.cache[c] = out
	return out
}

// placed is region c's coordinator and replica by placement over the
// online players.
func (pl *placer) placed(c regions.Coord) (coordinator, replica peer.ID) {
	o := pl.order(c)
	switch len(o) {
	case 0:
		return "", ""
	case 1:
		return o[0], ""
	}
	return o[0], o[1]
}

// directory returns the online players' IDs, as the operator's
// bootstrap service could hand them out.
func (r *run) directory() []peer.ID {
	if d := r.dir.Load(); d != nil {
		return *d
	}
	return nil
}

// setOnline adds or removes p from the directory and placement. Caller
// holds r.mu.
func (r *run) setOnline(p *player, online bool) {
	p.online = online
	if online {
		r.place.add(p.id)
	} else {
		r.place.remove(p.id)
	}
	dir := make([]peer.ID, 0, len(r.live)+1)
	for _, q := range r.live {
		if q != p {
			dir = append(dir, q.id)
		}
	}
	if online {
		r.live = append(r.live, p)
		dir = append(dir, p.id)
	} else if i := slices.Index(r.live, p); i >= 0 {
		r.live = slices.Delete(r.live, i, i+1)
	}
	r.dir.Store(&dir)
}

// online returns the players online now, in join order.
func (r *run) online() []*player {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.live)
}

// newPlayer builds player idx and its services, starting in region start,
// and links it to the network. The player is not online yet: join puts it
// there.
func (r *run) newPlayer(ctx context.Context, idx int, start regions.Coord) (*player, error) {
	key, err := keyFor(r.cfg.Seed, idx)
	if err != nil {
		return nil, err
	}
	self, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("player %d identity: %w", idx, err)
	}
	h, err := r.net.AddHost(key, vnet.Addr(idx+1), vnet.HostOptions{
		Latency: func(remote peer.ID) time.Duration { return r.latency(self, remote) },
		Tracked: workloadProtocol})
	if err != nil {
		return nil, fmt.Errorf("player %d host: %w", idx, err)
	}
	p := &player{idx: idx, id: h.ID(), start: start, wire: &wireCounter{}, follow: &follower{}, gate: &leaveGate{}, reg: prometheus.NewRegistry()}
	p.host = h
	h.Network().Notify(connNotifee(&p.conns))
	if !r.cfg.PlayBots {
		p.wire.paths = func(msg *pubsub.Message) { r.positionPath(p, msg) }
	}
	opts := []node.Option{node.WithHost(p.host), node.WithEveryPeerReachable(),
		node.WithRegisterer(p.reg),
		node.WithGossipSubParams(SimGossipSubParams()),
		// Seen message IDs for 20 s instead of gossipsub's two minutes:
		// updates are 150 ms apart and gossip reaches back a few
		// heartbeats; the cache was the largest heap item.
		node.WithPubSubOptions(pubsub.WithRawTracer(p.wire), pubsub.WithSeenMessagesTTL(20*time.Second))}
	if r.cfg.DHTPlacement {
		// Every player serves the DHT and joins it through a few players
		// already online, as play does through the bootstrap nodes.
		opts = append(opts, node.WithDHTMode(node.DHTServer), node.WithBootstrapPeers(r.bootstrapFor(idx)...))
	} else {
		// DHT client mode: placement is over the directory, and a DHT
		// server answers the routing table refreshes of every peer that
		// connects to it (at 60 players that alone allocated 0.4 GB per
		// 15 simulated seconds).
		opts = append(opts, node.WithDHTMode(node.DHTClient), node.WithRoutingTableRefresh(time.Hour))
	}
	n, err := node.New(ctx, opts...)
	if err != nil {
		_ = p.host.Close()
		return nil, fmt.Errorf("player %d node: %w", idx, err)
	}
	p.node = n
	if r.cfg.PlayBots {
		return r.playBot(ctx, p, start)
	}
	fail := func(err error) (*player, error) {
		if p.rsvc != nil {
			p.rsvc.Close()
		}
		_ = n.Close()
		return nil, err
	}
	if r.needRegions() {
		p.rsvc, err = regions.New(n, regions.Config{
			World: r.pc.World, Width: r.grid.Width, Height: r.grid.Height, Logger: r.log,
			Gate: p.gate, Registerer: p.reg,
			OnRoleChange: func(c regions.Coord, role regions.Role) { r.roles.changed(p, c, role) },
		})
		if err != nil {
			return fail(fmt.Errorf("player %d regions: %w", idx, err))
		}
	}
	popts := []position.Option{position.WithDeliveryHook(func(d position.Delivery) {
		r.rec.record(d.Arrived.Sub(d.Sent), r.latency(d.Player, self), d.Batched)
		p.follow.delivered(d)
	})}
	if r.cfg.DHTPlacement {
		// As play does: positions are aggregated by the peer that
		// coordinates the region's objects in this peer's view.
		popts = append(popts, position.WithRegionPlacement(p.rsvc))
	} else {
		popts = append(popts, position.WithCandidates(func(context.Context, string) ([]peer.ID, error) {
			return r.directory(), nil
		}))
	}
	if p.svc, err = position.New(n, r.pc, popts...); err != nil {
		return fail(fmt.Errorf("player %d position: %w", idx, err))
	}
	p.walker = NewWalker(r.grid, start, r.cfg.Speed, r.cfg.RegionChange, r.cfg.Seed*1_000_003+uint64(idx))
	p.svc.Move(p.walker.Position(), p.walker.Velocity())
	p.setRegion(r.grid.RegionOf(p.walker.Position()))
	if r.cfg.workload() {
		a := &actor{
			p: p, self: self, sim: r, store: p.rsvc.Client(), rsvc: p.rsvc, grid: r.grid, game: r.game,
			initial: r.initial, stats: r.stats, eatEvery: r.cfg.EatEvery, fightEvery: r.cfg.FightEvery,
			seed: r.cfg.Seed*2_000_003 + uint64(idx), attackers: map[peer.ID]attackSeen{},
		}
		a.me = game.NewPlayer(game.PlayerID(self.String()), "bot", game.Vec{})
		p.host.SetStreamHandler(play.FightProtocol, a.handleFight)
		p.actor = a
	}
	return p, nil
}

// bootstrapFor picks up to three players online to bootstrap player idx's
// DHT from, by the seed.
func (r *run) bootstrapFor(idx int) []peer.AddrInfo {
	live := r.online()
	if len(live) == 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(idx)^0xb007))
	var out []peer.AddrInfo
	for _, i := range rng.Perm(len(live))[:min(3, len(live))] {
		out = append(out, peer.AddrInfo{ID: live[i].id, Addrs: live[i].host.Addrs()})
	}
	return out
}

// start runs player p's goroutines.
func (r *run) start(p *player) {
	ctx, stop := context.WithCancel(r.ctx)
	p.stop = stop
	if p.peer != nil {
		p.done.Go(func() {
			if err := p.peer.Run(ctx); err != nil {
				r.log.Warn("player runtime", "peer", p.id, "err", err)
			}
		})
		return
	}
	p.done.Go(func() {
		if err := p.svc.Run(ctx); err != nil {
			r.log.Warn("position service", "peer", p.id, "err", err)
		}
	})
	if p.actor != nil {
		p.done.Go(func() { p.actor.run(ctx) })
	}
}

// stopPlayer ends p's goroutines and closes its services and node. The
// network links stay unless the caller cuts them.
func (r *run) stopPlayer(p *player) {
	p.stop()
	p.done.Wait()
	if p.rsvc != nil {
		p.rsvc.Close()
	}
	_ = p.node.Close()
}

// connect dials b from a over the in-memory network, linking them first.
func (r *run) connect(a, b peer.ID) error {
	return r.net.Connect(a, b)
}
