package vfcbench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/vfc"
	"github.com/overworld-p2p/overworld/game/vfc/vfcworld"
)

// The wire cost model of a client update. The mirror egress and its wire
// format do not exist yet; these sizes are a compact binary encoding of
// what a client needs, the same for VFC and the baselines, so the ratios
// depend little on them.
const (
	// FrameHeaderBytes: leading and confirmed tick, record counts.
	FrameHeaderBytes = 16
	// PlayerRecordBytes: a 2-byte player index, position (2×4), velocity
	// (2×2), health, hunger, flags (3×1), score (4), tick offset (2).
	PlayerRecordBytes = 2 + 8 + 4 + 3 + 4 + 2
	// ObjectRecordBytes: a 2-byte object index and game.Object's encoding.
	ObjectRecordBytes = 2 + game.ObjectWireSize
	// DropRecordBytes: a 2-byte player index.
	DropRecordBytes = 2
)

// DemoConfig is the 50-client demo: bot-driven players in a game.World,
// each with a client whose view the Filter runs, and no network.
type DemoConfig struct {
	Clients    int
	Seconds    int
	FrameTicks int // world ticks per frame (round)
	Seed       uint64
	World      game.Config
	Settings   vfcworld.Settings
}

// DefaultDemo is 50 clients for 60 s of the default world, a frame every
// tick (30 Hz), with vfcworld's default settings.
func DefaultDemo() DemoConfig {
	return DemoConfig{Clients: 50, Seconds: 60, FrameTicks: 1, Seed: 1, World: game.DefaultConfig(), Settings: vfcworld.DefaultSettings()}
}

// Traffic is what the clients were sent in total under one policy.
type Traffic struct {
	Policy  string `json:"policy"`
	Records int64  `json:"records"`
	Bytes   int64  `json:"bytes"`
	// BytesPerClientSecond is the mean downstream rate of one client.
	BytesPerClientSecond float64 `json:"bytes_per_client_second"`
}

// ZoneRow is the largest staleness seen in one zone of one set, measured
// on the harness's own copies after every round, against the zone's bound.
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
	// The largest age of a stale copy (since its last send), missed
	// updates and value difference seen.
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
	Players    int `json:"players"`
	Objects    int `json:"objects"`
	Seconds    int `json:"seconds"`
	Frames     int `json:"frames"`
	FrameTicks int `json:"frame_ticks"`
	// Traffic under VFC and three baselines: every object every frame
	// (send-all), every change to every client (the paper's version 1),
	// and every change within the 3×3 regions around the client (the
	// area the page draws).
	VFC         Traffic   `json:"vfc"`
	SendAll     Traffic   `json:"send_all"`
	SendChanged Traffic   `json:"send_every_change"`
	AOIChanged  Traffic   `json:"send_changes_in_3x3_regions"`
	Zones       []ZoneRow `json:"zones"`
	// FilterTime is the wall time spent in Filter.Frame and AppendSends
	// over the run, and per frame (all clients).
	FilterTime     time.Duration `json:"filter_ns"`
	FilterPerFrame time.Duration `json:"filter_per_frame_ns"`
}

type shadowCopy struct {
	has    bool
	state  vfcworld.State
	sentAt uint64 // tick
	missed int
}

// RunDemo plays the demo and measures traffic and staleness. The run is
// deterministic for a config (except FilterTime).
func RunDemo(ctx context.Context, dc DemoConfig) (*DemoReport, error) {
	if dc.Clients < 1 || dc.Seconds < 1 || dc.FrameTicks < 1 {
		return nil, fmt.Errorf("demo: %d clients, %d s, %d ticks per frame: need at least one of each", dc.Clients, dc.Seconds, dc.FrameTicks)
	}
	w, err := game.NewWorld(dc.World)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	cfg := w.Config()
	ids := make([]game.PlayerID, dc.Clients)
	bots := make([]*game.Bot, dc.Clients)
	for i := range ids {
		ids[i] = game.PlayerID(fmt.Sprintf("bot-%03d", i))
		if _, err := w.AddPlayer(ids[i], fmt.Sprintf("Bot %d", i)); err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		bots[i] = game.NewBot(cfg, ids[i], dc.Seed, game.DefaultBotPace())
	}
	f, err := vfcworld.New(w, dc.Settings)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	for _, id := range ids {
		if err := f.AddClient(id); err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
	}
	s := dc.Settings
	objIDs := w.ObjectTable().IDs()
	nObj := len(objIDs)
	// The harness's own view of the world: current states, which changed
	// since the last frame, and every client's copies.
	cur := make([]vfcworld.State, dc.Clients+nObj) // players by index, then objects
	changed := make([]bool, len(cur))
	key := func(st vfcworld.State) int {
		if st.Player != "" {
			return slices.Index(ids, st.Player)
		}
		i, _ := slices.BinarySearchFunc(objIDs, st.Object, compareObjectIDs)
		return dc.Clients + i
	}
	observe := func(first bool) {
		tick := w.Tick()
		for i, id := range ids {
			p, _ := w.Player(id)
			st := vfcworld.State{Tick: tick, Player: id, Pos: p.Pos, Vel: p.Vel, Health: p.Health, Hunger: p.Hunger, Score: p.Score, Alive: p.Alive}
			old := cur[i]
			if first || old.Pos != st.Pos || old.Vel != st.Vel || old.Health != st.Health || old.Hunger != st.Hunger || old.Score != st.Score || old.Alive != st.Alive {
				cur[i], changed[i] = st, true
			}
		}
		for j, id := range objIDs {
			v, _ := w.ObjectTable().Get(id)
			if first || cur[dc.Clients+j].Value.Version != v.Version {
				cur[dc.Clients+j], changed[dc.Clients+j] = vfcworld.State{Tick: tick, Object: id, Value: v}, true
			}
		}
	}
	observe(true)
	objPos := make([]game.Vec, nObj)
	for j, id := range objIDs {
		v, _ := w.ObjectTable().Get(id)
		objPos[j] = w.ObjectPos(id, v.Object)
	}
	copies := make([][]shadowCopy, dc.Clients)
	for i := range copies {
		copies[i] = make([]shadowCopy, len(cur))
	}

	rep := &DemoReport{Clients: dc.Clients, Players: dc.Clients, Objects: nObj, Seconds: dc.Seconds, FrameTicks: dc.FrameTicks}
	rep.VFC.Policy, rep.SendAll.Policy, rep.SendChanged.Policy, rep.AOIChanged.Policy = "vfc", "send-all", "send-every-change", "send-changes-in-3x3-regions"
	zones := newZoneStats(s)
	var sends []vfcworld.State
	inputs := make([]game.Input, dc.Clients)
	ticks := dc.Seconds * cfg.TickRate
	for t := 1; t <= ticks; t++ {
		for i, b := range bots {
			obs, _ := w.BotObserve(ids[i])
			inputs[i] = b.Next(obs)
		}
		w.Step(inputs)
		if t%dc.FrameTicks != 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// The harness looks at the world when the filter does: once a
		// frame, so both stamp a change with the frame's tick.
		observe(false)
		rep.Frames++
		tick := w.Tick()
		for k := range changed {
			if !changed[k] {
				continue
			}
			for c := range copies {
				copies[c][k].missed++
			}
		}
		t0 := time.Now()
		if err := f.Frame(w); err != nil {
			return nil, fmt.Errorf("demo: tick %d: %w", tick, err)
		}
		rep.FilterTime += time.Since(t0)

		nChanged := 0
		for _, ch := range changed {
			if ch {
				nChanged++
			}
		}
		for c, id := range ids {
			t1 := time.Now()
			sends = f.AppendSends(id, sends[:0])
			rep.FilterTime += time.Since(t1)
			if len(f.Drops(id)) > 0 {
				return nil, fmt.Errorf("demo: client %s dropped players, but nobody left", id)
			}
			bytes := int64(FrameHeaderBytes)
			for _, st := range sends {
				k := key(st)
				if k < 0 {
					return nil, fmt.Errorf("demo: client %s sent unknown player %s", id, st.Player)
				}
				if st != cur[k] {
					return nil, fmt.Errorf("demo: client %s sent %+v, the world has %+v", id, st, cur[k])
				}
				copies[c][k] = shadowCopy{has: true, state: st, sentAt: tick}
				bytes += recordBytes(st)
			}
			rep.VFC.add(int64(len(sends)), bytes)
			rep.SendAll.add(int64(len(cur)), FrameHeaderBytes+int64(dc.Clients)*PlayerRecordBytes+int64(nObj)*ObjectRecordBytes)
			changedBytes := int64(FrameHeaderBytes)
			for k, ch := range changed {
				if ch {
					changedBytes += recordBytes(cur[k])
				}
			}
			rep.SendChanged.add(int64(nChanged), changedBytes)
			self := cur[c].Pos
			here := game.RegionOf(cfg, self)
			aoiBytes, aoiRecords := int64(FrameHeaderBytes), int64(0)
			for k, ch := range changed {
				if !ch {
					continue
				}
				var rc game.RegionCoord
				if k < dc.Clients {
					rc = game.RegionOf(cfg, cur[k].Pos)
				} else {
					rc = cur[k].Object.Region
				}
				if abs(rc.X-here.X) <= 1 && abs(rc.Y-here.Y) <= 1 {
					aoiBytes += recordBytes(cur[k])
					aoiRecords++
				}
			}
			rep.AOIChanged.add(aoiRecords, aoiBytes)

			// Staleness of every copy the client holds, in the zone the
			// harness computes itself.
			for k := range cur {
				cp := copies[c][k]
				if !cp.has {
					return nil, fmt.Errorf("demo: tick %d: client %s never got %+v", tick, id, cur[k])
				}
				set, pos := vfcworld.SetPlayers, cur[k].Pos
				if k >= dc.Clients {
					set, pos = vfcworld.SetObjects, objPos[k-dc.Clients]
				}
				z := zones.zoneOf(set, self, pos)
				if fz, ok := f.Zone(id, cur[k].Player, cur[k].Object); !ok || (fz != z && !s.Literal) {
					return nil, fmt.Errorf("demo: tick %d: client %s: filter puts %s%s in zone %d, the harness in %d", tick, id, cur[k].Player, cur[k].Object, fz, z)
				}
				zr := zones.row(set, z)
				zr.PairFrames++
				if set == vfcworld.SetPlayers {
					e := float64(chebyshev(vfcworld.Reckon(cp.state, tick-cp.sentAt, s.ReckonTicks), pos)) / game.TileUnits
					zones.addError(set, z, e)
				}
				if cp.missed == 0 {
					continue
				}
				zr.StaleFrames++
				age := float64(f.Now(tick)-f.Now(cp.sentAt)) / float64(time.Second)
				val := s.Diff(cp.state, cur[k])
				zr.MaxAgeSeconds = max(zr.MaxAgeSeconds, age)
				zr.MaxMissed = max(zr.MaxMissed, cp.missed)
				zr.MaxValue = max(zr.MaxValue, val)
				if age >= zr.Bound.Time || float64(cp.missed) >= zr.Bound.Sequence || val >= zr.Bound.Value {
					zr.Exceeded++
				}
			}
		}
		clear(changed)
	}
	secs := float64(dc.Seconds) * float64(dc.Clients)
	for _, tr := range []*Traffic{&rep.VFC, &rep.SendAll, &rep.SendChanged, &rep.AOIChanged} {
		tr.BytesPerClientSecond = float64(tr.Bytes) / secs
	}
	rep.Zones = zones.rows()
	if rep.Frames > 0 {
		rep.FilterPerFrame = rep.FilterTime / time.Duration(rep.Frames)
	}
	return rep, nil
}

func (t *Traffic) add(records, bytes int64) { t.Records += records; t.Bytes += bytes }

func recordBytes(st vfcworld.State) int64 {
	if st.Player != "" {
		return PlayerRecordBytes
	}
	return ObjectRecordBytes
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
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
