package game

import (
	"crypto/sha256"
	"encoding/binary"
)

// StateHash condenses the whole mutable state (tick, players, objects) and
// the config into a SHA-256 digest over a canonical encoding: fixed field
// order, big-endian integers, length-prefixed strings, players sorted by ID
// and objects by region and slot. Equal hashes mean equal states; mirrors
// and replays compare them to prove they agree.
func (w *World) StateHash() [32]byte {
	h := sha256.New()
	var b []byte
	u64 := func(v uint64) { b = binary.BigEndian.AppendUint64(b, v) }
	i32 := func(v int32) { b = binary.BigEndian.AppendUint32(b, uint32(v)) }
	str := func(s string) { u64(uint64(len(s))); b = append(b, s...) }
	flush := func() { h.Write(b); b = b[:0] }

	str("overworld/world-state/v2")
	c := w.cfg
	u64(c.Seed)
	for _, v := range []int{c.RegionsX, c.RegionsY, c.RegionTiles, c.TickRate, c.FoodPerRegion, c.HealthPacksPerRegion} {
		u64(uint64(v))
	}
	for _, v := range []int32{c.MaxSpeed, c.PlayerRadius, c.ReachUnits, c.FightRangeUnits} {
		i32(v)
	}
	for _, v := range []uint64{c.FoodRegrowTicks, c.HealthPackRespawnTicks, c.HungerTicks, c.RespawnTicks, c.ActionCooldownTicks} {
		u64(v)
	}
	u64(w.tick)
	u64(uint64(len(w.players)))
	for i := range w.players {
		p := &w.players[i]
		str(string(p.ID))
		str(p.Name)
		i32(p.Pos.X)
		i32(p.Pos.Y)
		i32(p.Vel.X)
		i32(p.Vel.Y)
		i32(p.Health)
		i32(p.Hunger)
		i32(p.Score)
		i32(p.Skill)
		alive := uint64(0)
		if p.Alive {
			alive = 1
		}
		u64(alive)
		u64(p.RespawnAt)
		home := uint64(0)
		if p.RespawnHome {
			home = 1
		}
		u64(home)
		u64(uint64(p.Deaths))
		u64(p.FightCounter)
		u64(p.EatReadyAt)
		u64(p.FightReadyAt)
		flush()
	}
	u64(uint64(w.objects.Len()))
	for _, page := range w.objects.pages {
		for _, e := range page.entries {
			id, v := e.id, e.v
			u64(uint64(id.Region.X))
			u64(uint64(id.Region.Y))
			u64(uint64(id.Slot))
			u64(v.Version)
			b = v.Object.appendBinary(b)
			flush()
		}
	}
	flush()
	var out [32]byte
	h.Sum(out[:0])
	return out
}
