package game

import (
	"fmt"
	"slices"
)

// EventKind says what happened in a step.
type EventKind uint8

const (
	EventAte            EventKind = iota + 1 // Player ate a unit of Object
	EventPickedUp                            // Player took health pack Object, healing Amount
	EventHit                                 // Player hit Other for Amount damage
	EventMissed                              // Player attacked Other and missed
	EventDied                                // Player died; Other is the killer if any
	EventRespawned                           // Player came back at its spawn point in region To
	EventRegionChanged                       // Player moved from region From to To
	EventObjectRestored                      // Object regrew
	EventJoined                              // Player entered the world in region To (CommandJoin)
	EventLeft                                // Player left the world from region From (CommandLeave)
)

var eventNames = [...]string{"", "ate", "picked-up", "hit", "missed", "died", "respawned", "region-changed", "object-restored", "joined", "left"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Strict reports whether events of kind k are strictly consistent: two
// executions of the same tick must produce them identically (kind, tick,
// players, object, amount), or the states have diverged. These are the
// paper's consistent events — meals, pick-ups, hits and misses, deaths,
// respawns, regrowth, joins and leaves. The one weakly consistent kind is
// EventRegionChanged: it follows from a position, and positions are
// compared within a margin (TickRecord.Diverges).
func (k EventKind) Strict() bool { return k != EventRegionChanged }

// Event is something a step did that others may want to see: the browser
// shows them, mirrors compare them (TSS), peers forward them.
type Event struct {
	Tick     uint64
	Kind     EventKind
	Player   PlayerID
	Other    PlayerID
	Object   ObjectID
	Amount   int32
	From, To RegionCoord
}

// World is the whole game state plus the immutable, shared terrain. It is
// not safe for concurrent use; its owner serialises Advance and the
// accessors.
//
// The state is the tick, the players (a slice sorted by ID: every loop
// over players goes in this order) and the objects (copy-on-write pages,
// one per region). CopyFrom relies on that layout: players are copied
// whole (they change every tick anyway), object pages are shared.
type World struct {
	cfg     Config
	terrain *terrain
	tick    uint64
	players []Player
	objects *ObjectTable
	scratch tickScratch
}

// tickScratch holds buffers one tick reuses; it is not part of the state.
type tickScratch struct {
	pending []Input
	intent  []Input
	has     []bool
}

// NewWorld builds the world described by cfg at tick 0, with every region's
// objects in place and no players. The terrain is generated once per
// config and shared by every world of that config.
func NewWorld(cfg Config) (*World, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new world: %w", err)
	}
	t, err := terrainFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("new world: %w", err)
	}
	return &World{
		cfg:     cfg,
		terrain: t,
		objects: &ObjectTable{pages: slices.Clone(t.initial)},
	}, nil
}

// Config returns the world's configuration.
func (w *World) Config() Config { return w.cfg }

// Tick is the number of steps taken so far.
func (w *World) Tick() uint64 { return w.tick }

// Map returns the terrain of region rc (nil outside the world).
func (w *World) Map(rc RegionCoord) *RegionMap {
	if !w.InWorld(rc) {
		return nil
	}
	return w.terrain.at(rc)
}

// InWorld reports whether rc is a region of this world.
func (w *World) InWorld(rc RegionCoord) bool {
	return rc.X >= 0 && rc.Y >= 0 && rc.X < w.cfg.RegionsX && rc.Y < w.cfg.RegionsY
}

// RegionOf returns the region containing world position p.
func (w *World) RegionOf(p Vec) RegionCoord { return RegionOf(w.cfg, p) }

// RegionOf returns the region of cfg's world containing position p. Points
// outside the world map to the nearest edge region.
func RegionOf(cfg Config, p Vec) RegionCoord {
	ru := cfg.RegionUnits()
	x := int(max(p.X, 0) / ru)
	y := int(max(p.Y, 0) / ru)
	return RegionCoord{min(x, cfg.RegionsX-1), min(y, cfg.RegionsY-1)}
}

// Neighbours returns rc and the regions around it that exist, in row order.
func (w *World) Neighbours(rc RegionCoord) []RegionCoord {
	var out []RegionCoord
	w.eachNeighbour(rc, func(n RegionCoord) { out = append(out, n) })
	return out
}

// tileAt returns the tile under global tile coordinates; outside the world
// is wall.
func (w *World) tileAt(tx, ty int32) Tile {
	rt := int32(w.cfg.RegionTiles)
	if tx < 0 || ty < 0 || tx >= int32(w.cfg.RegionsX)*rt || ty >= int32(w.cfg.RegionsY)*rt {
		return TileWall
	}
	m := w.terrain.maps[int(ty/rt)*w.cfg.RegionsX+int(tx/rt)]
	return m.At(int(tx%rt), int(ty%rt))
}

// TileAt returns the tile under world position p.
func (w *World) TileAt(p Vec) Tile {
	return w.tileAt(floorDiv(p.X, TileUnits), floorDiv(p.Y, TileUnits))
}

func floorDiv(a, b int32) int32 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// boxFree reports whether a player box centred at p touches no blocking tile.
func (w *World) boxFree(p Vec) bool {
	r := w.cfg.PlayerRadius
	x0, x1 := floorDiv(p.X-r, TileUnits), floorDiv(p.X+r, TileUnits)
	y0, y1 := floorDiv(p.Y-r, TileUnits), floorDiv(p.Y+r, TileUnits)
	for ty := y0; ty <= y1; ty++ {
		for tx := x0; tx <= x1; tx++ {
			if w.tileAt(tx, ty).Blocks() {
				return false
			}
		}
	}
	return true
}

// ObjectPos is the world position of the centre of an object's tile.
func (w *World) ObjectPos(id ObjectID, o Object) Vec {
	rt := int32(w.cfg.RegionTiles)
	tx := int32(id.Region.X)*rt + int32(o.TileX)
	ty := int32(id.Region.Y)*rt + int32(o.TileY)
	return Vec{tx*TileUnits + TileUnits/2, ty*TileUnits + TileUnits/2}
}

// Objects returns the objects of region rc, in slot order.
func (w *World) Objects(rc RegionCoord) []ObjectEntry {
	var out []ObjectEntry
	w.eachObject(rc, func(e ObjectEntry) { out = append(out, e) })
	return out
}

// eachObject calls f for each object of region rc in slot order, without
// allocating; the hot paths (reach checks, bot sight) use it.
func (w *World) eachObject(rc RegionCoord, f func(ObjectEntry)) {
	if !w.InWorld(rc) {
		return
	}
	for _, e := range w.objects.region(rc) {
		f(ObjectEntry{ID: e.id, VersionedObject: e.v, Pos: w.ObjectPos(e.id, e.v.Object)})
	}
}

// eachNeighbour calls f for rc and each existing region around it, in row
// order.
func (w *World) eachNeighbour(rc RegionCoord, f func(RegionCoord)) {
	for dy := -1; dy <= 1; dy++ {
		for dx := -1; dx <= 1; dx++ {
			if n := (RegionCoord{rc.X + dx, rc.Y + dy}); w.InWorld(n) {
				f(n)
			}
		}
	}
}

// ObjectEntry is an object with its ID, version and world position.
type ObjectEntry struct {
	ID ObjectID
	VersionedObject
	Pos Vec
}

// ObjectTable exposes the versioned objects, for callers that apply
// updates committed elsewhere (ObjectTable.Set) or run the store rules.
func (w *World) ObjectTable() *ObjectTable { return w.objects }

// find returns the index of player id in w.players, or where it would go.
func (w *World) find(id PlayerID) (int, bool) {
	return slices.BinarySearchFunc(w.players, id, func(p Player, id PlayerID) int {
		switch {
		case p.ID < id:
			return -1
		case p.ID > id:
			return 1
		}
		return 0
	})
}

// AddPlayer puts a new player into the world at its spawn point in its
// home region, between ticks. It is CommandJoin for callers that own the
// world alone (local play, the P2P movement world, tests); both run join.
func (w *World) AddPlayer(id PlayerID, name string) (Player, error) {
	i, err := w.join(id, name, nil)
	if err != nil {
		return Player{}, fmt.Errorf("add player: %w", err)
	}
	return w.players[i], nil
}

// join is the join rule: a valid new ID and name enter the world, either
// fresh at the home spawn point or, with saved, as the saved character
// (RestoreCharacter) at its saved position. It returns the new player's
// index.
func (w *World) join(id PlayerID, name string, saved *Character) (int, error) {
	if err := validatePlayerID(id, false); err != nil {
		return 0, err
	}
	if err := ValidateName(name); err != nil {
		return 0, fmt.Errorf("player %s: %w", id, err)
	}
	i, ok := w.find(id)
	if ok {
		return 0, fmt.Errorf("player %s: already in the world", id)
	}
	p := NewPlayer(id, name, w.SpawnPoint(id, w.HomeRegion(id), 0))
	if saved != nil {
		RestoreCharacter(&p, *saved)
		p.Pos = w.savedPosition(id, saved.Pos)
	}
	w.players = slices.Insert(w.players, i, p)
	return i, nil
}

// savedPosition is where a returning player appears: where it was saved if
// its box fits there, else at a spawn point of that region (the terrain
// cannot have changed, but a config or a hostile save can put it anywhere).
func (w *World) savedPosition(id PlayerID, pos Vec) Vec {
	ww, wh := w.cfg.WorldUnits()
	if pos.X >= 0 && pos.Y >= 0 && pos.X < ww && pos.Y < wh && w.boxFree(pos) {
		return pos
	}
	return w.SpawnPoint(id, w.RegionOf(pos), 0)
}

// HomeRegion is the region a player first appears in, derived from the
// world seed and its ID; a dead player who asks (CommandRespawn) comes
// back there.
func (w *World) HomeRegion(id PlayerID) RegionCoord {
	return RegionCoord{
		X: int(deriveString("overworld/home-x", string(id), w.cfg.Seed) % uint64(w.cfg.RegionsX)),
		Y: int(deriveString("overworld/home-y", string(id), w.cfg.Seed) % uint64(w.cfg.RegionsY)),
	}
}

// RemovePlayer takes a player out of the world between ticks (logout, left
// the region); CommandLeave does the same inside a tick.
func (w *World) RemovePlayer(id PlayerID) bool {
	i, ok := w.find(id)
	if !ok {
		return false
	}
	w.players = slices.Delete(w.players, i, i+1)
	return true
}

// Player returns a copy of a player's state.
func (w *World) Player(id PlayerID) (Player, bool) {
	i, ok := w.find(id)
	if !ok {
		return Player{}, false
	}
	return w.players[i], true
}

// Players returns copies of all players, sorted by ID.
func (w *World) Players() []Player { return slices.Clone(w.players) }

// SpawnPoint is where player id appears in region rc after its deaths-th
// death (0 for the first spawn): an open tile picked from a seed derived
// from the world seed, the ID and the death count.
func (w *World) SpawnPoint(id PlayerID, rc RegionCoord, deaths uint32) Vec {
	m := w.terrain.at(rc)
	rng := NewRand(deriveString("overworld/spawn", string(id), w.cfg.Seed, uint64(rc.X), uint64(rc.Y), uint64(deaths)))
	rt := int32(w.cfg.RegionTiles)
	for {
		x, y := rng.Range(1, m.Size-2), rng.Range(1, m.Size-2)
		if m.At(x, y).Blocks() {
			continue
		}
		p := Vec{
			(int32(rc.X)*rt+int32(x))*TileUnits + TileUnits/2,
			(int32(rc.Y)*rt+int32(y))*TileUnits + TileUnits/2,
		}
		if w.boxFree(p) {
			return p
		}
	}
}

// RespawnPoint is where dead player p comes back: a spawn point of the
// region it fell in, or of its home region if it asked for that.
func (w *World) RespawnPoint(p Player) Vec {
	rc := w.RegionOf(p.Pos)
	if p.RespawnHome {
		rc = w.HomeRegion(p.ID)
	}
	return w.SpawnPoint(p.ID, rc, p.Deaths)
}

// Clone returns an independent copy of the world. It shares the terrain
// and, copy-on-write, the object pages (see CopyFrom).
func (w *World) Clone() *World {
	c := &World{}
	c.CopyFrom(w)
	return c
}

// CopyFrom makes w an exact copy of src: afterwards both hash alike and
// evolve alike under equal commands, and neither sees the other's later
// changes. It is TSS's trailing-to-leading copy, so it is cheap: the
// terrain is shared, players are copied (one flat slice; they change every
// tick), and object pages are shared copy-on-write, skipping the ones w
// already shares with src. Its cost grows with the players and with the
// number of regions whose objects changed, not with the world's objects.
//
// CopyFrom marks src's pages as shared (an atomic flag on each page it
// takes), so src must not be advanced concurrently with the copy.
func (w *World) CopyFrom(src *World) {
	if w == src {
		return
	}
	w.cfg, w.terrain, w.tick = src.cfg, src.terrain, src.tick
	w.players = append(w.players[:0], src.players...)
	if w.objects == nil {
		w.objects = &ObjectTable{}
	}
	w.objects.copyFrom(src.objects)
}

// Hash is StateHash, under the name the synchronizer's State interface
// uses.
func (w *World) Hash() [32]byte { return w.StateHash() }

// Step advances the world by one tick with the given inputs and returns the
// events of the tick. It is Advance for callers without commands (local
// play, the P2P movement world): each input becomes a CommandInput in
// slice order, so inputs naming unknown players are ignored and, if a
// player has several inputs, the last one counts.
func (w *World) Step(inputs []Input) []Event {
	cmds := make([]Command, len(inputs))
	for i, in := range inputs {
		cmds[i] = Command{Seq: uint64(i), Op: CommandInput, Player: in.Player, Input: in}
	}
	return w.advance(cmds, false).Events
}

// Advance executes one tick with the given commands and returns what the
// tick produced. It is the one implementation of a tick.
//
// Commands take effect in canonical order (CompareCommands): Advance sorts
// a copy if the caller's slice is not sorted, so the result never depends
// on the order of the slice. They apply at the start of the tick, one
// after the other: joins and leaves change the roster at once, a respawn
// request marks its player, and each player's last input (in that order)
// is the one the tick uses; an input filed before its player's leave in
// the same tick goes with it. Commands that cannot apply (an input for a
// player not in the world or naming another player, a join of a present
// player or with a bad name, a leave or respawn of an absent player, a
// respawn of a living one) change nothing and are counted in
// TickRecord.Ignored.
//
// Then the phases run in a fixed order, each visiting players sorted by
// ID: regrowth, respawns, movement, eating and pick-ups, fights,
// metabolism, deaths.
func (w *World) Advance(cmds []Command) TickRecord { return w.advance(cmds, true) }

func (w *World) advance(cmds []Command, positions bool) TickRecord {
	if !slices.IsSortedFunc(cmds, CompareCommands) {
		cmds = slices.Clone(cmds)
		slices.SortStableFunc(cmds, CompareCommands)
	}
	w.tick++
	t := w.tick
	rec := TickRecord{Tick: t}
	var events []Event

	intent, has := w.applyCommands(cmds, &events, &rec.Ignored)

	for pi := range w.objects.pages {
		for i := range w.objects.pages[pi].entries {
			e := w.objects.pages[pi].entries[i]
			if o, due := e.v.Object.Regrown(t); due {
				w.objects.setEntry(pi, i, VersionedObject{Version: e.v.Version + 1, Object: o})
				events = append(events, Event{Tick: t, Kind: EventObjectRestored, Object: e.id, Amount: int32(o.Amount)})
			}
		}
	}

	for i := range w.players {
		p := &w.players[i]
		if RespawnDue(*p, t) {
			Revive(p, w.RespawnPoint(*p))
			events = append(events, Event{Tick: t, Kind: EventRespawned, Player: p.ID, To: w.RegionOf(p.Pos)})
		}
	}

	for i := range w.players {
		p := &w.players[i]
		if !p.Alive {
			p.Vel = Vec{}
			continue
		}
		from := w.RegionOf(p.Pos)
		w.move(p, intent[i].MoveX, intent[i].MoveY)
		if to := w.RegionOf(p.Pos); to != from {
			events = append(events, Event{Tick: t, Kind: EventRegionChanged, Player: p.ID, From: from, To: to})
		}
	}

	for i := range w.players {
		p := &w.players[i]
		if !has[i] || !p.Alive {
			continue
		}
		if intent[i].Eat && EatReady(*p, t) {
			if ev, ok := w.eat(p); ok {
				events = append(events, ev)
			}
		}
		if intent[i].PickUp {
			if ev, ok := w.pickUp(p); ok {
				events = append(events, ev)
			}
		}
	}

	var killers map[PlayerID]PlayerID
	killedBy := func(victim, killer PlayerID) {
		if killers == nil {
			killers = make(map[PlayerID]PlayerID)
		}
		killers[victim] = killer
	}
	for i := range w.players {
		p := &w.players[i]
		if !has[i] || !intent[i].Fight || !FightReady(*p, t) {
			continue
		}
		target := w.fightTarget(p, intent[i].Target)
		if target == nil {
			continue
		}
		me, them := Fighter{p.Skill, p.Health}, Fighter{target.Skill, target.Health}
		res := FightOutcome(p.ID, target.ID, StartFight(w.cfg, p, t), me, them)
		if res.Hit {
			if ApplyDamage(target, res.DefenderDamage) {
				killedBy(target.ID, p.ID)
			}
			events = append(events, Event{Tick: t, Kind: EventHit, Player: p.ID, Other: target.ID, Amount: res.DefenderDamage})
		} else {
			events = append(events, Event{Tick: t, Kind: EventMissed, Player: p.ID, Other: target.ID})
		}
		if res.AttackerDamage > 0 {
			if ApplyDamage(p, res.AttackerDamage) {
				killedBy(p.ID, target.ID)
			}
			events = append(events, Event{Tick: t, Kind: EventHit, Player: target.ID, Other: p.ID, Amount: res.AttackerDamage})
		}
	}

	for i := range w.players {
		Metabolize(w.cfg, &w.players[i], t)
	}

	for i := range w.players {
		p := &w.players[i]
		if !p.Alive || p.Health > 0 {
			continue
		}
		killer := killers[p.ID]
		ev := Kill(w.cfg, p, t, killer)
		if k, ok := w.find(killer); ok && killer != p.ID {
			Reward(&w.players[k])
		}
		events = append(events, ev)
	}

	rec.Events = events
	if positions {
		rec.Positions = make([]PlayerPosition, len(w.players))
		for i, p := range w.players {
			rec.Positions[i] = PlayerPosition{Player: p.ID, Pos: p.Pos}
		}
	}
	return rec
}

// applyCommands applies cmds (sorted) at the start of tick w.tick and
// returns each player's input for the tick, indexed like w.players, and
// whether it has one. The slices are scratch, valid until the next tick.
func (w *World) applyCommands(cmds []Command, events *[]Event, ignored *uint32) (intent []Input, has []bool) {
	t := w.tick
	pending := w.scratch.pending[:0]
	for _, c := range cmds {
		switch c.Op {
		case CommandInput:
			if _, ok := w.find(c.Player); !ok || c.Input.Player != c.Player {
				*ignored++
				continue
			}
			pending = append(pending, c.Input)
		case CommandJoin:
			i, err := w.join(c.Player, c.Name, c.Saved)
			if err != nil {
				*ignored++
				continue
			}
			*events = append(*events, Event{Tick: t, Kind: EventJoined, Player: c.Player, To: w.RegionOf(w.players[i].Pos)})
		case CommandLeave:
			i, ok := w.find(c.Player)
			if !ok {
				*ignored++
				continue
			}
			from := w.RegionOf(w.players[i].Pos)
			w.players = slices.Delete(w.players, i, i+1)
			pending = slices.DeleteFunc(pending, func(in Input) bool { return in.Player == c.Player })
			*events = append(*events, Event{Tick: t, Kind: EventLeft, Player: c.Player, From: from})
		case CommandRespawn:
			i, ok := w.find(c.Player)
			if !ok || w.players[i].Alive {
				*ignored++
				continue
			}
			w.players[i].RespawnHome = true
		default:
			*ignored++
		}
	}
	n := len(w.players)
	intent = slices.Grow(w.scratch.intent[:0], n)[:n]
	has = slices.Grow(w.scratch.has[:0], n)[:n]
	clear(intent)
	clear(has)
	for _, in := range pending {
		if i, ok := w.find(in.Player); ok {
			intent[i], has[i] = in, true
		}
	}
	w.scratch.pending, w.scratch.intent, w.scratch.has = pending, intent, has
	return intent, has
}

// WantedVelocity turns a move input into the velocity the player asks for,
// capped at the configured speed.
func WantedVelocity(cfg Config, mx, my int8) Vec {
	v := Vec{int32(mx) * cfg.MaxSpeed / 127, int32(my) * cfg.MaxSpeed / 127}
	return ClampLen(v, cfg.MaxSpeed)
}

// move applies the wanted velocity with collision: the x and y components
// are resolved one after the other, so a player pushing diagonally into a
// wall slides along it.
func (w *World) move(p *Player, mx, my int8) {
	v := WantedVelocity(w.cfg, mx, my)
	start := p.Pos
	p.Pos.X = w.slide(p.Pos, v.X, true)
	p.Pos.Y = w.slide(p.Pos, v.Y, false)
	p.Vel = p.Pos.Sub(start)
}

// slide moves p by d along one axis and returns the new coordinate on that
// axis, stopped flush against the first blocking tile. d is below one tile,
// so the box can enter at most one new column (row) of tiles.
func (w *World) slide(p Vec, d int32, alongX bool) int32 {
	if d == 0 {
		if alongX {
			return p.X
		}
		return p.Y
	}
	next := p
	if alongX {
		next.X += d
	} else {
		next.Y += d
	}
	if w.boxFree(next) {
		if alongX {
			return next.X
		}
		return next.Y
	}
	r := w.cfg.PlayerRadius
	c := p.Y
	if alongX {
		c = p.X
	}
	if d > 0 {
		// The tile column the leading edge entered starts at
		// floor((c+r+d)/T)*T; stop one unit before it.
		edge := floorDiv(c+r+d, TileUnits) * TileUnits
		return max(c, edge-1-r)
	}
	edge := (floorDiv(c-r+d, TileUnits) + 1) * TileUnits
	return min(c, edge+r)
}

// nearestObject returns the closest object of the kind with something left
// within reach of p, if any; ties go to the lower object ID.
func (w *World) nearestObject(p *Player, kind ObjectKind) (ObjectID, VersionedObject, bool) {
	var (
		best   ObjectID
		bestV  VersionedObject
		bestD  int64
		found  bool
		reach2 = int64(w.cfg.ReachUnits) * int64(w.cfg.ReachUnits)
	)
	w.eachNeighbour(w.RegionOf(p.Pos), func(rc RegionCoord) {
		w.eachObject(rc, func(e ObjectEntry) {
			if e.Object.Kind != kind || e.Object.Amount == 0 {
				return
			}
			d := DistSq(p.Pos, e.Pos)
			if d > reach2 {
				return
			}
			if !found || d < bestD || (d == bestD && compareObjectIDs(e.ID, best) < 0) {
				best, bestV, bestD, found = e.ID, e.VersionedObject, d, true
			}
		})
	})
	return best, bestV, found
}

// NearestFood returns the nearest food with nutrition left within the given
// distance of pos, searching pos's region and its neighbours.
func (w *World) NearestFood(pos Vec, within int32) (ObjectEntry, bool) {
	return w.nearestEntry(pos, ObjectFood, within)
}

// nearestEntry finds the nearest object of a kind with something left
// within the distance; ties go to the earlier object in canonical order.
func (w *World) nearestEntry(pos Vec, kind ObjectKind, within int32) (ObjectEntry, bool) {
	var best ObjectEntry
	found := false
	limit := int64(within) * int64(within)
	w.eachNeighbour(w.RegionOf(pos), func(rc RegionCoord) {
		w.eachObject(rc, func(e ObjectEntry) {
			if e.Object.Kind != kind || e.Object.Amount == 0 {
				return
			}
			d := DistSq(pos, e.Pos)
			if d <= limit && (!found || d < DistSq(pos, best.Pos)) {
				best, found = e, true
			}
		})
	})
	return best, found
}

// eat applies one eat of the nearest food as a read-write update against the
// version just read; the world is the single authority here.
func (w *World) eat(p *Player) (Event, bool) {
	id, v, ok := w.nearestObject(p, ObjectFood)
	if !ok {
		return Event{}, false
	}
	next, err := v.Object.Eaten(w.tick, w.cfg.FoodRegrowTicks)
	if err != nil {
		return Event{}, false
	}
	if _, err := w.objects.ReadWrite(id, v.Version, next); err != nil {
		return Event{}, false
	}
	FeedPlayer(p, 1)
	StartEatCooldown(w.cfg, p, w.tick)
	return Event{Tick: w.tick, Kind: EventAte, Player: p.ID, Object: id, Amount: 1}, true
}

// pickUp takes the nearest health pack; a player at full health leaves it
// for someone who needs it.
func (w *World) pickUp(p *Player) (Event, bool) {
	if p.Health >= MaxHealth {
		return Event{}, false
	}
	id, v, ok := w.nearestObject(p, ObjectHealthPack)
	if !ok {
		return Event{}, false
	}
	heal := int32(v.Object.Amount)
	next, err := v.Object.Taken(w.tick, w.cfg.HealthPackRespawnTicks)
	if err != nil {
		return Event{}, false
	}
	if _, err := w.objects.ReadWrite(id, v.Version, next); err != nil {
		return Event{}, false
	}
	Heal(p, heal)
	return Event{Tick: w.tick, Kind: EventPickedUp, Player: p.ID, Object: id, Amount: heal}, true
}

// fightTarget picks the named target if alive and in range, or else the
// nearest living player in range (ties to the lower ID).
func (w *World) fightTarget(p *Player, named PlayerID) *Player {
	limit := int64(w.cfg.FightRangeUnits) * int64(w.cfg.FightRangeUnits)
	if named != "" {
		i, ok := w.find(named)
		if !ok {
			return nil
		}
		t := &w.players[i]
		if t == p || !t.Alive || t.Health <= 0 || DistSq(p.Pos, t.Pos) > limit {
			return nil
		}
		return t
	}
	var best *Player
	var bestD int64
	for i := range w.players {
		t := &w.players[i]
		if t == p || !t.Alive || t.Health <= 0 {
			continue
		}
		d := DistSq(p.Pos, t.Pos)
		if d <= limit && (best == nil || d < bestD) {
			best, bestD = t, d
		}
	}
	return best
}

// Teleport puts a living player at p if its box fits there; it is for
// setting up scenes (demos, tests), not a game action.
func (w *World) Teleport(id PlayerID, p Vec) bool {
	i, ok := w.find(id)
	if !ok || !w.boxFree(p) {
		return false
	}
	w.players[i].Pos, w.players[i].Vel = p, Vec{}
	return true
}
