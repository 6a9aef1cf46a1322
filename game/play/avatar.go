package play

import (
	"fmt"
	"math"

	"github.com/overworld-p2p/overworld/game"
)

// Avatar is the player's own character in P2P mode. The peer is the only
// authority over it: a game.World (the "movement world", holding just this
// player and the world's objects as the peer last saw them) moves it with the
// game's collision rules, and the Avatar applies everything else — hunger,
// starvation, death, respawn, and the outcomes the network settles (a meal
// the region coordinator committed, a fight both peers computed).
//
// game.World keeps its players private, so the outcomes cannot be written
// into it; the movement world's own metabolism is therefore switched off
// (HungerTicks at its maximum) and the Avatar applies the rules to its copy
// of the player by calling the functions game.World.Advance itself calls
// (game.Metabolize, game.Kill, game.Revive, game.FeedPlayer, ...), so there
// is one copy of each rule.
//
// Avatar is not safe for concurrent use; the Peer serialises it.
type Avatar struct {
	cfg   game.Config
	world *game.World
	p     game.Player
	// relocations counts the moves made without walking (Place, respawn),
	// which the position protocol announces so receivers take the jump.
	relocations uint32
}

// NewAvatar puts player id into a fresh movement world of cfg at its spawn
// point in its home region.
func NewAvatar(cfg game.Config, id game.PlayerID, name string) (*Avatar, error) {
	mcfg := cfg
	mcfg.HungerTicks = math.MaxUint64 // metabolism is the Avatar's, see above
	w, err := game.NewWorld(mcfg)
	if err != nil {
		return nil, fmt.Errorf("avatar: %w", err)
	}
	p, err := w.AddPlayer(id, name)
	if err != nil {
		return nil, fmt.Errorf("avatar: %w", err)
	}
	return &Avatar{cfg: cfg, world: w, p: p}, nil
}

// World is the movement world: terrain, the object cache, this player.
func (a *Avatar) World() *game.World { return a.world }

// Player returns a copy of the player's state.
func (a *Avatar) Player() game.Player { return a.p }

// Tick is the number of steps taken.
func (a *Avatar) Tick() uint64 { return a.world.Tick() }

// Region is the region the player stands in.
func (a *Avatar) Region() game.RegionCoord { return a.world.RegionOf(a.p.Pos) }

// Place moves the player to pos if its box fits there.
func (a *Avatar) Place(pos game.Vec) bool {
	if !a.world.Teleport(a.p.ID, pos) {
		return false
	}
	a.p.Pos, a.p.Vel = pos, game.Vec{}
	a.relocations++
	return true
}

// Relocations is how many times the player was moved without walking.
func (a *Avatar) Relocations() uint32 { return a.relocations }

// PlaceInRegion moves the player to its spawn point in region rc.
func (a *Avatar) PlaceInRegion(rc game.RegionCoord) bool {
	if !a.world.InWorld(rc) {
		return false
	}
	return a.Place(a.world.SpawnPoint(a.p.ID, rc, a.p.Deaths))
}

// Restore sets the bars of a saved character, clamped to their ranges. A
// character saved dead comes back at full health and fed; one saved
// starving comes back starving.
func (a *Avatar) Restore(health, hunger, score, skill int32) {
	game.RestoreCharacter(&a.p, game.Character{Pos: a.p.Pos, Health: health, Hunger: hunger, Score: score, Skill: skill})
}

// Step advances the player by one tick with the given move input and
// returns what happened to it: region changes, starvation, death, respawn.
func (a *Avatar) Step(mx, my int8) []game.Event {
	t := a.world.Tick() + 1
	var events []game.Event
	if game.RespawnDue(a.p, t) {
		pos := a.world.RespawnPoint(a.p)
		a.Place(pos)
		game.Revive(&a.p, pos)
		events = append(events, game.Event{Tick: t, Kind: game.EventRespawned, Player: a.p.ID, To: a.world.RegionOf(pos)})
	}
	in := game.Input{Player: a.p.ID}
	if a.p.Alive {
		in.MoveX, in.MoveY = mx, my
	}
	for _, e := range a.world.Step([]game.Input{in}) {
		if e.Kind == game.EventRegionChanged && e.Player == a.p.ID {
			events = append(events, e)
		}
	}
	if w, ok := a.world.Player(a.p.ID); ok {
		a.p.Pos, a.p.Vel = w.Pos, w.Vel
	}
	if !a.p.Alive {
		a.p.Vel = game.Vec{}
		return events
	}
	game.Metabolize(a.cfg, &a.p, t)
	if a.p.Health <= 0 {
		events = append(events, a.die(t, ""))
	}
	return events
}

// die kills the player at tick t; killer may be empty (starvation).
func (a *Avatar) die(t uint64, killer game.PlayerID) game.Event {
	return game.Kill(a.cfg, &a.p, t, killer)
}

// Feed applies units of nutrition the coordinator committed.
func (a *Avatar) Feed(units int32) { game.FeedPlayer(&a.p, units) }

// Heal applies a health pack the coordinator committed.
func (a *Avatar) Heal(amount int32) { game.Heal(&a.p, amount) }

// Damage takes amount of health, dealt by by; it reports the death event
// if the blow was fatal.
func (a *Avatar) Damage(amount int32, by game.PlayerID) (game.Event, bool) {
	if !a.p.Alive || amount <= 0 || !game.ApplyDamage(&a.p, amount) {
		return game.Event{}, false
	}
	return a.die(a.world.Tick(), by), true
}

// Rewarded credits the player for defeating another, as game.World does.
func (a *Avatar) Rewarded() { game.Reward(&a.p) }

// Fighter is the player's fight-relevant state.
func (a *Avatar) Fighter() game.Fighter { return game.Fighter{Skill: a.p.Skill, Health: a.p.Health} }

// TryEat reports whether the eat cooldown has passed, and starts it.
func (a *Avatar) TryEat() bool {
	if !game.EatReady(a.p, a.world.Tick()) {
		return false
	}
	game.StartEatCooldown(a.cfg, &a.p, a.world.Tick())
	return true
}

// TryFight reports whether the fight cooldown has passed; if so it starts
// it and returns the counter of the new fight.
func (a *Avatar) TryFight() (uint64, bool) {
	if !game.FightReady(a.p, a.world.Tick()) {
		return 0, false
	}
	return game.StartFight(a.cfg, &a.p, a.world.Tick()), true
}

// Nearest returns the nearest object of kind with something left within
// the given distance of the player, among the regions loaded reports as
// holding current values; ties go to the earlier object in canonical order.
func (a *Avatar) Nearest(kind game.ObjectKind, within int32, loaded func(game.RegionCoord) bool) (game.ObjectEntry, bool) {
	var best game.ObjectEntry
	var bestD int64
	found := false
	limit := int64(within) * int64(within)
	for _, rc := range a.world.Neighbours(a.Region()) {
		if loaded != nil && !loaded(rc) {
			continue
		}
		for _, e := range a.world.Objects(rc) {
			if e.Object.Kind != kind || e.Object.Amount == 0 {
				continue
			}
			if d := game.DistSq(a.p.Pos, e.Pos); d <= limit && (!found || d < bestD) {
				best, bestD, found = e, d, true
			}
		}
	}
	return best, found
}
