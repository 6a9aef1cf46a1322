package vfcbench

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"log/slog"
	"math"
	"math/rand"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/vfc"
	"github.com/overworld-p2p/overworld/game/vfc/vfcworld"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/mirror"
)

// DemoConfig is the 50-client demo: a real mirror (node/mirror over CRIMP
// on the in-memory network, in simulated time) with bot-driven clients
// speaking the real client protocol (mirror.LocalClient), played once per
// egress mode.
type DemoConfig struct {
	Clients int
	// Seconds are measured after Warmup seconds of play.
	Seconds, Warmup int
	FrameTicks      int
	Seed            uint64
	World           game.Config
	Settings        vfcworld.Settings
}

// DefaultDemo is 50 clients for a minute in the standard 8×8 world, an
// update every tick.
func DefaultDemo() DemoConfig {
	return DemoConfig{Clients: 50, Seconds: 60, Warmup: 2, FrameTicks: 1, Seed: 1, World: game.DefaultConfig(), Settings: vfcworld.DefaultSettings()}
}

// Traffic is what the clients were sent in total under one egress mode:
// the encoded update frames, as the clients received them.
type Traffic struct {
	Policy string `json:"policy"`
	Frames int64  `json:"frames"`
	Bytes  int64  `json:"bytes"`
	// BytesPerClientSecond is the mean downstream rate of one client.
	BytesPerClientSecond float64 `json:"bytes_per_client_second"`
}

// ZoneRow is the largest staleness seen in one zone of one set, measured
// on what the clients held after every update against the mirror's world
// at that update's tick.
type ZoneRow struct {
	Set   string     `json:"set"`
	Zone  int        `json:"zone"` // from 1, as the paper numbers them
	Range string     `json:"range"`
	Bound vfc.Vector `json:"-"`
	// BoundText is Bound in the paper's notation.
	BoundText string `json:"bound"`
	// PairFrames counts (client, object, frame) triples observed in the
	// zone; StaleFrames those whose copy was behind the primary.
	PairFrames  int64 `json:"pair_frames"`
	StaleFrames int64 `json:"stale_frames"`
	// The largest age of a stale copy (since it was sent), missed updates
	// (objects: versions behind) and value difference seen.
	MaxAgeSeconds float64 `json:"max_age_s"`
	MaxMissed     int     `json:"max_missed"`
	MaxValue      float64 `json:"max_value"`
	// Exceeded counts observations at or past a bound (should be 0).
	Exceeded int64 `json:"exceeded"`
	// For players: how far the client's dead-reckoned position was from
	// the true one, in tiles (99th percentile and largest).
	P99ErrorTiles float64 `json:"p99_error_tiles,omitempty"`
	MaxErrorTiles float64 `json:"max_error_tiles,omitempty"`
}

// DemoReport is the outcome of RunDemo.
type DemoReport struct {
	Clients    int `json:"clients"`
	Objects    int `json:"objects"`
	Seconds    int `json:"seconds"`
	FrameTicks int `json:"frame_ticks"`
	// Traffic under VFC and two baselines, each a run of its own (bots
	// decide from what they are sent, so the runs differ a little): every
	// player and object every frame (send-all), and everyone plus changed
	// objects in the 3×3 regions around the client every frame (the
	// egress before VFC).
	VFC     Traffic `json:"vfc"`
	SendAll Traffic `json:"send_all"`
	Area    Traffic `json:"send_area"`
	// Missing counts (client, object, frame) observations where a client
	// held no copy of something in the world (should be 0).
	Missing int64     `json:"missing"`
	Zones   []ZoneRow `json:"zones"`
}

// RunDemo plays the demo under each egress mode and measures the bytes
// and, under VFC, the staleness of every copy every client holds.
func RunDemo(ctx context.Context, dc DemoConfig) (*DemoReport, error) {
	if dc.Clients < 1 || dc.Seconds < 1 || dc.Warmup < 0 || dc.FrameTicks < 1 {
		return nil, fmt.Errorf("demo: %d clients, %d s (%d s warm-up), %d ticks per frame: need at least one of each", dc.Clients, dc.Seconds, dc.Warmup, dc.FrameTicks)
	}
	rep := &DemoReport{Clients: dc.Clients, Seconds: dc.Seconds, FrameTicks: dc.FrameTicks}
	zones := newZoneStats(dc.Settings)
	for _, m := range []struct {
		mode mirror.EgressMode
		out  *Traffic
		name string
	}{{mirror.EgressVFC, &rep.VFC, "vfc"}, {mirror.EgressAll, &rep.SendAll, "send-all"}, {mirror.EgressArea, &rep.Area, "send-area (3×3 regions)"}} {
		var z *zoneStats
		if m.mode == mirror.EgressVFC {
			z = zones
		}
		tr, objects, missing, err := runMode(ctx, dc, m.mode, z)
		if err != nil {
			return nil, fmt.Errorf("demo, egress %s: %w", m.mode, err)
		}
		tr.Policy = m.name
		*m.out = tr
		if z != nil {
			rep.Objects, rep.Missing = objects, missing
		}
	}
	rep.Zones = zones.rows()
	return rep, nil
}

// frameSnapshot is the mirror's leading world at one egress frame.
type frameSnapshot struct {
	players map[game.PlayerID]vfcworld.State
	objects map[game.ObjectID]game.ObjectEntry
}

// heldObject is a client's copy of an object and the tick it got it.
type heldObject struct {
	version uint64
	at      uint64
}

func runMode(ctx context.Context, dc DemoConfig, mode mirror.EgressMode, zones *zoneStats) (Traffic, int, int64, error) {
	clock := crimp.NewSimClock(time.Unix(1_700_000_000, 0))
	rng := rand.New(rand.NewSource(int64(dc.Seed)))
	pub, signer, err := ed25519.GenerateKey(rng)
	if err != nil {
		return Traffic{}, 0, 0, err
	}
	authPub, authKey, err := ed25519.GenerateKey(rng)
	if err != nil {
		return Traffic{}, 0, 0, err
	}
	mnet := crimp.NewMemNetwork(clock, int64(dc.Seed))
	defer mnet.Close()
	m, err := mirror.New(mirror.Config{
		Game: dc.World, Authority: true, AuthorityKey: authKey, AuthorityPublicKey: authPub, CRIMP: crimp.DefaultConfig(),
		Transport: mnet.Endpoint("m1"), Clock: clock, Spawn: func(f func()) { clock.AfterFunc(0, f) },
		AccountKey: pub, Characters: &mirror.MemoryCharacters{Key: pub}, FrameTicks: dc.FrameTicks,
		Logger: slog.New(slog.DiscardHandler), Seed: int64(dc.Seed), Egress: mode, Consistency: dc.Settings,
	})
	if err != nil {
		return Traffic{}, 0, 0, err
	}
	if err := m.Start(); err != nil {
		return Traffic{}, 0, 0, err
	}
	defer m.Close()
	if !runUntil(clock, 10*time.Second, m.Ready) {
		return Traffic{}, 0, 0, fmt.Errorf("mirror not ready")
	}
	tick := time.Second / time.Duration(dc.World.TickRate)
	ids := make([]game.PlayerID, dc.Clients)
	clients := make([]*mirror.LocalClient, dc.Clients)
	for i := range clients {
		key, _, err := crypto.GenerateEd25519Key(rng)
		if err != nil {
			return Traffic{}, 0, 0, err
		}
		pid, _ := peer.IDFromPrivateKey(key)
		name := fmt.Sprintf("bot%03d", i)
		now := clock.Now()
		tok, err := token.Sign(signer, token.Claims{Session: "s" + name, Account: name, Player: name, Peer: pid,
			IssuedAt: now.Add(-time.Second), Expiry: now.Add(time.Hour)})
		if err != nil {
			return Traffic{}, 0, 0, err
		}
		ids[i] = game.PlayerID(name)
		clients[i] = mirror.ConnectLocal(m, key, tok, clock, time.Millisecond)
		clients[i].StartBot(dc.Seed+uint64(i), tick)
	}
	if !runUntil(clock, 20*time.Second, func() bool {
		for _, c := range clients {
			if !c.View().HasSelf {
				return false
			}
		}
		return true
	}) {
		return Traffic{}, 0, 0, fmt.Errorf("clients not playing")
	}
	clock.RunFor(time.Duration(dc.Warmup) * time.Second)

	// The mirror's leading world at every frame, kept for the few frames
	// an update takes to reach its client.
	snaps := map[uint64]*frameSnapshot{}
	if zones != nil {
		m.WatchEgress(func(f mirror.EgressFrame) {
			s := &frameSnapshot{players: map[game.PlayerID]vfcworld.State{}, objects: map[game.ObjectID]game.ObjectEntry{}}
			for _, p := range f.World.Players() {
				s.players[p.ID] = vfcworld.StateOf(f.Tick, p)
			}
			cfg := f.World.Config()
			for y := range cfg.RegionsY {
				for x := range cfg.RegionsX {
					for _, o := range f.World.Objects(game.RegionCoord{X: x, Y: y}) {
						s.objects[o.ID] = o
					}
				}
			}
			snaps[f.Tick] = s
			delete(snaps, f.Tick-16)
		})
	}
	held := make([]map[game.ObjectID]heldObject, dc.Clients)
	for i := range held {
		held[i] = map[game.ObjectID]heldObject{}
	}
	before := make([][4]uint64, dc.Clients)
	for i, c := range clients {
		before[i] = c.Counters()
	}
	var objects int
	var missing int64
	lastSeen := make([]uint64, dc.Clients)
	steps := dc.Seconds * dc.World.TickRate
	for step := range steps {
		if step%dc.World.TickRate == 0 {
			if err := ctx.Err(); err != nil {
				return Traffic{}, 0, 0, err
			}
		}
		clock.RunFor(tick)
		if zones == nil {
			continue
		}
		for i, c := range clients {
			if err := c.Err(); err != nil {
				return Traffic{}, 0, 0, fmt.Errorf("client %s: %w", ids[i], err)
			}
			var v mirror.ClientView
			var players []mirror.HeldPlayer
			c.With(func(core *mirror.ClientCore) {
				v = core.View()
				players = core.HeldPlayers()
			})
			snap := snaps[v.LeadingTick]
			if snap == nil || v.LeadingTick == lastSeen[i] {
				continue
			}
			lastSeen[i] = v.LeadingTick
			objects = len(snap.objects)
			missing += observe(zones, dc, snap, ids[i], v, players, held[i])
		}
	}
	var tr Traffic
	for i, c := range clients {
		after := c.Counters()
		tr.Bytes += int64(after[0] - before[i][0])
		tr.Frames += int64(after[2] - before[i][2])
	}
	tr.BytesPerClientSecond = float64(tr.Bytes) / float64(dc.Seconds) / float64(dc.Clients)
	return tr, objects, missing, nil
}

// observe records the staleness of everything client self holds (view v,
// its held players and the bench's record of its objects) against snap,
// the mirror's world at the tick of the client's last update. It returns
// how many things in the world the client held no copy of.
func observe(zones *zoneStats, dc DemoConfig, snap *frameSnapshot, self game.PlayerID, v mirror.ClientView, players []mirror.HeldPlayer, held map[game.ObjectID]heldObject) int64 {
	s, tick := dc.Settings, v.LeadingTick
	me, ok := snap.players[self]
	if !ok {
		return 0
	}
	rate := float64(dc.World.TickRate)
	var missing int64
	seen := 0
	for _, h := range players {
		cur, ok := snap.players[h.Player.ID]
		if !ok {
			continue // left: the drop is in a later update
		}
		seen++
		z := zones.zoneOf(vfcworld.SetPlayers, me.Pos, cur.Pos)
		zr := zones.row(vfcworld.SetPlayers, z)
		zr.PairFrames++
		sent := vfcworld.StateOf(h.Tick, h.Player)
		reckoned := vfcworld.Reckon(sent, tick-h.Tick, s.ReckonTicks)
		zones.addError(vfcworld.SetPlayers, z, float64(chebyshev(reckoned, cur.Pos))/game.TileUnits)
		if sameState(sent, cur) {
			continue
		}
		zr.StaleFrames++
		age := float64(tick-h.Tick) / rate
		val := s.Diff(sent, cur)
		zr.MaxAgeSeconds = max(zr.MaxAgeSeconds, age)
		zr.MaxValue = max(zr.MaxValue, val)
		if age >= zr.Bound.Time || val >= zr.Bound.Value {
			zr.Exceeded++
		}
	}
	missing += int64(len(snap.players) - 1 - seen)
	got := 0
	for _, o := range v.Objects {
		cur, ok := snap.objects[o.ID]
		if !ok {
			continue
		}
		got++
		h := held[o.ID]
		if h.version != o.Version || h.at == 0 {
			h = heldObject{version: o.Version, at: tick}
			held[o.ID] = h
		}
		z := zones.zoneOf(vfcworld.SetObjects, me.Pos, cur.Pos)
		zr := zones.row(vfcworld.SetObjects, z)
		zr.PairFrames++
		if cur.Version == o.Version {
			continue
		}
		zr.StaleFrames++
		age := float64(tick-h.at) / rate
		missed := int(cur.Version - o.Version)
		val := 100.0
		if cur.Object.Max > 0 {
			val = math.Abs(float64(int(cur.Object.Amount)-o.Amount)) * 100 / float64(cur.Object.Max)
		}
		zr.MaxAgeSeconds = max(zr.MaxAgeSeconds, age)
		zr.MaxMissed = max(zr.MaxMissed, missed)
		zr.MaxValue = max(zr.MaxValue, val)
		if age >= zr.Bound.Time || float64(missed) >= zr.Bound.Sequence || val >= zr.Bound.Value {
			zr.Exceeded++
		}
	}
	missing += int64(len(snap.objects) - got)
	return missing
}

// sameState reports whether a client's copy shows what the world has.
func sameState(sent, cur vfcworld.State) bool {
	sent.Tick = cur.Tick
	return sent == cur
}

func runUntil(clock *crimp.SimClock, limit time.Duration, cond func() bool) bool {
	end := clock.Now().Add(limit)
	for !cond() {
		if !clock.Now().Before(end) {
			return false
		}
		clock.RunFor(20 * time.Millisecond)
	}
	return true
}

func chebyshev(a, b game.Vec) int64 {
	dx, dy := int64(a.X)-int64(b.X), int64(a.Y)-int64(b.Y)
	return max(dx, -dx, dy, -dy)
}

func compareObjectIDs(a, b game.ObjectID) int {
	switch {
	case a.Region.Y != b.Region.Y:
		return a.Region.Y - b.Region.Y
	case a.Region.X != b.Region.X:
		return a.Region.X - b.Region.X
	}
	return int(a.Slot) - int(b.Slot)
}

// zoneStats accumulates ZoneRows and position-error histograms.
type zoneStats struct {
	settings [2]vfcworld.SetSettings
	names    [2]string
	byZone   [2][]ZoneRow
	errHist  [2][][]int64 // per set, zone: counts per 1/64 tile
}

const errBucketsPerTile = 64

func newZoneStats(s vfcworld.Settings) *zoneStats {
	z := &zoneStats{settings: [2]vfcworld.SetSettings{s.Players, s.Objects}, names: [2]string{"players", "objects"}}
	for set, ss := range z.settings {
		for i, v := range ss.Scale {
			lo, hi := "0", "∞"
			if i > 0 {
				lo = fmt.Sprintf("%g", float64(ss.Zones[i-1])/game.TileUnits)
			}
			if i < len(ss.Zones) {
				hi = fmt.Sprintf("%g", float64(ss.Zones[i])/game.TileUnits)
			}
			r := fmt.Sprintf("(%s, %s] tiles", lo, hi)
			if i == 0 {
				r = fmt.Sprintf("[0, %s] tiles", hi)
			}
			z.byZone[set] = append(z.byZone[set], ZoneRow{Set: z.names[set], Zone: i + 1, Range: r, Bound: v, BoundText: v.String()})
			z.errHist[set] = append(z.errHist[set], nil)
		}
	}
	return z
}

func (z *zoneStats) zoneOf(set int, pivot, at game.Vec) int {
	d := chebyshev(pivot, at)
	for i, l := range z.settings[set].Zones {
		if d <= int64(l) {
			return i
		}
	}
	return len(z.settings[set].Zones)
}

func (z *zoneStats) row(set, zone int) *ZoneRow { return &z.byZone[set][zone] }

func (z *zoneStats) addError(set, zone int, tiles float64) {
	b := int(math.Ceil(tiles * errBucketsPerTile))
	h := z.errHist[set][zone]
	for len(h) <= b {
		h = append(h, 0)
	}
	h[b]++
	z.errHist[set][zone] = h
	r := &z.byZone[set][zone]
	r.MaxErrorTiles = max(r.MaxErrorTiles, tiles)
}

func (z *zoneStats) rows() []ZoneRow {
	var out []ZoneRow
	for set := range z.byZone {
		for zone := range z.byZone[set] {
			r := z.byZone[set][zone]
			if h := z.errHist[set][zone]; len(h) > 0 {
				var total int64
				for _, n := range h {
					total += n
				}
				var acc int64
				for b, n := range h {
					acc += n
					if acc*100 >= total*99 {
						r.P99ErrorTiles = float64(b) / errBucketsPerTile
						break
					}
				}
			}
			out = append(out, r)
		}
	}
	return out
}
