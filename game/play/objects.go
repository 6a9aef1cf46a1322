package play

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/regions"
)

// The region objects (food, health packs) live in the region object store.
// The object cache loads the regions around the player: it subscribes to
// each region's committed updates, reads the region from its coordinator,
// and creates the objects the region lacks from the world seed
// (game.InitialObjects) with a read-write at version 0, which only the
// first creator wins. The values land, at the store's versions, in the
// avatar's movement world's object table (the game loop's, written through
// gameLoop.with), where the player's moves and the bot find them.
//
// The regions service keeps a member cache of its own for the same
// regions: raw entries, signed by their coordinators, that a rebuild takes.
// This cache holds what the game makes of them: objects checked against
// the world seed. The one feeds the other through the region's
// Subscription.
//
// Eating and picking up are two-step writes under the object's lock
// (take): the lock's answer carries the current value, the game's rule
// decides on it, and the release carries the new value; of two players
// racing for the last unit the second finds nothing left. Regrowth is a
// read-write too, by any peer in the region once the object's regrow tick
// has passed. Regrow ticks are on the shared clock (wallTick), so every
// peer agrees when an object is due.

// objectCache holds the region objects around the player and carries out
// its eats and pick-ups. Its loop loads the regions the player comes near,
// lets go of far ones and regrows due objects.
type objectCache struct {
	game    game.Config
	every   time.Duration // the upkeep period
	store   ObjectStore
	loop    *gameLoop
	msgs    *messageLog
	metrics *metrics
	log     *slog.Logger
	life    lifetime

	mu        sync.Mutex
	rs        map[game.RegionCoord]*regionState
	regrowing map[game.ObjectID]bool
	acting    bool // an eat or pick-up is in flight
}

// regionState is this peer's hold on one region's objects.
type regionState struct {
	loaded   bool
	loading  bool
	retryAt  time.Time
	sub      *regions.Subscription
	initial  []game.Object
	failures int
}

func newObjectCache(cfg Config, store ObjectStore, loop *gameLoop, msgs *messageLog, m *metrics, log *slog.Logger) *objectCache {
	return &objectCache{
		game: cfg.Game, every: cfg.RegionEvery, store: store, loop: loop, msgs: msgs, metrics: m, log: log,
		life: newLifetime(), rs: map[game.RegionCoord]*regionState{}, regrowing: map[game.ObjectID]bool{},
	}
}

func (o *objectCache) start() {
	o.life.spawn(func() {
		t := time.NewTicker(o.every)
		defer t.Stop()
		for {
			o.upkeep(time.Now())
			select {
			case <-o.life.ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// stop ends the upkeep and every load, regrowth and take in flight, then
// lets go of the regions.
func (o *objectCache) stop() {
	o.life.end()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, st := range o.rs {
		if st.sub != nil {
			st.sub.Close()
			st.sub = nil
		}
	}
}

// loaded lists the regions whose objects are current.
func (o *objectCache) loaded() map[game.RegionCoord]bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.loadedLocked()
}

func (o *objectCache) loadedLocked() map[game.RegionCoord]bool {
	out := make(map[game.RegionCoord]bool, len(o.rs))
	for rc, st := range o.rs {
		if st.loaded {
			out[rc] = true
		}
	}
	return out
}

// isLoaded reports whether region rc's objects are current.
func (o *objectCache) isLoaded(rc game.RegionCoord) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	st := o.rs[rc]
	return st != nil && st.loaded
}

// wallTick is the shared game clock: ticks since the Unix epoch at the
// world's tick rate. Regrow ticks written to the store use it.
func (o *objectCache) wallTick(now time.Time) uint64 {
	return uint64(now.UnixMilli()) * uint64(o.game.TickRate) / 1000
}

// upkeep loads the regions around the player, lets go of far ones and
// regrows due objects of the player's region.
func (o *objectCache) upkeep(now time.Time) {
	w := o.loop.terrain()
	here := o.loop.region()
	var due []game.ObjectEntry
	o.loop.with(func(av *Avatar) { due = av.World().Objects(here) })
	var jobs []func()
	o.mu.Lock()
	for _, rc := range w.Neighbours(here) {
		st := o.rs[rc]
		if st == nil {
			st = &regionState{initial: game.InitialObjects(o.game, w.Map(rc))}
			o.rs[rc] = st
		}
		if !st.loaded && !st.loading && !now.Before(st.retryAt) {
			st.loading = true
			jobs = append(jobs, func() { o.load(rc) })
		}
	}
	near := map[game.RegionCoord]bool{}
	for _, rc := range w.Neighbours(here) {
		near[rc] = true
	}
	for rc, st := range o.rs {
		if !near[rc] && !st.loading {
			if st.sub != nil {
				st.sub.Close()
			}
			delete(o.rs, rc)
		}
	}
	if st := o.rs[here]; st != nil && st.loaded {
		wt := o.wallTick(now)
		for _, e := range due {
			if next, ok := e.Object.Regrown(wt); ok && !o.regrowing[e.ID] {
				o.regrowing[e.ID] = true
				jobs = append(jobs, func() { o.regrow(e, next) })
			}
		}
	}
	o.mu.Unlock()
	for _, j := range jobs {
		o.life.spawn(j)
	}
}

// load fetches region rc's objects, creates missing ones and follows its
// updates.
func (o *objectCache) load(rc game.RegionCoord) {
	err := o.fetch(rc)
	o.mu.Lock()
	defer o.mu.Unlock()
	st := o.rs[rc]
	if st == nil {
		return
	}
	st.loading = false
	if err != nil {
		st.failures++
		st.retryAt = time.Now().Add(min(time.Duration(st.failures)*500*time.Millisecond, 5*time.Second))
		switch {
		case o.life.ctx.Err() != nil:
		case st.failures%5 == 0:
			o.log.Warn("loading region keeps failing", "region", rc, "failures", st.failures, "err", err)
		default:
			o.log.Debug("loading region failed", "region", rc, "err", err)
		}
		return
	}
	st.failures = 0
}

func (o *objectCache) fetch(rc game.RegionCoord) error {
	c := coordOf(rc)
	ctx, cancel := context.WithTimeout(o.life.ctx, 15*time.Second)
	defer cancel()
	sub, err := o.store.Subscribe(c)
	if err != nil {
		return fmt.Errorf("subscribe to region %s: %w", rc, err)
	}
	state, err := o.store.Get(ctx, c)
	if err != nil {
		sub.Close()
		return err
	}
	o.mu.Lock()
	initial := o.rs[rc].initial
	have := make([]bool, len(initial))
	for _, obj := range state.Objects {
		if slot, ok := o.absorbLocked(rc, obj); ok {
			have[slot] = true
		}
	}
	o.mu.Unlock()
	for slot, obj := range initial {
		if have[slot] {
			continue
		}
		value, err := obj.MarshalBinary()
		if err != nil {
			sub.Close()
			return fmt.Errorf("region %s object %d: %w", rc, slot, err)
		}
		id := game.ObjectID{Region: rc, Slot: uint16(slot)}
		stored, err := o.store.ReadWrite(ctx, c, id.Key(), 0, value)
		var conflict *regions.ConflictError
		switch {
		case err == nil:
			stored.ID, stored.Value = id.Key(), value
		case errors.As(err, &conflict):
			stored = conflict.Current // someone created it first
			stored.ID = id.Key()
		default:
			sub.Close()
			return fmt.Errorf("create region %s object %d: %w", rc, slot, err)
		}
		o.mu.Lock()
		o.absorbLocked(rc, stored)
		o.mu.Unlock()
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	st := o.rs[rc]
	if st == nil || o.life.ctx.Err() != nil {
		sub.Close()
		return errors.New("region no longer wanted")
	}
	st.loaded, st.sub = true, sub
	o.life.spawn(func() { o.follow(rc, sub) })
	return nil
}

// follow takes region rc's committed updates into the cache until the
// subscription closes or the cache stops.
func (o *objectCache) follow(rc game.RegionCoord, sub *regions.Subscription) {
	for {
		select {
		case <-o.life.ctx.Done():
			return
		case up, ok := <-sub.C:
			if !ok {
				return
			}
			o.mu.Lock()
			for _, obj := range up.Objects {
				o.absorbLocked(rc, obj)
			}
			o.mu.Unlock()
		}
	}
}

// absorbLocked takes a store object of region rc into the cache if it is a
// valid object of that region (the slot exists, kind, place and size match
// the world seed's) and newer than the cached one. It returns the slot.
// Caller holds o.mu.
func (o *objectCache) absorbLocked(rc game.RegionCoord, obj regions.Object) (int, bool) {
	st := o.rs[rc]
	if st == nil {
		return 0, false
	}
	slot, ok := parseObjectKey(obj.ID, len(st.initial))
	if !ok {
		o.log.Debug("ignoring unknown region object", "region", rc, "id", obj.ID)
		return 0, false
	}
	v, err := game.UnmarshalObject(obj.Value)
	if err != nil {
		o.log.Debug("ignoring bad region object", "region", rc, "id", obj.ID, "err", err)
		return 0, false
	}
	want := st.initial[slot]
	if v.Kind != want.Kind || v.TileX != want.TileX || v.TileY != want.TileY || v.Max != want.Max {
		o.log.Debug("ignoring region object unlike the world's", "region", rc, "id", obj.ID)
		return 0, false
	}
	o.loop.with(func(av *Avatar) {
		av.World().ObjectTable().Set(game.ObjectID{Region: rc, Slot: uint16(slot)}, game.VersionedObject{Version: obj.Version, Object: v})
	})
	return slot, true
}

// parseObjectKey reads "obj/<slot>" (game.ObjectID.Key) with slot < n.
func parseObjectKey(key string, n int) (int, bool) {
	rest, ok := strings.CutPrefix(key, "obj/")
	if !ok || rest == "" || len(rest) > 5 || (len(rest) > 1 && rest[0] == '0') {
		return 0, false
	}
	slot, err := strconv.Atoi(rest)
	if err != nil || slot < 0 || slot >= n {
		return 0, false
	}
	return slot, true
}

// regrow restores an exhausted object whose regrow tick has passed. Other
// peers may race for it; whichever commits first does it for all.
func (o *objectCache) regrow(e game.ObjectEntry, next game.Object) {
	defer func() {
		o.mu.Lock()
		delete(o.regrowing, e.ID)
		o.mu.Unlock()
	}()
	value, err := next.MarshalBinary()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(o.life.ctx, 10*time.Second)
	defer cancel()
	obj, err := o.store.ReadWrite(ctx, coordOf(e.ID.Region), e.ID.Key(), e.Version, value)
	var conflict *regions.ConflictError
	switch {
	case err == nil:
		obj.Value = value
	case errors.As(err, &conflict):
		obj = conflict.Current
	default:
		return
	}
	obj.ID = e.ID.Key()
	o.mu.Lock()
	o.absorbLocked(e.ID.Region, obj)
	o.mu.Unlock()
}

// TakeResult is a committed eat or pick-up.
type TakeResult struct {
	Object game.ObjectID
	Kind   game.ObjectKind
	// Before is the value the player read; After the committed one.
	Before, After game.VersionedObject
}

// ErrTaken is returned (wrapped) when another player changed the object
// first; the cache then holds the current value.
var ErrTaken = errors.New("someone else got there first")

// ErrNothingInReach means there is no food or pack within reach.
var ErrNothingInReach = errors.New("nothing in reach")

// tryTake carries out the eat or pick-up of a tick, if one is in reach and
// none is in flight, in the background.
func (o *objectCache) tryTake(eat, pickUp bool) {
	o.mu.Lock()
	e, ok := o.planLocked(eat, pickUp)
	o.mu.Unlock()
	if !ok {
		return
	}
	if !o.life.spawn(func() {
		ctx, cancel := context.WithTimeout(o.life.ctx, 10*time.Second)
		defer cancel()
		_, _ = o.take(ctx, e)
	}) {
		o.mu.Lock()
		o.acting = false
		o.mu.Unlock()
	}
}

// planLocked picks the object an eat/pick-up input goes for and starts the
// cooldown: a health pack first when badly hurt, else food, else a pack
// when hurt at all. Caller holds o.mu.
func (o *objectCache) planLocked(eat, pickUp bool) (game.ObjectEntry, bool) {
	if o.acting {
		return game.ObjectEntry{}, false
	}
	loaded := o.loadedLocked()
	in := func(rc game.RegionCoord) bool { return loaded[rc] }
	var e game.ObjectEntry
	ok := false
	o.loop.with(func(av *Avatar) {
		self := av.Player()
		reach := o.game.ReachUnits
		pack, hasPack := av.Nearest(game.ObjectHealthPack, reach, in)
		food, hasFood := av.Nearest(game.ObjectFood, reach, in)
		switch {
		case pickUp && hasPack && self.Health < game.MaxHealth/2:
			e = pack
		case eat && hasFood:
			e = food
		case pickUp && hasPack && self.Health < game.MaxHealth:
			e = pack
		default:
			return
		}
		ok = av.TryEat()
	})
	o.acting = ok
	return e, ok
}

// eatNearest eats one unit of the nearest food in reach, now.
func (o *objectCache) eatNearest(ctx context.Context) (TakeResult, error) {
	o.mu.Lock()
	loaded := o.loadedLocked()
	var e game.ObjectEntry
	var found, ready bool
	o.loop.with(func(av *Avatar) {
		e, found = av.Nearest(game.ObjectFood, o.game.ReachUnits, func(rc game.RegionCoord) bool { return loaded[rc] })
		ready = found && !o.acting && av.TryEat()
	})
	switch {
	case !found:
		o.mu.Unlock()
		return TakeResult{}, fmt.Errorf("eat: %w", ErrNothingInReach)
	case o.acting:
		o.mu.Unlock()
		return TakeResult{}, errors.New("eat: another action is in flight")
	case !ready:
		o.mu.Unlock()
		return TakeResult{}, errors.New("eat: dead or cooling down")
	}
	o.acting = true
	o.mu.Unlock()
	return o.take(ctx, e)
}

// takeLockTTL is how long a player holds an object's lock for an eat or a
// pick-up: the time to decide and release. A holder that vanishes delays
// the object's next taker this long.
const takeLockTTL = 3 * time.Second

// take commits an eat (food) or pick-up (health pack) of e as paper 004's
// two-step write: it locks the object at its region's coordinator (waiting
// there while another player holds it), decides with the game's rule
// (game.Object.Eaten, Taken) on the value the lock returns, and writes the
// result with the release, one commit. Two players eating from food with
// two units left both eat; of two racing for the last unit the second
// finds nothing left.
func (o *objectCache) take(ctx context.Context, e game.ObjectEntry) (TakeResult, error) {
	verb := "eat"
	if e.Object.Kind != game.ObjectFood {
		verb = "pick up"
	}
	c, key := coordOf(e.ID.Region), e.ID.Key()
	before := e.VersionedObject
	var next game.Object
	var obj regions.Object
	locked, err := o.store.Lock(ctx, c, key, takeLockTTL)
	if err == nil {
		locked.ID = key
		o.mu.Lock()
		_, valid := o.absorbLocked(e.ID.Region, locked)
		o.mu.Unlock()
		var cur game.Object
		if !valid {
			err = fmt.Errorf("the locked value of %s is not a valid object of the region", e.ID)
		} else if cur, err = game.UnmarshalObject(locked.Value); err == nil {
			before = game.VersionedObject{Version: locked.Version, Object: cur}
			wt := o.wallTick(time.Now())
			if cur.Kind == game.ObjectFood {
				next, err = cur.Eaten(wt, o.game.FoodRegrowTicks)
			} else {
				next, err = cur.Taken(wt, o.game.HealthPackRespawnTicks)
			}
		}
		if err == nil {
			var value []byte
			if value, err = next.MarshalBinary(); err == nil {
				obj, err = o.store.ReleaseWith(ctx, c, key, value)
				obj.ID, obj.Value = key, value
			}
		}
		if err != nil && obj.ID == "" {
			// Nothing to write: give the lock back as it was.
			rctx, cancel := context.WithTimeout(o.life.ctx, 5*time.Second)
			_ = o.store.Release(rctx, c, key)
			cancel()
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.acting = false
	res := TakeResult{Object: e.ID, Kind: e.Object.Kind, Before: before}
	var conflict *regions.ConflictError
	switch {
	case errors.Is(err, game.ErrNothingLeft):
		// The lock's value had nothing left: someone else took it first.
		res.After = before
		o.msgs.notice("event", "Too late: someone else got there first (nothing left).")
		o.metrics.takes.WithLabelValues(verb, "conflict").Inc()
		return res, fmt.Errorf("%s %s: %w", verb, e.ID, ErrTaken)
	case err == nil:
		res.After = game.VersionedObject{Version: obj.Version, Object: next}
		o.absorbLocked(e.ID.Region, obj)
		o.loop.with(func(av *Avatar) {
			if e.Object.Kind == game.ObjectFood {
				av.Feed(1)
			} else {
				av.Heal(int32(e.Object.Amount))
			}
		})
		if e.Object.Kind == game.ObjectFood {
			o.msgs.notice("event", "You ate some food.")
		} else {
			o.msgs.notice("event", fmt.Sprintf("You picked up a health pack (+%d).", e.Object.Amount))
		}
		o.metrics.takes.WithLabelValues(verb, "committed").Inc()
		return res, nil
	case errors.As(err, &conflict):
		current := conflict.Current
		current.ID = e.ID.Key()
		o.absorbLocked(e.ID.Region, current)
		o.loop.with(func(av *Avatar) { res.After, _ = av.World().ObjectTable().Get(e.ID) })
		o.msgs.notice("event", fmt.Sprintf("Too late: someone else got there first (%d left).", res.After.Object.Amount))
		o.metrics.takes.WithLabelValues(verb, "conflict").Inc()
		return res, fmt.Errorf("%s %s: %w", verb, e.ID, ErrTaken)
	default:
		o.msgs.notice("system", fmt.Sprintf("Could not %s: %v", verb, err))
		o.metrics.takes.WithLabelValues(verb, "failed").Inc()
		return res, fmt.Errorf("%s %s: %w", verb, e.ID, err)
	}
}
