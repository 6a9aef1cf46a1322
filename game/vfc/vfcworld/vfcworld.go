// Package vfcworld applies vector-field consistency (game/vfc) to a
// game.World: it is what a server that updates clients (the mirror egress,
// later a region coordinator summarising for neighbours) calls every frame
// to learn what each client must be sent.
//
// Data flow: the server owns a Filter next to its world. After stepping the
// world it calls Frame(world); the Filter compares each player and each
// world object with what it saw last frame, reports the changes to its CMB
// as writes, runs the round at the world's tick, and then AppendSends and
// Drops give, per client, the states to encode and the players that left.
// One view per client; its pivot is the client's avatar; the objects are
// the players (one set) and the food and health packs (another), each set
// with its own zones and vectors (Settings).
//
// A player's value difference is what the client would get wrong: the
// distance between where the client dead-reckons the player from the copy
// it holds and where the player is, in percent of a tile, or the change of
// its health or hunger bars in points, whichever is larger; dying, coming
// back, scoring or a change of skill counts 100. The distance is taken now
// and ahead: for a moving player LookaheadTicks ahead (a turn counts
// before its error has grown; the next tick's write looks again), for a
// player standing still where the client's reckoning comes to rest, since
// no further write will look again. A world object's difference is the change of its amount in
// percent of its maximum.
package vfcworld

import (
	"errors"
	"fmt"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/vfc"
)

// Set indices in the CMB.
const (
	SetPlayers = 0
	SetObjects = 1
)

// SetSettings are the zones and scale of one object set, distances in
// position units (game.TileUnits per tile).
type SetSettings struct {
	Zones []int32
	Scale []vfc.Vector
}

// Settings configure the filter.
type Settings struct {
	Players SetSettings
	Objects SetSettings
	// LookaheadTicks is how far ahead a player's value difference projects
	// the copy's velocity against the current one.
	LookaheadTicks int
	// ReckonTicks is how long clients dead-reckon a silent player before
	// holding it still (game.Extrapolate's limit).
	ReckonTicks int
	// MaxPlayers bounds the players the filter tracks (a table per peer
	// must be bounded); Frame fails beyond it.
	MaxPlayers int
	// Literal runs the paper's figure 9 as printed (vfc.Config.Literal).
	Literal bool
}

// Tiles converts tiles to position units.
func Tiles(n int32) int32 { return n * game.TileUnits }

// DefaultSettings are the zones a player's page needs. Players: the avatar
// itself (distance 0) gets every change at once; others within 12 tiles
// (on screen) go out when the client's dead reckoning is a tenth of a tile
// off or a bar moved 10 points, and at least 4 times a second while they
// change; within 48 tiles (the neighbouring regions the page draws) at half
// a tile or 1 s; beyond, at two tiles or 3 s. Food and health packs: every
// change within 48 tiles, else after 4 changes or 2 s, beyond 96 tiles 16
// changes or 10 s.
func DefaultSettings() Settings {
	return Settings{
		Players: SetSettings{
			Zones: []int32{0, Tiles(12), Tiles(48)},
			Scale: []vfc.Vector{vfc.Strongest, vfc.V(0.25, vfc.Unbounded, 10), vfc.V(1, vfc.Unbounded, 50), vfc.V(3, vfc.Unbounded, 200)},
		},
		Objects: SetSettings{
			Zones: []int32{Tiles(48), Tiles(96)},
			Scale: []vfc.Vector{vfc.Strongest, vfc.V(2, 4, vfc.Unbounded), vfc.V(10, 16, vfc.Unbounded)},
		},
		LookaheadTicks: 6,
		ReckonTicks:    30,
		MaxPlayers:     4096,
	}
}

func (s Settings) config() vfc.Config[int32] {
	return vfc.Config[int32]{
		Sets: []vfc.SetConfig[int32]{
			{Name: "players", Zones: s.Players.Zones, Scale: s.Players.Scale},
			{Name: "objects", Zones: s.Objects.Zones, Scale: s.Objects.Scale},
		},
		Literal: s.Literal,
	}
}

// Validate checks the zones and scales (vfc.Config.Validate) and the
// other fields.
func (s Settings) Validate() error {
	var errs []error
	if err := s.config().Validate(); err != nil {
		errs = append(errs, err)
	}
	if s.LookaheadTicks < 0 || s.ReckonTicks < 0 {
		errs = append(errs, fmt.Errorf("lookahead %d and reckoning %d ticks: need non-negative values", s.LookaheadTicks, s.ReckonTicks))
	}
	if s.MaxPlayers < 1 {
		errs = append(errs, fmt.Errorf("max players %d: need at least 1", s.MaxPlayers))
	}
	return errors.Join(errs...)
}

// State is what a client is sent of one object.
type State struct {
	// Tick is the world tick the state was observed at.
	Tick uint64
	// Player is set for a player, Object for a world object.
	Player game.PlayerID
	Object game.ObjectID
	// A player's public state.
	Pos, Vel                     game.Vec
	Health, Hunger, Score, Skill int32
	Alive                        bool
	// A world object's value.
	Value game.VersionedObject
}

// StateOf is what a client is sent of player p at tick.
func StateOf(tick uint64, p game.Player) State {
	return State{Tick: tick, Player: p.ID, Pos: p.Pos, Vel: p.Vel, Health: p.Health, Hunger: p.Hunger, Score: p.Score, Skill: p.Skill, Alive: p.Alive}
}

// samePlayer reports whether nothing a client sees of a player changed.
func samePlayer(a, b State) bool {
	return a.Pos == b.Pos && a.Vel == b.Vel && a.Health == b.Health && a.Hunger == b.Hunger && a.Score == b.Score && a.Skill == b.Skill && a.Alive == b.Alive
}

// Reckon is where a client dead-reckons a player from state s after
// ticks ticks, holding it still after limit ticks.
func Reckon(s State, ticks uint64, limit int) game.Vec {
	t := int64(min(ticks, uint64(max(limit, 0))))
	return game.Vec{X: s.Pos.X + int32(int64(s.Vel.X)*t), Y: s.Pos.Y + int32(int64(s.Vel.Y)*t)}
}

func chebyshev(a, b game.Vec) int64 {
	dx, dy := int64(a.X)-int64(b.X), int64(a.Y)-int64(b.Y)
	return max(dx, -dx, dy, -dy)
}

func abs32(v int32) float64 {
	if v < 0 {
		return -float64(v)
	}
	return float64(v)
}

// Diff is the value difference of the sets (see the package doc), in
// percent; it is symmetric in what it compares and never negative.
func (s Settings) Diff(sent, cur State) float64 {
	if cur.Player == "" {
		o, p := sent.Value.Object, cur.Value.Object
		if o.Kind != p.Kind || o.TileX != p.TileX || o.TileY != p.TileY || p.Max == 0 {
			return 100
		}
		return abs32(int32(p.Amount)-int32(o.Amount)) * 100 / float64(p.Max)
	}
	if sent.Alive != cur.Alive {
		return 100
	}
	var el uint64
	if cur.Tick > sent.Tick {
		el = cur.Tick - sent.Tick
	}
	errNow := chebyshev(Reckon(sent, el, s.ReckonTicks), cur.Pos)
	var errAhead int64
	if cur.Vel == (game.Vec{}) {
		// A player standing still sends no more updates, so this is the
		// last look: the client's reckoning runs on to its limit.
		errAhead = chebyshev(Reckon(sent, uint64(max(s.ReckonTicks, 0)), s.ReckonTicks), cur.Pos)
	} else {
		// A moving player is written again next tick; look a little
		// ahead so a turn counts before its error has grown.
		la := uint64(s.LookaheadTicks)
		errAhead = chebyshev(Reckon(sent, el+la, s.ReckonTicks), Reckon(cur, la, s.ReckonTicks))
	}
	d := float64(max(errNow, errAhead)) * 100 / game.TileUnits
	d = max(d, abs32(cur.Health-sent.Health), abs32(cur.Hunger-sent.Hunger))
	if cur.Score != sent.Score || cur.Skill != sent.Skill {
		d = max(d, 100)
	}
	return d
}

// Filter runs VFC over one world for a set of clients. Not safe for
// concurrent use; its owner serialises Frame and the queries with the
// world's Step.
type Filter struct {
	world    game.Config
	settings Settings
	cmb      *vfc.CMB[int32, State]

	players  map[game.PlayerID]vfc.ObjectID
	objects  map[game.ObjectID]vfc.ObjectID
	objIDs   []game.ObjectID // world objects in canonical order
	objVIDs  []vfc.ObjectID  // their CMB IDs
	clients  map[game.PlayerID]vfc.ViewID
	playerOf []game.PlayerID // per CMB ID: the player it stands for, or ""
	seen     []bool          // per CMB ID: player present this frame
	gone     map[vfc.ObjectID]game.PlayerID
	frames   int
}

// New builds a filter for world w with settings s, registering the
// players and objects w holds now.
func New(w *game.World, s Settings) (*Filter, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("vfcworld: %w", err)
	}
	cmb, err := vfc.New[int32, State](s.config(), s.Diff)
	if err != nil {
		return nil, fmt.Errorf("vfcworld: %w", err)
	}
	f := &Filter{
		world:    w.Config(),
		settings: s,
		cmb:      cmb,
		players:  map[game.PlayerID]vfc.ObjectID{},
		objects:  map[game.ObjectID]vfc.ObjectID{},
		clients:  map[game.PlayerID]vfc.ViewID{},
		gone:     map[vfc.ObjectID]game.PlayerID{},
	}
	if err := f.observe(w); err != nil {
		return nil, err
	}
	return f, nil
}

// observe brings the CMB up to the world: new players and objects are
// added, changed ones written, players that left removed.
func (f *Filter) observe(w *game.World) error {
	tick := w.Tick()
	clear(f.seen)
	for _, p := range w.Players() {
		st := StateOf(tick, p)
		o, ok := f.players[p.ID]
		if !ok {
			if len(f.players) >= f.settings.MaxPlayers {
				return fmt.Errorf("vfcworld: player %s: the filter tracks its limit of %d players", p.ID, f.settings.MaxPlayers)
			}
			var err error
			if o, err = f.cmb.AddObject(SetPlayers, vfc.Point[int32]{X: p.Pos.X, Y: p.Pos.Y}, st); err != nil {
				return fmt.Errorf("vfcworld: player %s: %w", p.ID, err)
			}
			f.players[p.ID] = o
			for int(o) >= len(f.playerOf) {
				f.playerOf = append(f.playerOf, "")
			}
			f.playerOf[o] = p.ID
		} else if !samePlayer(f.cmb.Value(o), st) {
			if err := f.cmb.Update(o, vfc.Point[int32]{X: p.Pos.X, Y: p.Pos.Y}, st); err != nil {
				return fmt.Errorf("vfcworld: player %s: %w", p.ID, err)
			}
		}
		for int(o) >= len(f.seen) {
			f.seen = append(f.seen, false)
		}
		f.seen[o] = true
	}
	// Players that left, in CMB ID order: the order of removals decides
	// the order of drops and which IDs are reused, so it must not depend
	// on map iteration.
	for i, id := range f.playerOf {
		o := vfc.ObjectID(i)
		if id == "" || (i < len(f.seen) && f.seen[o]) {
			continue
		}
		if err := f.cmb.RemoveObject(o); err != nil {
			return fmt.Errorf("vfcworld: player %s left: %w", id, err)
		}
		delete(f.players, id)
		f.playerOf[o] = ""
		f.gone[o] = id
	}
	table := w.ObjectTable()
	if table.Len() != len(f.objIDs) {
		f.objIDs = table.IDs()
		f.objVIDs = f.objVIDs[:0]
		for _, id := range f.objIDs {
			o, ok := f.objects[id]
			if !ok {
				v, _ := table.Get(id)
				pos := w.ObjectPos(id, v.Object)
				var err error
				if o, err = f.cmb.AddObject(SetObjects, vfc.Point[int32]{X: pos.X, Y: pos.Y}, State{Tick: tick, Object: id, Value: v}); err != nil {
					return fmt.Errorf("vfcworld: object %s: %w", id, err)
				}
				f.objects[id] = o
			}
			f.objVIDs = append(f.objVIDs, o)
		}
	}
	for i, id := range f.objIDs {
		v, _ := table.Get(id)
		o := f.objVIDs[i]
		if f.cmb.Value(o).Value.Version != v.Version {
			if err := f.cmb.Update(o, f.cmb.Position(o), State{Tick: tick, Object: id, Value: v}); err != nil {
				return fmt.Errorf("vfcworld: object %s: %w", id, err)
			}
		}
	}
	return nil
}

// Now is the round time of tick t: t ticks of the world's tick period.
func (f *Filter) Now(t uint64) time.Duration {
	return time.Duration(t * uint64(time.Second) / uint64(f.world.TickRate))
}

// Frame observes the world after a step and runs the round at its tick.
func (f *Filter) Frame(w *game.World) error {
	if f.frames > 0 {
		// Drops of the previous frame have been read; their IDs may be
		// reused from now on.
		clear(f.gone)
	}
	if err := f.observe(w); err != nil {
		return err
	}
	if err := f.cmb.Round(f.Now(w.Tick())); err != nil {
		return fmt.Errorf("vfcworld: %w", err)
	}
	f.frames++
	return nil
}

// AddClient gives player id's client a view centred on its avatar; the
// avatar must be in the world the filter saw last. Its first frame sends
// everything. Should the avatar leave the world, the view goes on without
// a pivot (everything in the outermost zone) until RemoveClient.
func (f *Filter) AddClient(id game.PlayerID) error {
	if _, ok := f.clients[id]; ok {
		return fmt.Errorf("vfcworld: client %s already has a view", id)
	}
	avatar, ok := f.players[id]
	if !ok {
		return fmt.Errorf("vfcworld: client %s: no such player in the world", id)
	}
	v, err := f.cmb.AddView(vfc.ViewConfig{Name: string(id), Pivots: []vfc.ObjectID{avatar}})
	if err != nil {
		return fmt.Errorf("vfcworld: client %s: %w", id, err)
	}
	f.clients[id] = v
	return nil
}

// RemoveClient drops the view of player id's client.
func (f *Filter) RemoveClient(id game.PlayerID) error {
	v, ok := f.clients[id]
	if !ok {
		return fmt.Errorf("vfcworld: no client %s", id)
	}
	delete(f.clients, id)
	return f.cmb.RemoveView(v)
}

// AppendSends appends to buf the states client id must be sent this
// frame, players first in no particular order but the same on every run
// (CMB ID order).
func (f *Filter) AppendSends(id game.PlayerID, buf []State) []State {
	v, ok := f.clients[id]
	if !ok {
		return buf
	}
	for _, o := range f.cmb.Sends(v) {
		buf = append(buf, f.cmb.Value(o))
	}
	return buf
}

// Drops returns the players that left since the last frame and that
// client id had been sent.
func (f *Filter) Drops(id game.PlayerID) []game.PlayerID {
	v, ok := f.clients[id]
	if !ok {
		return nil
	}
	var out []game.PlayerID
	for _, o := range f.cmb.Drops(v) {
		out = append(out, f.gone[o])
	}
	return out
}

// Zone is the zone (from 0) client id's view put a player (or, with
// player empty, world object obj) in at the last frame.
func (f *Filter) Zone(id game.PlayerID, player game.PlayerID, obj game.ObjectID) (int, bool) {
	v, ok := f.clients[id]
	if !ok {
		return 0, false
	}
	var o vfc.ObjectID
	if player != "" {
		o, ok = f.players[player]
	} else {
		o, ok = f.objects[obj]
	}
	if !ok {
		return 0, false
	}
	c, ok := f.cmb.Copy(v, o)
	return c.Zone, ok
}

// Settings returns the filter's settings.
func (f *Filter) Settings() Settings { return f.settings }
