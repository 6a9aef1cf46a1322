package play

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/topic"
)

// The region objects (food, health packs) live in the region object store.
// A peer loads the regions around its player: it subscribes to the region's
// committed updates, reads the region from its coordinator, and creates the
// objects the region lacks from the world seed (game.InitialObjects) with a
// read-write at version 0, which only the first creator wins. The values
// land in the avatar's world, the peer's cache, at the store's versions.
//
// Eating and picking up are two-step writes under the object's lock
// (take): the lock's answer carries the current value, the game's rule
// decides on it, and the release carries the new value; of two players
// racing for the last unit the second finds nothing left. Regrowth is a read-write
// too, by any peer in the region once the object's regrow tick has passed.
// Regrow ticks are on the shared clock (wallTick), so every peer agrees when
// an object is due.

// regionState is this peer's hold on one region's objects.
type regionState struct {
	loaded   bool
	loading  bool
	retryAt  time.Time
	sub      *regions.Subscription
	initial  []game.Object
	failures int
}

// loadedLocked reports whether region rc's objects are current. Caller
// holds p.mu.
func (p *Peer) loadedLocked(rc game.RegionCoord) bool {
	st := p.rs[rc]
	return st != nil && st.loaded
}

// Loaded reports whether the peer holds region rc's objects.
func (p *Peer) Loaded(rc game.RegionCoord) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.loadedLocked(rc)
}

// wallTick is the shared game clock: ticks since the Unix epoch at the
// world's tick rate. Regrow ticks written to the store use it.
func (p *Peer) wallTick(now time.Time) uint64 {
	return uint64(now.UnixMilli()) * uint64(p.cfg.Game.TickRate) / 1000
}

func (p *Peer) regionLoop() {
	t := time.NewTicker(p.cfg.RegionEvery)
	defer t.Stop()
	for {
		p.upkeep(time.Now())
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// upkeep loads the regions around the player, lets go of far ones, joins
// and leaves their chat topics, and regrows due objects of the player's
// region.
func (p *Peer) upkeep(now time.Time) {
	var jobs []func()
	p.mu.Lock()
	w := p.av.World()
	here := p.av.Region()
	want := map[game.RegionCoord]bool{}
	for _, rc := range w.Neighbours(here) {
		want[rc] = true
		st := p.rs[rc]
		if st == nil {
			st = &regionState{initial: game.InitialObjects(p.cfg.Game, w.Map(rc))}
			p.rs[rc] = st
		}
		if !st.loaded && !st.loading && !now.Before(st.retryAt) {
			st.loading = true
			rc := rc
			jobs = append(jobs, func() { p.load(rc) })
		}
	}
	for rc, st := range p.rs {
		if !want[rc] && !st.loading {
			if st.sub != nil {
				st.sub.Close()
			}
			delete(p.rs, rc)
		}
	}
	if p.loadedLocked(here) {
		wt := p.wallTick(now)
		for _, e := range w.Objects(here) {
			if next, due := e.Object.Regrown(wt); due && !p.regrowing[e.ID] {
				p.regrowing[e.ID] = true
				e := e
				jobs = append(jobs, func() { p.regrow(e, next) })
			}
		}
	}
	var join []game.RegionCoord
	leave := map[game.RegionCoord]*topic.Membership{}
	for rc := range want {
		if p.topics[rc] == nil {
			join = append(join, rc)
		}
	}
	for rc, t := range p.topics {
		if !want[rc] {
			leave[rc] = t
			delete(p.topics, rc)
		}
	}
	p.mu.Unlock()
	for _, t := range leave {
		p.leaveTopic(t)
	}
	for _, rc := range join {
		if err := p.joinTopic(rc); err != nil {
			p.log.Warn("join chat topic", "region", rc, "err", err)
		}
	}
	for _, j := range jobs {
		p.spawn(j)
	}
}

// load fetches region rc's objects, creates missing ones and follows its
// updates.
func (p *Peer) load(rc game.RegionCoord) {
	err := p.fetch(rc)
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.rs[rc]
	if st == nil {
		return
	}
	st.loading = false
	if err != nil {
		st.failures++
		st.retryAt = time.Now().Add(min(time.Duration(st.failures)*500*time.Millisecond, 5*time.Second))
		switch {
		case p.ctx.Err() != nil:
		case st.failures%5 == 0:
			p.log.Warn("loading region keeps failing", "region", rc, "failures", st.failures, "err", err)
		default:
			p.log.Debug("loading region failed", "region", rc, "err", err)
		}
		return
	}
	st.failures = 0
}

func (p *Peer) fetch(rc game.RegionCoord) error {
	c := coordOf(rc)
	ctx, cancel := context.WithTimeout(p.ctx, 15*time.Second)
	defer cancel()
	sub, err := p.store.Subscribe(c)
	if err != nil {
		return fmt.Errorf("subscribe to region %s: %w", rc, err)
	}
	state, err := p.store.Get(ctx, c)
	if err != nil {
		sub.Close()
		return err
	}
	p.mu.Lock()
	initial := p.rs[rc].initial
	have := make([]bool, len(initial))
	for _, o := range state.Objects {
		if slot, ok := p.absorbLocked(rc, o); ok {
			have[slot] = true
		}
	}
	p.mu.Unlock()
	for slot, o := range initial {
		if have[slot] {
			continue
		}
		value, err := o.MarshalBinary()
		if err != nil {
			sub.Close()
			return fmt.Errorf("region %s object %d: %w", rc, slot, err)
		}
		id := game.ObjectID{Region: rc, Slot: uint16(slot)}
		obj, err := p.store.ReadWrite(ctx, c, id.Key(), 0, value)
		var conflict *regions.ConflictError
		switch {
		case err == nil:
			obj.ID, obj.Value = id.Key(), value
		case errors.As(err, &conflict):
			obj = conflict.Current // someone created it first
			obj.ID = id.Key()
		default:
			sub.Close()
			return fmt.Errorf("create region %s object %d: %w", rc, slot, err)
		}
		p.mu.Lock()
		p.absorbLocked(rc, obj)
		p.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.rs[rc]
	if st == nil || p.ctx.Err() != nil {
		sub.Close()
		return errors.New("region no longer wanted")
	}
	st.loaded, st.sub = true, sub
	p.spawn(func() {
		for {
			select {
			case <-p.ctx.Done():
				return
			case up, ok := <-sub.C:
				if !ok {
					return
				}
				p.mu.Lock()
				for _, o := range up.Objects {
					p.absorbLocked(rc, o)
				}
				p.mu.Unlock()
			}
		}
	})
	return nil
}

// absorbLocked takes a store object of region rc into the cache if it is a
// valid object of that region (the slot exists, kind, place and size match
// the world seed's) and newer than the cached one. It returns the slot.
// Caller holds p.mu.
func (p *Peer) absorbLocked(rc game.RegionCoord, o regions.Object) (int, bool) {
	st := p.rs[rc]
	if st == nil {
		return 0, false
	}
	slot, ok := parseObjectKey(o.ID, len(st.initial))
	if !ok {
		p.log.Debug("ignoring unknown region object", "region", rc, "id", o.ID)
		return 0, false
	}
	v, err := game.UnmarshalObject(o.Value)
	if err != nil {
		p.log.Debug("ignoring bad region object", "region", rc, "id", o.ID, "err", err)
		return 0, false
	}
	want := st.initial[slot]
	if v.Kind != want.Kind || v.TileX != want.TileX || v.TileY != want.TileY || v.Max != want.Max {
		p.log.Debug("ignoring region object unlike the world's", "region", rc, "id", o.ID)
		return 0, false
	}
	p.av.World().ObjectTable().Set(game.ObjectID{Region: rc, Slot: uint16(slot)}, game.VersionedObject{Version: o.Version, Object: v})
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
func (p *Peer) regrow(e game.ObjectEntry, next game.Object) {
	defer func() {
		p.mu.Lock()
		delete(p.regrowing, e.ID)
		p.mu.Unlock()
	}()
	value, err := next.MarshalBinary()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	obj, err := p.store.ReadWrite(ctx, coordOf(e.ID.Region), e.ID.Key(), e.Version, value)
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
	p.mu.Lock()
	p.absorbLocked(e.ID.Region, obj)
	p.mu.Unlock()
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

// planTake picks the object an eat/pick-up input goes for and starts the
// cooldown: a health pack first when badly hurt, else food, else a pack
// when hurt at all. Caller holds p.mu.
func (p *Peer) planTake(eat, pickUp bool) (game.ObjectEntry, bool) {
	if p.acting {
		return game.ObjectEntry{}, false
	}
	self := p.av.Player()
	reach := p.cfg.Game.ReachUnits
	pack, hasPack := p.av.Nearest(game.ObjectHealthPack, reach, p.loadedLocked)
	food, hasFood := p.av.Nearest(game.ObjectFood, reach, p.loadedLocked)
	var e game.ObjectEntry
	switch {
	case pickUp && hasPack && self.Health < game.MaxHealth/2:
		e = pack
	case eat && hasFood:
		e = food
	case pickUp && hasPack && self.Health < game.MaxHealth:
		e = pack
	default:
		return game.ObjectEntry{}, false
	}
	if !p.av.TryEat() {
		return game.ObjectEntry{}, false
	}
	p.acting = true
	return e, true
}

// EatNearest eats one unit of the nearest food in reach, now, through the
// region's coordinator (the E key does the same on the next tick).
func (p *Peer) EatNearest(ctx context.Context) (TakeResult, error) {
	p.mu.Lock()
	e, ok := p.av.Nearest(game.ObjectFood, p.cfg.Game.ReachUnits, p.loadedLocked)
	switch {
	case !ok:
		p.mu.Unlock()
		return TakeResult{}, fmt.Errorf("eat: %w", ErrNothingInReach)
	case p.acting:
		p.mu.Unlock()
		return TakeResult{}, errors.New("eat: another action is in flight")
	case !p.av.TryEat():
		p.mu.Unlock()
		return TakeResult{}, errors.New("eat: dead or cooling down")
	}
	p.acting = true
	p.mu.Unlock()
	return p.take(ctx, e)
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
func (p *Peer) take(ctx context.Context, e game.ObjectEntry) (TakeResult, error) {
	verb := "eat"
	if e.Object.Kind != game.ObjectFood {
		verb = "pick up"
	}
	c, key := coordOf(e.ID.Region), e.ID.Key()
	before := e.VersionedObject
	var next game.Object
	var obj regions.Object
	locked, err := p.store.Lock(ctx, c, key, takeLockTTL)
	if err == nil {
		locked.ID = key
		p.mu.Lock()
		_, valid := p.absorbLocked(e.ID.Region, locked)
		p.mu.Unlock()
		var cur game.Object
		if !valid {
			err = fmt.Errorf("the locked value of %s is not a valid object of the region", e.ID)
		} else if cur, err = game.UnmarshalObject(locked.Value); err == nil {
			before = game.VersionedObject{Version: locked.Version, Object: cur}
			wt := p.wallTick(time.Now())
			if cur.Kind == game.ObjectFood {
				next, err = cur.Eaten(wt, p.cfg.Game.FoodRegrowTicks)
			} else {
				next, err = cur.Taken(wt, p.cfg.Game.HealthPackRespawnTicks)
			}
		}
		if err == nil {
			var value []byte
			if value, err = next.MarshalBinary(); err == nil {
				obj, err = p.store.ReleaseWith(ctx, c, key, value)
				obj.ID, obj.Value = key, value
			}
		}
		if err != nil && obj.ID == "" {
			// Nothing to write: give the lock back as it was.
			rctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
			_ = p.store.Release(rctx, c, key)
			cancel()
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.acting = false
	res := TakeResult{Object: e.ID, Kind: e.Object.Kind, Before: before}
	var conflict *regions.ConflictError
	switch {
	case errors.Is(err, game.ErrNothingLeft):
		// The lock's value had nothing left: someone else took it first.
		res.After = before
		p.notice("event", "", "Too late: someone else got there first (nothing left).")
		p.metrics.takes.WithLabelValues(verb, "conflict").Inc()
		return res, fmt.Errorf("%s %s: %w", verb, e.ID, ErrTaken)
	case err == nil:
		res.After = game.VersionedObject{Version: obj.Version, Object: next}
		p.absorbLocked(e.ID.Region, obj)
		if e.Object.Kind == game.ObjectFood {
			p.av.Feed(1)
			p.notice("event", "", "You ate some food.")
		} else {
			p.av.Heal(int32(e.Object.Amount))
			p.notice("event", "", fmt.Sprintf("You picked up a health pack (+%d).", e.Object.Amount))
		}
		p.metrics.takes.WithLabelValues(verb, "committed").Inc()
		return res, nil
	case errors.As(err, &conflict):
		current := conflict.Current
		current.ID = e.ID.Key()
		p.absorbLocked(e.ID.Region, current)
		cur, _ := p.av.World().ObjectTable().Get(e.ID)
		res.After = cur
		p.notice("event", "", fmt.Sprintf("Too late: someone else got there first (%d left).", cur.Object.Amount))
		p.metrics.takes.WithLabelValues(verb, "conflict").Inc()
		return res, fmt.Errorf("%s %s: %w", verb, e.ID, ErrTaken)
	default:
		p.notice("system", "", fmt.Sprintf("Could not %s: %v", verb, err))
		p.metrics.takes.WithLabelValues(verb, "failed").Inc()
		return res, fmt.Errorf("%s %s: %w", verb, e.ID, err)
	}
}
