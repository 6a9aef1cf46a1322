package game

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// A snapshot is the whole mutable state of a world (its config, tick,
// players and objects) in a bounded binary form: what a mirror that joins a
// game mid-way receives from the authority (the paper's state transfer,
// ch. 4.4.2) and what a mirror writes to disk when its state disagrees with
// another's. The terrain is not in it: it follows from the config.
//
// Wire form (big-endian):
//
//	magic "OWSN" | format u8 (=1) | config (ConfigWireSize bytes) | tick u64
//	players u32 | per player, sorted by ID:
//	    id u16 len + bytes | name u8 len + bytes | pos x, y i32 | vel x, y i32
//	    health, hunger, score, skill i32 | flags u8 (1 alive, 2 respawn home)
//	    respawnAt u64 | deaths u32 | fightCounter u64 | eatReadyAt u64 | fightReadyAt u64
//	pages u32 | per region with objects, in region order:
//	    x u16 | y u16 | entries u16 | per entry: slot u16 | version u64 | object (ObjectWireSize)
//
// UnmarshalWorld accepts only states a world can be in: a valid config,
// players sorted by unique valid IDs with their bars in range and inside
// the world, and exactly the terrain's objects (same regions, slots, kinds,
// tiles and maxima) with valid amounts. A decoded world hashes like the
// encoded one and evolves like it.

// Limits of a snapshot.
const (
	// MaxSnapshotPlayers bounds the players of a snapshot.
	MaxSnapshotPlayers = 1 << 16
	// MaxSnapshotSize bounds an encoded snapshot.
	MaxSnapshotSize = 64 << 20
	// ConfigWireSize is the exact length of an encoded Config.
	ConfigWireSize = 1 + 8 + 4*2 + 2*4 + 2*2 + 4*8 + 2*4 + 8
)

const (
	snapshotMagic  = "OWSN"
	snapshotFormat = 1
	configFormat   = 1
	// minPlayerWireSize is the smallest encoded player (one-byte ID and
	// name), used to bound the player count by the input's length.
	minPlayerWireSize = 2 + 1 + 1 + 1 + 8*4 + 1 + 8 + 4 + 8*3
	pageHeaderSize    = 6
	entryWireSize     = 2 + 8 + ObjectWireSize
)

// MarshalBinary encodes the config in its fixed form (ConfigWireSize
// bytes, a leading format byte included).
func (c Config) MarshalBinary() ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("encode config: %w", err)
	}
	return c.appendBinary(make([]byte, 0, ConfigWireSize)), nil
}

func (c Config) appendBinary(b []byte) []byte {
	b = append(b, configFormat)
	b = binary.BigEndian.AppendUint64(b, c.Seed)
	for _, v := range []int{c.RegionsX, c.RegionsY, c.RegionTiles, c.TickRate} {
		b = binary.BigEndian.AppendUint16(b, uint16(v))
	}
	for _, v := range []int32{c.MaxSpeed, c.PlayerRadius} {
		b = binary.BigEndian.AppendUint32(b, uint32(v))
	}
	for _, v := range []int{c.FoodPerRegion, c.HealthPacksPerRegion} {
		b = binary.BigEndian.AppendUint16(b, uint16(v))
	}
	for _, v := range []uint64{c.FoodRegrowTicks, c.HealthPackRespawnTicks, c.HungerTicks, c.RespawnTicks} {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	for _, v := range []int32{c.ReachUnits, c.FightRangeUnits} {
		b = binary.BigEndian.AppendUint32(b, uint32(v))
	}
	return binary.BigEndian.AppendUint64(b, c.ActionCooldownTicks)
}

// UnmarshalConfig decodes and validates an encoded Config.
func UnmarshalConfig(b []byte) (Config, error) {
	if len(b) != ConfigWireSize {
		return Config{}, fmt.Errorf("decode config: %d bytes, want %d", len(b), ConfigWireSize)
	}
	r := snapReader{b: b}
	c := r.config()
	if r.err != nil {
		return Config{}, fmt.Errorf("decode config: %w", r.err)
	}
	return c, nil
}

// MarshalBinary encodes the world's state as a snapshot.
func (w *World) MarshalBinary() ([]byte, error) {
	if len(w.players) > MaxSnapshotPlayers {
		return nil, fmt.Errorf("encode snapshot: %d players, limit %d", len(w.players), MaxSnapshotPlayers)
	}
	b := make([]byte, 0, 64+len(w.players)*96+w.objects.Len()*entryWireSize+len(w.objects.pages)*pageHeaderSize)
	b = append(b, snapshotMagic...)
	b = append(b, snapshotFormat)
	b = w.cfg.appendBinary(b)
	b = binary.BigEndian.AppendUint64(b, w.tick)
	b = binary.BigEndian.AppendUint32(b, uint32(len(w.players)))
	i32 := func(v int32) { b = binary.BigEndian.AppendUint32(b, uint32(v)) }
	for i := range w.players {
		p := &w.players[i]
		b = binary.BigEndian.AppendUint16(b, uint16(len(p.ID)))
		b = append(b, p.ID...)
		b = append(b, byte(len(p.Name)))
		b = append(b, p.Name...)
		for _, v := range []int32{p.Pos.X, p.Pos.Y, p.Vel.X, p.Vel.Y, p.Health, p.Hunger, p.Score, p.Skill} {
			i32(v)
		}
		var flags byte
		if p.Alive {
			flags |= 1
		}
		if p.RespawnHome {
			flags |= 2
		}
		b = append(b, flags)
		b = binary.BigEndian.AppendUint64(b, p.RespawnAt)
		b = binary.BigEndian.AppendUint32(b, p.Deaths)
		b = binary.BigEndian.AppendUint64(b, p.FightCounter)
		b = binary.BigEndian.AppendUint64(b, p.EatReadyAt)
		b = binary.BigEndian.AppendUint64(b, p.FightReadyAt)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(w.objects.pages)))
	for _, page := range w.objects.pages {
		b = binary.BigEndian.AppendUint16(b, uint16(page.region.X))
		b = binary.BigEndian.AppendUint16(b, uint16(page.region.Y))
		b = binary.BigEndian.AppendUint16(b, uint16(len(page.entries)))
		for _, e := range page.entries {
			b = binary.BigEndian.AppendUint16(b, e.id.Slot)
			b = binary.BigEndian.AppendUint64(b, e.v.Version)
			b = e.v.Object.appendBinary(b)
		}
	}
	if len(b) > MaxSnapshotSize {
		return nil, fmt.Errorf("encode snapshot: %d bytes, limit %d", len(b), MaxSnapshotSize)
	}
	return b, nil
}

// SnapshotConfig reads the config of a snapshot without decoding the rest,
// so that a receiver can check it is the config it expects before it
// builds that config's terrain (a large world takes a while to generate).
func SnapshotConfig(b []byte) (Config, error) {
	if len(b) < len(snapshotMagic)+1+ConfigWireSize || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return Config{}, errors.New("decode snapshot: not a world snapshot (bad magic or too short)")
	}
	return UnmarshalConfig(b[len(snapshotMagic)+1 : len(snapshotMagic)+1+ConfigWireSize])
}

// UnmarshalWorld decodes a snapshot into a new world (sharing the terrain
// of its config with every other world of that config). Check the config
// first (SnapshotConfig) when the snapshot comes from elsewhere.
func UnmarshalWorld(b []byte) (*World, error) {
	w, err := unmarshalWorld(b)
	if err != nil {
		return nil, fmt.Errorf("decode snapshot: %w", err)
	}
	return w, nil
}

func unmarshalWorld(b []byte) (*World, error) {
	if len(b) > MaxSnapshotSize {
		return nil, fmt.Errorf("%d bytes, limit %d", len(b), MaxSnapshotSize)
	}
	if len(b) < len(snapshotMagic)+1 || string(b[:len(snapshotMagic)]) != snapshotMagic {
		return nil, errors.New("not a world snapshot (bad magic)")
	}
	if f := b[len(snapshotMagic)]; f != snapshotFormat {
		return nil, fmt.Errorf("format %d, want %d", f, snapshotFormat)
	}
	r := snapReader{b: b[len(snapshotMagic)+1:]}
	cfg := r.config()
	if r.err != nil {
		return nil, r.err
	}
	w, err := NewWorld(cfg)
	if err != nil {
		return nil, err
	}
	w.tick = r.u64("tick")
	n := r.u32("player count")
	if r.err != nil {
		return nil, r.err
	}
	if n > MaxSnapshotPlayers || int(n) > r.left()/minPlayerWireSize {
		return nil, fmt.Errorf("%d players in %d bytes (limit %d)", n, r.left(), MaxSnapshotPlayers)
	}
	w.players = make([]Player, 0, n)
	ww, wh := cfg.WorldUnits()
	for i := range int(n) {
		p, err := r.player()
		if err != nil {
			return nil, fmt.Errorf("player %d: %w", i, err)
		}
		if i > 0 && p.ID <= w.players[i-1].ID {
			return nil, fmt.Errorf("player %d: %q not after %q (players must be sorted by unique ID)", i, p.ID, w.players[i-1].ID)
		}
		if p.Pos.X < 0 || p.Pos.Y < 0 || p.Pos.X >= ww || p.Pos.Y >= wh {
			return nil, fmt.Errorf("player %s at (%d,%d), outside the %d×%d world", p.ID, p.Pos.X, p.Pos.Y, ww, wh)
		}
		if abs32(p.Vel.X) > cfg.MaxSpeed || abs32(p.Vel.Y) > cfg.MaxSpeed {
			return nil, fmt.Errorf("player %s moving (%d,%d), beyond the speed limit %d", p.ID, p.Vel.X, p.Vel.Y, cfg.MaxSpeed)
		}
		w.players = append(w.players, p)
	}
	pages := r.u32("page count")
	if r.err != nil {
		return nil, r.err
	}
	initial := w.terrain.initial
	if int(pages) != len(initial) {
		return nil, fmt.Errorf("%d object pages, the terrain has %d", pages, len(initial))
	}
	w.objects = &ObjectTable{pages: make([]*objectPage, len(initial))}
	for pi, want := range initial {
		page, err := r.page(want)
		if err != nil {
			return nil, fmt.Errorf("objects of region %s: %w", want.region, err)
		}
		w.objects.pages[pi] = page
	}
	if r.err != nil {
		return nil, r.err
	}
	if r.left() != 0 {
		return nil, fmt.Errorf("%d trailing bytes", r.left())
	}
	return w, nil
}

// snapReader reads big-endian fields, remembering the first shortfall.
type snapReader struct {
	b   []byte
	err error
}

func (r *snapReader) left() int { return len(r.b) }

func (r *snapReader) take(n int, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > len(r.b) {
		r.err = fmt.Errorf("%s: need %d bytes, %d left", what, n, len(r.b))
		return nil
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out
}

func (r *snapReader) u8(what string) uint8 {
	if v := r.take(1, what); v != nil {
		return v[0]
	}
	return 0
}

func (r *snapReader) u16(what string) uint16 {
	if v := r.take(2, what); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

func (r *snapReader) u32(what string) uint32 {
	if v := r.take(4, what); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (r *snapReader) i32(what string) int32 { return int32(r.u32(what)) }

func (r *snapReader) u64(what string) uint64 {
	if v := r.take(8, what); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (r *snapReader) config() Config {
	if f := r.u8("config format"); r.err == nil && f != configFormat {
		r.err = fmt.Errorf("config format %d, want %d", f, configFormat)
	}
	c := Config{Seed: r.u64("seed")}
	c.RegionsX, c.RegionsY = int(r.u16("regions x")), int(r.u16("regions y"))
	c.RegionTiles, c.TickRate = int(r.u16("region tiles")), int(r.u16("tick rate"))
	c.MaxSpeed, c.PlayerRadius = r.i32("max speed"), r.i32("player radius")
	c.FoodPerRegion, c.HealthPacksPerRegion = int(r.u16("food per region")), int(r.u16("packs per region"))
	c.FoodRegrowTicks, c.HealthPackRespawnTicks = r.u64("food regrow"), r.u64("pack respawn")
	c.HungerTicks, c.RespawnTicks = r.u64("hunger ticks"), r.u64("respawn ticks")
	c.ReachUnits, c.FightRangeUnits = r.i32("reach"), r.i32("fight range")
	c.ActionCooldownTicks = r.u64("cooldown")
	if r.err != nil {
		return Config{}
	}
	if err := c.Validate(); err != nil {
		r.err = fmt.Errorf("config: %w", err)
		return Config{}
	}
	return c
}

func (r *snapReader) player() (Player, error) {
	id := PlayerID(r.take(int(r.u16("id length")), "id"))
	name := string(r.take(int(r.u8("name length")), "name"))
	var p Player
	p.Pos.X, p.Pos.Y = r.i32("pos x"), r.i32("pos y")
	p.Vel.X, p.Vel.Y = r.i32("vel x"), r.i32("vel y")
	p.Health, p.Hunger, p.Score, p.Skill = r.i32("health"), r.i32("hunger"), r.i32("score"), r.i32("skill")
	flags := r.u8("flags")
	p.RespawnAt = r.u64("respawn tick")
	p.Deaths = r.u32("deaths")
	p.FightCounter = r.u64("fight counter")
	p.EatReadyAt, p.FightReadyAt = r.u64("eat ready"), r.u64("fight ready")
	if r.err != nil {
		return Player{}, r.err
	}
	p.ID, p.Name = id, name
	p.Alive, p.RespawnHome = flags&1 != 0, flags&2 != 0
	switch {
	case flags&^3 != 0:
		return Player{}, fmt.Errorf("unknown flags %#x", flags)
	case validatePlayerID(id, false) != nil:
		return Player{}, fmt.Errorf("id: %w", validatePlayerID(id, false))
	case ValidateName(name) != nil:
		return Player{}, fmt.Errorf("%s: %w", id, ValidateName(name))
	case p.Health < 0 || p.Health > MaxHealth:
		return Player{}, fmt.Errorf("%s: health %d outside 0..%d", id, p.Health, MaxHealth)
	case p.Hunger < 0 || p.Hunger > MaxHunger:
		return Player{}, fmt.Errorf("%s: hunger %d outside 0..%d", id, p.Hunger, MaxHunger)
	case p.Skill < 1 || p.Skill > MaxSkill:
		return Player{}, fmt.Errorf("%s: skill %d outside 1..%d", id, p.Skill, MaxSkill)
	case p.Score < 0 || p.Score == math.MaxInt32:
		return Player{}, fmt.Errorf("%s: score %d out of range", id, p.Score)
	case p.Alive && p.Health == 0:
		return Player{}, fmt.Errorf("%s: alive at zero health", id)
	case !p.Alive && p.Health != 0:
		return Player{}, fmt.Errorf("%s: dead with health %d", id, p.Health)
	}
	return p, nil
}

// page reads one region's objects, which must be the terrain's (want):
// only amounts, regrow ticks and versions change in a running world.
func (r *snapReader) page(want *objectPage) (*objectPage, error) {
	x, y, n := int(r.u16("region x")), int(r.u16("region y")), int(r.u16("entry count"))
	if r.err != nil {
		return nil, r.err
	}
	if (RegionCoord{x, y}) != want.region || n != len(want.entries) {
		return nil, fmt.Errorf("page of region (%d,%d) with %d objects, want %s with %d", x, y, n, want.region, len(want.entries))
	}
	page := &objectPage{region: want.region, entries: make([]tableEntry, n)}
	for i, base := range want.entries {
		slot := r.u16("slot")
		version := r.u64("version")
		raw := r.take(ObjectWireSize, "object")
		if r.err != nil {
			return nil, r.err
		}
		o, err := UnmarshalObject(raw)
		if err != nil {
			return nil, fmt.Errorf("slot %d: %w", slot, err)
		}
		bo := base.v.Object
		if slot != base.id.Slot || o.Kind != bo.Kind || o.TileX != bo.TileX || o.TileY != bo.TileY || o.Max != bo.Max {
			return nil, fmt.Errorf("slot %d holds %s at (%d,%d) max %d, the terrain has slot %d %s at (%d,%d) max %d",
				slot, o.Kind, o.TileX, o.TileY, o.Max, base.id.Slot, bo.Kind, bo.TileX, bo.TileY, bo.Max)
		}
		if version < 1 {
			return nil, fmt.Errorf("slot %d: version 0", slot)
		}
		page.entries[i] = tableEntry{id: base.id, v: VersionedObject{Version: version, Object: o}}
	}
	return page, nil
}
