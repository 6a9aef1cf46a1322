package game

import (
	"fmt"
	"slices"
	"sync"
)

// EventKind says what happened in a step.
type EventKind uint8

const (
	EventAte            EventKind = iota + 1 // Player ate a unit of Object
	EventPickedUp                            // Player took health pack Object, healing Amount
	EventHit                                 // Player hit Other for Amount damage
	EventMissed                              // Player attacked Other and missed
	EventDied                                // Player died; Other is the killer if any
	EventRespawned                           // Player came back at its spawn point
	EventRegionChanged                       // Player moved from region From to To
	EventObjectRestored                      // Object regrew
)

var eventNames = [...]string{"", "ate", "picked-up", "hit", "missed", "died", "respawned", "region-changed", "object-restored"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

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

// World is the whole game state plus the immutable terrain. It is not safe
// for concurrent use; its owner serialises Step and the accessors.
type World struct {
	cfg     Config
	terrain *terrain
	tick    uint64
	players map[PlayerID]*Player
	order   []PlayerID // sorted; every loop over players uses it
	objects *ObjectTable
}

// terrain caches generated region maps. Maps never change, so clones of a
// world share one cache.
type terrain struct {
	cfg  Config
	mu   sync.Mutex
	maps map[RegionCoord]*RegionMap
}

func (t *terrain) get(rc RegionCoord) *RegionMap {
	t.mu.Lock()
	defer t.mu.Unlock()
	m, ok := t.maps[rc]
	if !ok {
		m = GenerateRegionMap(t.cfg, rc)
		t.maps[rc] = m
	}
	return m
}

// NewWorld builds the world described by cfg at tick 0, with every region's
// objects in place and no players.
func NewWorld(cfg Config) (*World, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("new world: %w", err)
	}
	w := &World{
		cfg:     cfg,
		terrain: &terrain{cfg: cfg, maps: make(map[RegionCoord]*RegionMap)},
		players: make(map[PlayerID]*Player),
		objects: NewObjectTable(),
	}
	for y := 0; y < cfg.RegionsY; y++ {
		for x := 0; x < cfg.RegionsX; x++ {
			rc := RegionCoord{x, y}
			for slot, o := range InitialObjects(cfg, w.terrain.get(rc)) {
				if _, err := w.objects.Initialize(ObjectID{rc, uint16(slot)}, o); err != nil {
					return nil, fmt.Errorf("new world: region %s: %w", rc, err)
				}
			}
		}
	}
	return w, nil
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
	return w.terrain.get(rc)
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
	m := w.terrain.get(RegionCoord{int(tx / rt), int(ty / rt)})
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

// AddPlayer puts a new player into the world at its spawn point.
func (w *World) AddPlayer(id PlayerID, name string) (Player, error) {
	if err := validatePlayerID(id, false); err != nil {
		return Player{}, fmt.Errorf("add player: %w", err)
	}
	if err := ValidateName(name); err != nil {
		return Player{}, fmt.Errorf("add player %s: %w", id, err)
	}
	if _, ok := w.players[id]; ok {
		return Player{}, fmt.Errorf("add player %s: already in the world", id)
	}
	rc := RegionCoord{
		X: int(deriveString("overworld/home-x", string(id), w.cfg.Seed) % uint64(w.cfg.RegionsX)),
		Y: int(deriveString("overworld/home-y", string(id), w.cfg.Seed) % uint64(w.cfg.RegionsY)),
	}
	p := &Player{ID: id, Name: name, Skill: 10}
	w.spawn(p, rc)
	w.players[id] = p
	i, _ := slices.BinarySearch(w.order, id)
	w.order = slices.Insert(w.order, i, id)
	return *p, nil
}

// RemovePlayer takes a player out of the world (logout, left the region).
func (w *World) RemovePlayer(id PlayerID) bool {
	if _, ok := w.players[id]; !ok {
		return false
	}
	delete(w.players, id)
	i, _ := slices.BinarySearch(w.order, id)
	w.order = slices.Delete(w.order, i, i+1)
	return true
}

// Player returns a copy of a player's state.
func (w *World) Player(id PlayerID) (Player, bool) {
	p, ok := w.players[id]
	if !ok {
		return Player{}, false
	}
	return *p, true
}

// Players returns copies of all players, sorted by ID.
func (w *World) Players() []Player {
	out := make([]Player, 0, len(w.order))
	for _, id := range w.order {
		out = append(out, *w.players[id])
	}
	return out
}

// SpawnPoint is where player id appears in region rc after its deaths-th
// death (0 for the first spawn): an open tile picked from a seed derived
// from the world seed, the ID and the death count.
func (w *World) SpawnPoint(id PlayerID, rc RegionCoord, deaths uint32) Vec {
	m := w.terrain.get(rc)
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

func (w *World) spawn(p *Player, rc RegionCoord) {
	p.Pos = w.SpawnPoint(p.ID, rc, p.Deaths)
	p.Vel = Vec{}
	p.Health, p.Hunger = MaxHealth, 0
	p.Alive, p.RespawnAt = true, 0
}

// Clone returns an independent copy of the world (the terrain cache is
// shared; it is immutable). Trailing state synchronisation keeps several.
func (w *World) Clone() *World {
	c := &World{
		cfg:     w.cfg,
		terrain: w.terrain,
		tick:    w.tick,
		players: make(map[PlayerID]*Player, len(w.players)),
		order:   slices.Clone(w.order),
		objects: w.objects.clone(),
	}
	for id, p := range w.players {
		cp := *p
		c.players[id] = &cp
	}
	return c
}

// Step advances the world by one tick with the given inputs and returns the
// events of the tick. Inputs naming unknown players are ignored; if a player
// has several inputs, the last one counts. The phases run in a fixed order
// and each visits players sorted by ID:
// regrowth, respawns, movement, eating and pick-ups, fights, metabolism,
// deaths.
func (w *World) Step(inputs []Input) []Event {
	w.tick++
	t := w.tick
	var events []Event

	byPlayer := make(map[PlayerID]Input, len(inputs))
	for _, in := range inputs {
		if _, ok := w.players[in.Player]; ok {
			byPlayer[in.Player] = in
		}
	}

	for i := range w.objects.entries {
		e := &w.objects.entries[i]
		if o, due := e.v.Object.Regrown(t); due {
			e.v = VersionedObject{Version: e.v.Version + 1, Object: o}
			events = append(events, Event{Tick: t, Kind: EventObjectRestored, Object: e.id, Amount: int32(o.Amount)})
		}
	}

	for _, id := range w.order {
		p := w.players[id]
		if !p.Alive && t >= p.RespawnAt {
			w.spawn(p, w.RegionOf(p.Pos))
			events = append(events, Event{Tick: t, Kind: EventRespawned, Player: id, To: w.RegionOf(p.Pos)})
		}
	}

	for _, id := range w.order {
		p := w.players[id]
		if !p.Alive {
			p.Vel = Vec{}
			continue
		}
		in := byPlayer[id]
		from := w.RegionOf(p.Pos)
		w.move(p, in.MoveX, in.MoveY)
		if to := w.RegionOf(p.Pos); to != from {
			events = append(events, Event{Tick: t, Kind: EventRegionChanged, Player: id, From: from, To: to})
		}
	}

	for _, id := range w.order {
		p := w.players[id]
		in, ok := byPlayer[id]
		if !ok || !p.Alive {
			continue
		}
		if in.Eat && t >= p.EatReadyAt {
			if ev, ok := w.eat(p); ok {
				events = append(events, ev)
			}
		}
		if in.PickUp {
			if ev, ok := w.pickUp(p); ok {
				events = append(events, ev)
			}
		}
	}

	killers := make(map[PlayerID]PlayerID)
	for _, id := range w.order {
		p := w.players[id]
		in, ok := byPlayer[id]
		if !ok || !in.Fight || !p.Alive || t < p.FightReadyAt {
			continue
		}
		target := w.fightTarget(p, in.Target)
		if target == nil {
			continue
		}
		res := FightOutcome(p.ID, target.ID, p.FightCounter, Fighter{p.Skill, p.Health}, Fighter{target.Skill, target.Health})
		p.FightCounter++
		p.FightReadyAt = t + w.cfg.ActionCooldownTicks
		if res.Hit {
			target.Health -= res.DefenderDamage
			events = append(events, Event{Tick: t, Kind: EventHit, Player: p.ID, Other: target.ID, Amount: res.DefenderDamage})
			if target.Health <= 0 {
				killers[target.ID] = p.ID
			}
		} else {
			events = append(events, Event{Tick: t, Kind: EventMissed, Player: p.ID, Other: target.ID})
		}
		if res.AttackerDamage > 0 {
			p.Health -= res.AttackerDamage
			events = append(events, Event{Tick: t, Kind: EventHit, Player: target.ID, Other: p.ID, Amount: res.AttackerDamage})
			if p.Health <= 0 {
				killers[p.ID] = target.ID
			}
		}
	}

	if t%w.cfg.HungerTicks == 0 {
		for _, id := range w.order {
			p := w.players[id]
			if !p.Alive {
				continue
			}
			if p.Hunger < MaxHunger {
				p.Hunger++
			}
			switch {
			case p.Hunger >= MaxHunger:
				p.Health--
			case p.Hunger < MaxHunger/2 && p.Health < MaxHealth && (t/w.cfg.HungerTicks)%2 == 0:
				p.Health++
			}
		}
	}

	for _, id := range w.order {
		p := w.players[id]
		if !p.Alive || p.Health > 0 {
			continue
		}
		killer := killers[id]
		p.Health, p.Alive, p.Vel = 0, false, Vec{}
		p.Deaths++
		p.RespawnAt = t + max(w.cfg.RespawnTicks, 1)
		p.Score = max(p.Score-5, 0)
		if k, ok := w.players[killer]; ok && killer != id {
			k.Score += 10
			k.Skill = min(k.Skill+1, MaxSkill)
		}
		events = append(events, Event{Tick: t, Kind: EventDied, Player: id, Other: killer})
	}
	return events
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
	p.EatReadyAt = w.tick + w.cfg.ActionCooldownTicks
	return Event{Tick: w.tick, Kind: EventAte, Player: p.ID, Object: id, Amount: 1}, true
}

// FeedPlayer applies the effect of eating units of nutrition: hunger falls
// by 20 per unit and the score rises by one per unit. A P2P peer calls it
// once the coordinator has committed the eat.
func FeedPlayer(p *Player, units int32) {
	p.Hunger = max(p.Hunger-20*units, 0)
	p.Score += units
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
	p.Health = min(p.Health+heal, MaxHealth)
	return Event{Tick: w.tick, Kind: EventPickedUp, Player: p.ID, Object: id, Amount: heal}, true
}

// fightTarget picks the named target if alive and in range, or else the
// nearest living player in range (ties to the lower ID).
func (w *World) fightTarget(p *Player, named PlayerID) *Player {
	limit := int64(w.cfg.FightRangeUnits) * int64(w.cfg.FightRangeUnits)
	if named != "" {
		t, ok := w.players[named]
		if !ok || t == p || !t.Alive || t.Health <= 0 || DistSq(p.Pos, t.Pos) > limit {
			return nil
		}
		return t
	}
	var best *Player
	var bestD int64
	for _, id := range w.order {
		t := w.players[id]
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
	pl, ok := w.players[id]
	if !ok || !w.boxFree(p) {
		return false
	}
	pl.Pos, pl.Vel = p, Vec{}
	return true
}
