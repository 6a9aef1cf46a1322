package game

import (
	"crypto/sha256"
	"encoding/binary"
)

// StateHash condenses the whole mutable state (tick, players, objects) and
// the config into a SHA-256 digest over a canonical encoding: fixed field
// order, big-endian integers, length-prefixed strings, players sorted by ID
// and objects by region and slot. Each region's objects enter as the
// SHA-256 digest of their own encoding, which the region's page caches
// until it changes, so hashing costs the players plus the regions whose
// objects changed. Equal hashes mean equal states; mirrors and replays
// compare them to prove they agree.
func (w *World) StateHash() [32]byte {
	h := sha256.New()
	b := make([]byte, 0, 8<<10)
	u64 := func(v uint64) { b = binary.BigEndian.AppendUint64(b, v) }
	i32 := func(v int32) { b = binary.BigEndian.AppendUint32(b, uint32(v)) }
	str := func(s string) { u64(uint64(len(s))); b = append(b, s...) }
	// The digest does not depend on how the stream is cut into writes;
	// writing in large pieces is just faster.
	flush := func() {
		if len(b) >= 7<<10 {
			h.Write(b)
			b = b[:0]
		}
	}

	str("overworld/world-state/v3")
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
	u64(uint64(len(w.objects.pages)))
	for _, page := range w.objects.pages {
		u64(uint64(page.region.X))
		u64(uint64(page.region.Y))
		u64(uint64(len(page.entries)))
		d := page.sum()
		b = append(b, d[:]...)
		flush()
	}
	h.Write(b)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// sum is the digest of the page's objects (slot, version, value of each,
// in slot order), computed once per page state: a shared page never
// changes, and writable forgets the digest of a private page before it is
// changed.
func (p *objectPage) sum() [32]byte {
	if d := p.digest.Load(); d != nil {
		return *d
	}
	b := make([]byte, 0, len(p.entries)*(2+8+ObjectWireSize))
	for _, e := range p.entries {
		b = binary.BigEndian.AppendUint16(b, e.id.Slot)
		b = binary.BigEndian.AppendUint64(b, e.v.Version)
		b = e.v.Object.appendBinary(b)
	}
	d := sha256.Sum256(b)
	p.digest.Store(&d)
	return d
}
