package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	kb "github.com/libp2p/go-libp2p-kbucket"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/node/vnet"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// The eat and fight workload, SimMud's "an eat and a fight every ~5 s",
// over the game's own protocols:
//
//   - Eating is what game/play does for food: the bot holds its region's
//     objects (subscription to the region's committed updates, a Get, and
//     version-0 read-writes that create the objects the world seed gives
//     the region, game.InitialObjects), and eats one unit of a food object
//     with a read-write against the version it read, through the region's
//     coordinator (regions.Service). Of racing bots exactly one commits;
//     the others get a conflict. Exhausted food regrows by another
//     read-write once due, as in game/play.
//   - Fighting is the fight protocol (play.FightProtocol, with play's
//     messages and outcome rules, see game/play/duel.go): the bot attacks a
//     player it sees in its region (else one in sight), the defender admits
//     the attack if it is alive, sees the attacker, and the fight counter
//     and cooldown are respected, and both sides compute the outcome.
//   - A bot's bars follow the game's own rules: it keeps a game.Player and
//     runs game.Metabolize, ApplyDamage, Kill, Revive, Reward, FeedPlayer
//     and the fight cooldown on it against the wall-clock tick, catching
//     up tick by tick whenever it acts (liveLocked), as World.Advance does
//     every tick. Its position is the walker's.
//
// Before a bot touches a region it finds the region's coordinator: with
// DHT placement by a DHT lookup (regions.Service.Locate), as game/play
// does; else it connects to the coordinator and replica placement over
// the directory names and waits until its region service agrees, the
// stand-in for that lookup that keeps every bot's requests going to the
// one coordinator.

// workloadGame is the game configuration of the sim's regions: the
// default rules with more, faster regrowing food, so that a region of eight
// bots eating every five seconds does not run dry. Health packs are left
// out: bots only eat.
func workloadGame(side int) game.Config {
	g := game.DefaultConfig()
	g.RegionsX, g.RegionsY = side, side
	g.FoodPerRegion, g.HealthPacksPerRegion = 24, 0
	g.FoodRegrowTicks = uint64(g.TickRate) * 10
	return g
}

// worldObjects computes every region's objects as the world seed creates
// them.
func worldObjects(g game.Config) map[regions.Coord][]game.Object {
	out := map[regions.Coord][]game.Object{}
	for y := range g.RegionsY {
		for x := range g.RegionsX {
			m := game.GenerateRegionMap(g, game.RegionCoord{X: x, Y: y})
			out[regions.Coord{X: x, Y: y}] = game.InitialObjects(g, m)
		}
	}
	return out
}

// opStats collects the workload's outcomes across all bots.
type opStats struct {
	mu        sync.Mutex
	recording bool
	counts    map[string]uint64 // "op/outcome"
	eatMS     []float64
	fightMS   []float64
	fightLink []float64 // the two links' one-way latencies summed: a round trip
	commits   map[peer.ID]uint64
	held      map[regions.Coord]bool // regions any bot loaded
}

func newOpStats() *opStats {
	return &opStats{counts: map[string]uint64{}, commits: map[peer.ID]uint64{}, held: map[regions.Coord]bool{}}
}

// count records an outcome; the totals cover the whole run, the latencies
// and the per-coordinator commits only the measured window.
func (s *opStats) count(op, outcome string) {
	s.mu.Lock()
	s.counts[op+"/"+outcome]++
	s.mu.Unlock()
}

// record turns the recording of latencies on or off and returns the
// outcome counts at that moment, so that the counts of the window and its
// latencies cover the same operations.
func (s *opStats) record(on bool) map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recording = on
	out := make(map[string]uint64, len(s.counts))
	for k, v := range s.counts {
		out[k] = v
	}
	return out
}

func (s *opStats) committed(op string, took time.Duration, coordinator peer.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[op+"/committed"]++
	if !s.recording {
		return
	}
	s.commits[coordinator]++
	if op == "eat" {
		s.eatMS = append(s.eatMS, ms(took))
	}
}

func (s *opStats) fought(took, link time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts["fight/fought"]++
	if s.recording {
		s.fightMS = append(s.fightMS, ms(took))
		s.fightLink = append(s.fightLink, ms(link))
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// actor is one bot's eat and fight workload on its player.
type actor struct {
	p          *player
	self       peer.ID
	sim        *run
	store      *regions.Client
	rsvc       *regions.Service
	grid       position.Grid
	game       game.Config
	initial    map[regions.Coord][]game.Object
	stats      *opStats
	eatEvery   time.Duration
	fightEvery time.Duration
	seed       uint64

	mu      sync.Mutex
	held    regions.Coord
	holding bool
	sub     *regions.Subscription
	objects map[int]regions.Object // slot -> newest value seen
	// me is the bot's character as the game's rules see it (bars, deaths,
	// fight counter and cooldown; its position is the walker's and is not
	// kept here). The rules are game's own functions, run against the
	// shared wall-clock tick; lived is the last tick they were run for.
	me        game.Player
	lived     uint64
	attackers map[peer.ID]attackSeen
	subWG     sync.WaitGroup
	stopSub   context.CancelFunc
}

type attackSeen struct {
	counter uint64
	at      time.Time
}

// region is the bot's current region (the driver publishes it each step).
func (a *actor) region() regions.Coord {
	v := a.p.region.Load()
	return regions.Coord{X: int(v >> 32), Y: int(int32(v))}
}

// run drives the eats and the fights until ctx ends; both start at a
// random point of their first period, so the bots do not act in lockstep.
func (a *actor) run(ctx context.Context) {
	var wg sync.WaitGroup
	if a.eatEvery > 0 {
		wg.Go(func() { a.every(ctx, a.eatEvery, a.seed^0xea7, a.eat) })
	}
	if a.fightEvery > 0 {
		wg.Go(func() { a.every(ctx, a.fightEvery, a.seed^0xf16, a.fight) })
	}
	wg.Wait()
	a.mu.Lock()
	release := a.releaseLocked()
	a.mu.Unlock()
	release()
	a.subWG.Wait()
}

// every calls f at seeded intervals uniform in [period/2, 3*period/2].
func (a *actor) every(ctx context.Context, period time.Duration, seed uint64, f func(context.Context)) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	wait := time.Duration(rng.Int64N(int64(period)))
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		f(ctx)
		wait = period/2 + time.Duration(rng.Int64N(int64(period)))
	}
}

// --- eating ----------------------------------------------------------------

// wallTick is the shared game clock, as game/play computes it.
func (a *actor) wallTick(now time.Time) uint64 {
	return uint64(now.UnixMilli()) * uint64(a.game.TickRate) / 1000
}

// eat takes one unit of a food object in the bot's region.
func (a *actor) eat(ctx context.Context) {
	if !a.alive(time.Now()) {
		a.stats.count("eat", "refused: bot is down")
		return
	}
	c := a.region()
	if err := a.hold(ctx, c); err != nil {
		if ctx.Err() == nil {
			a.stats.count("eat", "failed: load region: "+err.Error())
		}
		return
	}
	wt := a.wallTick(time.Now())
	a.mu.Lock()
	var food, due []int
	for slot := range a.initial[c] {
		o, ok := a.objects[slot]
		if !ok {
			continue
		}
		v, err := game.UnmarshalObject(o.Value)
		if err != nil {
			continue
		}
		if v.Amount > 0 {
			food = append(food, slot)
		} else if _, ok := v.Regrown(wt); ok {
			due = append(due, slot)
		}
	}
	a.mu.Unlock()
	sort.Ints(food)
	sort.Ints(due)
	if len(due) > 0 {
		a.commit(ctx, c, due[int(wt)%len(due)], "regrow")
	}
	if len(food) == 0 {
		a.stats.count("eat", "refused: no food left in region")
		return
	}
	// Bots in a region pick different objects most of the time, and race
	// for the same one now and then, as players near one bush do.
	a.commit(ctx, c, food[int((wt+uint64(a.seed))%uint64(len(food)))], "eat")
}

// commit runs one read-write of the object in slot of region c against
// the version the bot holds: an eat, or a regrowth.
func (a *actor) commit(ctx context.Context, c regions.Coord, slot int, op string) {
	a.mu.Lock()
	o := a.objects[slot]
	a.mu.Unlock()
	v, err := game.UnmarshalObject(o.Value)
	if err != nil {
		a.stats.count(op, "failed: bad cached value")
		return
	}
	now := time.Now()
	var next game.Object
	if op == "eat" {
		next, err = v.Eaten(a.wallTick(now), a.game.FoodRegrowTicks)
	} else {
		var ok bool
		if next, ok = v.Regrown(a.wallTick(now)); !ok {
			err = errors.New("not due")
		}
	}
	if err != nil {
		a.stats.count(op, "refused: "+err.Error())
		return
	}
	value, err := next.MarshalBinary()
	if err != nil {
		a.stats.count(op, "failed: encode")
		return
	}
	key := game.ObjectID{Region: game.RegionCoord{X: c.X, Y: c.Y}, Slot: uint16(slot)}.Key()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	obj, err := a.store.ReadWrite(cctx, c, key, o.Version, value)
	cancel()
	took := time.Since(now)
	var conflict *regions.ConflictError
	switch {
	case err == nil:
		obj.ID, obj.Value = key, value
		a.absorb(c, obj)
		if op == "eat" {
			a.feed()
		}
		// Attributed to the coordinator in the bot's view, where the
		// request went (after a fail-over not always the placed one).
		coord, _ := a.rsvc.Coordinator(c)
		a.stats.committed(op, took, coord)
	case errors.As(err, &conflict):
		cur := conflict.Current
		cur.ID = key
		a.absorb(c, cur)
		a.stats.count(op, "refused: conflict (another bot was first)")
	case ctx.Err() != nil:
	default:
		a.stats.count(op, "failed: "+classify(err))
	}
}

// classify names an error's kind for the report without its peer IDs.
func classify(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, regions.ErrRejected):
		return "rejected by coordinator"
	case errors.Is(err, kb.ErrLookupFailure):
		return "DHT lookup found nobody"
	}
	return "other"
}

func (a *actor) feed() {
	a.mu.Lock()
	a.liveLocked(time.Now())
	game.FeedPlayer(&a.me, 1)
	a.mu.Unlock()
}

// hold makes region c the bot's loaded region: it lets go of the previous
// one, makes sure its region service sees c's coordinator, subscribes to
// c's committed updates, reads c and creates the objects c lacks.
func (a *actor) hold(ctx context.Context, c regions.Coord) error {
	a.mu.Lock()
	if a.holding && a.held == c {
		a.mu.Unlock()
		return nil
	}
	release := a.releaseLocked()
	a.mu.Unlock()
	release()

	// The errors name the stage (and the error's kind) only: they are
	// counted by name in the report.
	if err := a.locate(ctx, c); err != nil {
		return err
	}
	sub, err := a.store.Subscribe(c)
	if err != nil {
		return fmt.Errorf("subscribe: %s", classify(err))
	}
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	state, err := a.store.Get(gctx, c)
	if err != nil {
		sub.Close()
		return fmt.Errorf("read the region: %s", classify(err))
	}
	objects := map[int]regions.Object{}
	for _, o := range state.Objects {
		if slot, ok := slotOf(o.ID, len(a.initial[c])); ok {
			objects[slot] = o
		}
	}
	// The missing objects are created at once: the coordinator commits
	// the concurrent requests as one batch.
	var missing []int
	for slot := range a.initial[c] {
		if _, ok := objects[slot]; !ok {
			missing = append(missing, slot)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for _, slot := range missing {
		o := a.initial[c][slot]
		wg.Go(func() {
			obj, err := a.create(gctx, c, slot, o)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			objects[slot] = obj
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		sub.Close()
		return fmt.Errorf("create objects: %s", classify(errs[0]))
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held, a.holding, a.sub, a.objects = c, true, sub, objects
	a.stats.mu.Lock()
	a.stats.held[c] = true
	a.stats.mu.Unlock()
	sctx, stop := context.WithCancel(ctx)
	a.stopSub = stop
	a.subWG.Go(func() {
		for {
			select {
			case <-sctx.Done():
				return
			case up, ok := <-sub.C:
				if !ok {
					return
				}
				for _, o := range up.Objects {
					a.absorb(c, o)
				}
			}
		}
	})
	return nil
}

// create makes object slot of region c from the world seed's value with a
// read-write at version 0, which only the first creator wins; a conflict
// brings the value someone else made.
func (a *actor) create(ctx context.Context, c regions.Coord, slot int, o game.Object) (regions.Object, error) {
	value, err := o.MarshalBinary()
	if err != nil {
		return regions.Object{}, err
	}
	key := game.ObjectID{Region: game.RegionCoord{X: c.X, Y: c.Y}, Slot: uint16(slot)}.Key()
	obj, err := a.store.ReadWrite(ctx, c, key, 0, value)
	var conflict *regions.ConflictError
	switch {
	case err == nil:
		obj.ID, obj.Value = key, value
		a.stats.count("create", "committed")
	case errors.As(err, &conflict):
		obj = conflict.Current
		obj.ID = key
	default:
		return regions.Object{}, fmt.Errorf("create region %s object %d: %w", c, slot, err)
	}
	return obj, nil
}

// releaseLocked lets go of the held region. Caller holds a.mu and calls
// the returned func after releasing it: closing the subscription waits for
// gossipsub, which must not hold up the bot's fights.
func (a *actor) releaseLocked() func() {
	if !a.holding {
		return func() {}
	}
	stop, sub := a.stopSub, a.sub
	a.holding, a.sub, a.objects = false, nil, nil
	return func() {
		stop()
		sub.Close()
	}
}

// absorb keeps o if it belongs to the held region and is newer.
func (a *actor) absorb(c regions.Coord, o regions.Object) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.holding || a.held != c {
		return
	}
	slot, ok := slotOf(o.ID, len(a.initial[c]))
	if !ok {
		return
	}
	if _, err := game.UnmarshalObject(o.Value); err != nil {
		return
	}
	if cur, ok := a.objects[slot]; !ok || o.Version > cur.Version {
		a.objects[slot] = o
	}
}

// slotOf reads the slot of an object key "obj/<slot>" below n.
func slotOf(key string, n int) (int, bool) {
	var slot int
	if _, err := fmt.Sscanf(key, "obj/%d", &slot); err != nil || slot < 0 || slot >= n ||
		key != (game.ObjectID{Slot: uint16(slot)}).Key() {
		return 0, false
	}
	return slot, true
}

// locate finds region c's coordinator: with DHT placement by a DHT
// lookup, which connects to the peers closest to the region's key; else it
// connects to the coordinator and replica placement over the directory
// names and waits until the region service's view names the same
// coordinator (with churn, placement may change meanwhile).
func (a *actor) locate(ctx context.Context, c regions.Coord) error {
	if a.sim.cfg.DHTPlacement {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, _, err := a.rsvc.Locate(lctx, c); err != nil {
			return fmt.Errorf("locate: %s", classify(err))
		}
		return nil
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		coord, replica := a.sim.place.placed(c)
		for _, p := range []peer.ID{coord, replica} {
			if p == "" || p == a.self || a.p.host.Network().Connectedness(p) == network.Connected {
				continue
			}
			if err := a.sim.connect(a.self, p); err != nil && !errors.Is(err, vnet.ErrDown) {
				return fmt.Errorf("connect to the coordinator: %s", classify(err))
			}
		}
		if seen, _ := a.rsvc.Coordinator(c); seen == coord {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("the region service does not see the placed coordinator within 10 s")
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// --- fighting --------------------------------------------------------------

func (a *actor) alive(now time.Time) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.liveLocked(now)
}

// maxCatchUpTicks bounds how many ticks of the rules liveLocked runs at
// once (a bot is never idle that long; the bound only caps the loop).
const maxCatchUpTicks = 1 << 16

// liveLocked runs the game's per-player rules (respawn, hunger,
// starvation) for every tick since the last call up to now's wall-clock
// tick, as World.Advance runs them each tick, and reports whether the bot
// is alive. A respawned bot stays where its walker is. Caller holds a.mu.
func (a *actor) liveLocked(now time.Time) bool {
	wt := a.wallTick(now)
	if a.lived == 0 || wt-a.lived > maxCatchUpTicks {
		a.lived = wt - min(wt, 1)
	}
	for ; a.lived < wt; a.lived++ {
		t := a.lived + 1
		if game.RespawnDue(a.me, t) {
			game.Revive(&a.me, a.me.Pos)
		}
		game.Metabolize(a.game, &a.me, t)
		if a.me.Alive && a.me.Health <= 0 {
			game.Kill(a.game, &a.me, t, "")
		}
	}
	return a.me.Alive
}

// takeDamage applies a blow dealt by player by with the game's damage and
// death rules and reports whether it was fatal. Caller holds a.mu.
func (a *actor) takeDamage(now time.Time, amount int32, by game.PlayerID) bool {
	if !a.me.Alive || amount <= 0 || !game.ApplyDamage(&a.me, amount) {
		return false
	}
	game.Kill(a.game, &a.me, a.wallTick(now), by)
	return true
}

// fight attacks a player the bot sees, preferring its own region.
func (a *actor) fight(ctx context.Context) {
	now := time.Now()
	seen := a.p.svc.View(now)
	here := a.region()
	var mine, all []peer.ID
	for _, s := range seen {
		all = append(all, s.Player)
		if a.grid.RegionOf(s.Pos) == here {
			mine = append(mine, s.Player)
		}
	}
	if len(mine) == 0 {
		mine = all
	}
	if len(mine) == 0 {
		a.stats.count("fight", "refused: nobody in sight")
		return
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i] < mine[j] })
	a.mu.Lock()
	if !a.liveLocked(now) {
		a.mu.Unlock()
		a.stats.count("fight", "refused: bot is down")
		return
	}
	if !game.FightReady(a.me, a.wallTick(now)) {
		a.mu.Unlock()
		a.stats.count("fight", "refused: cooling down")
		return
	}
	target := mine[int((a.me.FightCounter+a.seed)%uint64(len(mine)))]
	counter := game.StartFight(a.game, &a.me, a.wallTick(now))
	me := game.Fighter{Skill: a.me.Skill, Health: a.me.Health}
	a.mu.Unlock()

	attacker, defender := game.PlayerID(a.self.String()), game.PlayerID(target.String())
	// The defender's state as last seen: bots publish no cards, so the
	// attacker assumes a fresh player, as game/play does without a card.
	fresh := game.FreshFighter()
	msg := play.NewAttack(attacker, defender, counter, me, fresh)
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	out, err := play.SendAttack(fctx, a.p.host, target, msg)
	cancel()
	took := time.Since(now)
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		if !a.sim.isOnline(target) {
			// Churn: it left after this bot last saw it.
			a.stats.count("fight", "failed: the defender left")
			return
		}
		a.stats.count("fight", "failed: "+classify(err))
		return
	case !out.Accepted:
		a.stats.count("fight", "refused: "+out.Refusal)
		return
	}
	rec := play.SettleAttack(attacker, defender, counter, me, fresh, out)
	a.mu.Lock()
	a.takeDamage(time.Now(), rec.Mine.AttackerDamage, defender)
	if rec.DefenderDied {
		game.Reward(&a.me)
	}
	a.mu.Unlock()
	if rec.Mismatch {
		a.stats.count("fight", "outcome mismatch")
	}
	if rec.DefenderDied {
		a.stats.count("fight", "defender defeated")
	}
	a.stats.fought(took, a.sim.latency(a.self, target)*2)
}

// handleFight is the defender's side of the fight protocol.
func (a *actor) handleFight(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(5 * time.Second))
	from := s.Conn().RemotePeer()
	att, err := play.ReadAttack(s)
	if err != nil {
		switch {
		case !a.sim.isOnline(from):
			a.stats.count("defend", "failed: the attacker left")
		case !a.sim.isOnline(a.self):
			// This bot is leaving: its streams are reset.
			a.stats.count("defend", "failed: the defender left")
		default:
			a.stats.count("defend", "malformed")
		}
		s.Reset()
		return
	}
	now := time.Now()
	inSight := false
	for _, seen := range a.p.svc.View(now) {
		if seen.Player == from {
			inSight = true
			break
		}
	}
	minGap := time.Duration(a.game.ActionCooldownTicks) * time.Second / time.Duration(a.game.TickRate) / 2
	a.mu.Lock()
	last, known := a.attackers[from]
	var why string
	switch {
	case !a.liveLocked(now):
		why = "the defender is down"
	case !inSight:
		why = "the attacker is not in sight"
	case known && att.Counter <= last.counter:
		why = "stale fight counter"
	case known && now.Sub(last.at) < minGap:
		why = "attacking faster than the cooldown"
	}
	if why != "" {
		a.mu.Unlock()
		a.stats.count("defend", "refused: "+why)
		if err := play.WriteOutcome(s, play.RefuseAttack(why)); err != nil {
			s.Reset()
		}
		return
	}
	a.attackers[from] = attackSeen{counter: att.Counter, at: now}
	// Bots publish no cards: the attacker is taken for a fresh player.
	out, rec := play.DefendAttack(game.PlayerID(from.String()), game.PlayerID(a.self.String()), att,
		game.FreshFighter(), game.Fighter{Skill: a.me.Skill, Health: a.me.Health})
	if rec.Mine.Hit && a.takeDamage(now, rec.Mine.DefenderDamage, rec.Attacker) {
		out.DefenderDied = true
	}
	a.mu.Unlock()
	a.stats.count("defend", "fought")
	if err := play.WriteOutcome(s, out); err != nil {
		s.Reset()
	}
}

// workloadProtocol reports whether a stream protocol belongs to the
// workload (region object store, fights), for its bandwidth.
func workloadProtocol(p protocol.ID) bool {
	return p == protocol.ID(regions.ProtocolID) || p == protocol.ID(play.FightProtocol)
}

// Workload is what the eat and fight workload did and cost.
type Workload struct {
	EatEverySeconds   float64 `json:"eat_every_s"`
	FightEverySeconds float64 `json:"fight_every_s"`
	// Outcomes over the whole run (warm-up included), by "op/outcome":
	// ops are eat, regrow, create (objects made from the world seed when a
	// region is first loaded), fight (the attacker's view) and defend.
	Outcomes map[string]uint64 `json:"outcomes"`
	// Over the measured window.
	EatsAttempted   uint64 `json:"eats_attempted"`
	EatsCommitted   uint64 `json:"eats_committed"`
	EatsRefused     uint64 `json:"eats_refused"`
	EatsFailed      uint64 `json:"eats_failed"`
	FightsAttempted uint64 `json:"fights_attempted"`
	FightsFought    uint64 `json:"fights_fought"`
	FightsRefused   uint64 `json:"fights_refused"`
	FightsFailed    uint64 `json:"fights_failed"`
	// EatCommitMS is the time of a committed eat's read-write: to the
	// coordinator, its replication, and back.
	EatCommitMS Dist `json:"eat_commit_ms"`
	// FightRoundTripMS is an accepted fight from opening the stream to the
	// outcome; FightLinkRTTMS twice the pair's one-way link latency.
	FightRoundTripMS Dist `json:"fight_round_trip_ms"`
	FightLinkRTTMS   Dist `json:"fight_link_rtt_ms"`
	// CommitsPerCoordinator: eats and regrowths committed in the window
	// per peer that coordinated any, as the committing bots' region
	// services name the coordinator.
	CommitsPerCoordinator Dist `json:"commits_per_coordinator"`
	// RegionsCoordinatedAsPlaced counts the regions whose coordinator, as
	// the region services report their roles at the end, is the one
	// placement over the directory names, and SplitRegions those that more
	// than one peer claimed to coordinate.
	RegionsCoordinatedAsPlaced int `json:"regions_coordinated_as_placed"`
	RegionsWithObjects         int `json:"regions_with_objects"`
	SplitRegions               int `json:"regions_claimed_by_several"`
	// RoleUnknown counts the bots whose region service did not tell its
	// roles in time (see checkRoles).
	RoleUnknown int `json:"role_unknown_bots"`
	// Extra bandwidth per node: the region-protocol and fight streams, and
	// the region event topics' published messages (gossipsub control
	// traffic of those topics not included).
	StreamBytesSentPerSec Dist `json:"workload_stream_bytes_sent_per_node_per_s"`
	EventBytesRecvPerSec  Dist `json:"event_topic_bytes_recv_per_node_per_s"`

	eatMS, fightMS             []float64
	regrowFailed, createFailed uint64
}

func diffCounts(after, before map[string]uint64) map[string]uint64 {
	out := map[string]uint64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// buildWorkload summarises the workload over the window between the two
// outcome snapshots.
func buildWorkload(cfg Config, stats *opStats, before, after map[string]uint64) *Workload {
	w := &Workload{EatEverySeconds: cfg.EatEvery.Seconds(), FightEverySeconds: cfg.FightEvery.Seconds(), Outcomes: after}
	for k, v := range diffCounts(after, before) {
		switch {
		case k == "eat/committed":
			w.EatsCommitted += v
		case strings.HasPrefix(k, "eat/refused"):
			w.EatsRefused += v
		case strings.HasPrefix(k, "eat/failed"):
			w.EatsFailed += v
		case k == "fight/fought":
			w.FightsFought += v
		case strings.HasPrefix(k, "fight/refused"):
			w.FightsRefused += v
		case strings.HasPrefix(k, "fight/failed"):
			w.FightsFailed += v
		case strings.HasPrefix(k, "regrow/failed"):
			w.regrowFailed += v
		case strings.HasPrefix(k, "create/failed"):
			w.createFailed += v
		}
	}
	w.EatsAttempted = w.EatsCommitted + w.EatsRefused + w.EatsFailed
	w.FightsAttempted = w.FightsFought + w.FightsRefused + w.FightsFailed
	stats.mu.Lock()
	defer stats.mu.Unlock()
	w.eatMS, w.fightMS = stats.eatMS, stats.fightMS
	w.EatCommitMS, w.FightRoundTripMS, w.FightLinkRTTMS = summarise(stats.eatMS), summarise(stats.fightMS), summarise(stats.fightLink)
	var per []float64
	for _, n := range stats.commits {
		per = append(per, float64(n))
	}
	sort.Float64s(per)
	w.CommitsPerCoordinator = summarise(per)
	return w
}

// checkRoles compares the region services' roles at the end of the run with
// placement over the players online, for the regions any bot loaded. A
// region service can be slow to answer on a CPU-starved machine; roles not
// known within roleWait are counted as unknown rather than holding the
// report back. The goroutines still waiting end when the services close.
func checkRoles(w *Workload, r *run) {
	r.stats.mu.Lock()
	coords := make([]regions.Coord, 0, len(r.stats.held))
	for c := range r.stats.held {
		coords = append(coords, c)
	}
	r.stats.mu.Unlock()
	sort.Slice(coords, func(i, j int) bool {
		return coords[i].Y < coords[j].Y || (coords[i].Y == coords[j].Y && coords[i].X < coords[j].X)
	})
	online := r.online()
	type answer struct {
		player int
		roles  []regions.Role
	}
	answers := make(chan answer, len(online))
	for i, p := range online {
		go func() {
			roles := make([]regions.Role, len(coords))
			for j, c := range coords {
				roles[j] = p.rsvc.Role(c)
			}
			answers <- answer{i, roles}
		}()
	}
	got := make([][]regions.Role, len(online))
	deadline := time.NewTimer(roleWait)
	defer deadline.Stop()
collect:
	for range online {
		select {
		case a := <-answers:
			got[a.player] = a.roles
		case <-deadline.C:
			break collect
		}
	}
	for _, roles := range got {
		if roles == nil {
			w.RoleUnknown++
		}
	}
	for j, c := range coords {
		var claimants []peer.ID
		for i, roles := range got {
			if roles != nil && roles[j] == regions.RoleCoordinator {
				claimants = append(claimants, online[i].id)
			}
		}
		w.RegionsWithObjects++
		if len(claimants) > 1 {
			w.SplitRegions++
		}
		if placed, _ := r.place.placed(c); len(claimants) == 1 && claimants[0] == placed {
			w.RegionsCoordinatedAsPlaced++
		}
	}
}

// roleWait bounds checkRoles.
const roleWait = 10 * time.Second

// addBandwidth fills in the workload's extra traffic per node.
func (w *Workload) addBandwidth(window []windowEntry) {
	var out, in []float64
	for _, e := range window {
		if e.seconds < minOnlineSeconds {
			continue
		}
		out = append(out, float64(e.last.workloadOut-e.first.workloadOut)/e.seconds)
		in = append(in, float64(e.last.wire.eventBytesIn-e.first.wire.eventBytesIn)/e.seconds)
	}
	w.StreamBytesSentPerSec, w.EventBytesRecvPerSec = summarise(out), summarise(in)
}

// failed counts the object requests (eats, regrowths, creations) that
// failed in the window.
func (w *Workload) failed() uint64 {
	return w.EatsFailed + w.regrowFailed + w.createFailed
}

// summary writes the workload's headline figures.
func (w *Workload) summary(out io.Writer, d func(string, Dist, string)) {
	fmt.Fprintf(out, "  workload: eat every %.1f s, fight every %.1f s (per bot, measured window)\n", w.EatEverySeconds, w.FightEverySeconds)
	fmt.Fprintf(out, "    eats   attempted %d, committed %d, refused %d, failed %d\n", w.EatsAttempted, w.EatsCommitted, w.EatsRefused, w.EatsFailed)
	fmt.Fprintf(out, "    fights attempted %d, fought %d, refused %d, failed %d\n", w.FightsAttempted, w.FightsFought, w.FightsRefused, w.FightsFailed)
	d("  eat commit latency", w.EatCommitMS, "ms")
	d("  fight round trip", w.FightRoundTripMS, "ms")
	d("  link RTT (same fights)", w.FightLinkRTTMS, "ms")
	d("  commits per coordinator", w.CommitsPerCoordinator, "")
	d("  workload streams sent", w.StreamBytesSentPerSec, "B/s")
	d("  region events received", w.EventBytesRecvPerSec, "B/s")
	fmt.Fprintf(out, "    regions coordinated as placed %d of %d used, claimed by several %d (roles unknown at %d bots)\n", w.RegionsCoordinatedAsPlaced, w.RegionsWithObjects, w.SplitRegions, w.RoleUnknown)
	keys := slices.Sorted(maps.Keys(w.Outcomes))
	fmt.Fprintf(out, "    outcomes over the whole run:")
	for _, k := range keys {
		fmt.Fprintf(out, " %s=%d;", k, w.Outcomes[k])
	}
	fmt.Fprintln(out)
}
