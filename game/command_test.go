package game

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// script is a recorded command stream and what a reference run of it
// produced, tick by tick (index 0 is tick 1).
type script struct {
	cfg     Config
	cmds    [][]Command
	hashes  [][32]byte
	records []TickRecord
}

// botScript records ticks of n bots playing a 3×3 world, every change
// made through commands: the bots join (as saved characters crowded into
// the middle region, some of them hurt or starving, so fights, deaths and
// respawns happen), send their inputs every tick from three ingress
// mirrors in shuffled stamp order, now and then leave and come back with
// the character they left with, and sometimes ask to respawn at home.
func botScript(t testing.TB, seed uint64, n, ticks int) script {
	t.Helper()
	cfg := botConfig(seed)
	w := mustWorld(t, cfg)
	rng := NewRand(seed ^ 0xc0ffee)
	const period = int64(1_000_000_000 / 30)
	var seq [4]uint64
	stamp := func(tick int, mirror uint32) (int64, uint32, uint64) {
		seq[mirror]++
		return int64(tick-1)*period + 1 + int64(rng.IntN(int(period))), mirror, seq[mirror]
	}
	type botState struct {
		bot      *Bot
		mirror   uint32
		joinAt   int
		saved    Character
		asked    bool
		leaveTil int
	}
	bots := make([]*botState, n)
	middle := RegionCoord{1, 1}
	for i := range bots {
		id := PlayerID(fmt.Sprintf("bot-%02d", i))
		c := Character{Pos: w.SpawnPoint(id, middle, 0), Health: MaxHealth, Skill: 10}
		switch i % 5 {
		case 0:
			c.Health = 12
		case 1:
			c.Hunger, c.Health = MaxHunger, 5
		}
		bots[i] = &botState{bot: NewBot(cfg, id, seed, DefaultBotPace()), mirror: uint32(1 + i%3), joinAt: 1 + 2*i, saved: c}
	}
	s := script{cfg: cfg}
	for tick := 1; tick <= ticks; tick++ {
		var cmds []Command
		for _, b := range bots {
			id := b.bot.ID()
			p, present := w.Player(id)
			switch {
			case !present && (tick == b.joinAt || b.leaveTil == tick):
				saved := b.saved
				st, m, sq := stamp(tick, b.mirror)
				cmds = append(cmds, Command{Stamp: st, Mirror: m, Seq: sq, Op: CommandJoin, Player: id, Name: "Bot " + string(id[4:]), Saved: &saved})
			case !present:
			case rng.IntN(3000) == 0:
				b.saved, b.leaveTil = CharacterOf(p), tick+30+rng.IntN(60)
				st, m, sq := stamp(tick, b.mirror)
				cmds = append(cmds, Command{Stamp: st, Mirror: m, Seq: sq, Op: CommandLeave, Player: id})
			default:
				if !p.Alive && !b.asked && rng.IntN(2) == 0 {
					b.asked = true
					st, m, sq := stamp(tick, b.mirror)
					cmds = append(cmds, Command{Stamp: st, Mirror: m, Seq: sq, Op: CommandRespawn, Player: id})
				}
				if p.Alive {
					b.asked = false
				}
				obs, _ := w.BotObserve(id)
				st, m, sq := stamp(tick, b.mirror)
				cmds = append(cmds, Command{Stamp: st, Mirror: m, Seq: sq, Op: CommandInput, Player: id, Input: b.bot.Next(obs)})
			}
		}
		slices.SortFunc(cmds, CompareCommands)
		rec := w.Advance(cmds)
		s.cmds = append(s.cmds, cmds)
		s.hashes = append(s.hashes, w.Hash())
		s.records = append(s.records, rec)
	}
	return s
}

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range []Command{
		{Stamp: 1, Mirror: 2, Seq: 3, Op: CommandInput, Player: "p", Input: Input{Player: "p", MoveX: -128, Fight: true, Target: "q"}},
		{Stamp: -5, Op: CommandJoin, Player: "p", Name: "Pat"},
		{Stamp: 1 << 62, Mirror: ^uint32(0), Seq: ^uint64(0), Op: CommandJoin, Player: "p", Name: "Pat", Saved: &Character{Pos: Vec{-1, 1 << 30}, Health: 40, Hunger: 7, Score: 99, Skill: 12}},
		{Op: CommandLeave, Player: PlayerID(strings.Repeat("x", MaxPlayerIDLen))},
		{Op: CommandRespawn, Player: "p"},
	} {
		b, err := c.MarshalBinary()
		if err != nil {
			t.Fatalf("encode %v: %v", c, err)
		}
		if len(b) > MaxCommandWireSize {
			t.Fatalf("%v: %d bytes, bound %d", c, len(b), MaxCommandWireSize)
		}
		got, err := UnmarshalCommand(b)
		if err != nil {
			t.Fatalf("decode %v: %v", c, err)
		}
		if CompareCommands(got, c) != 0 {
			t.Fatalf("round trip: %+v became %+v", c, got)
		}
		if (got.Saved == nil) != (c.Saved == nil) || got.Saved != nil && *got.Saved != *c.Saved {
			t.Fatalf("saved character: %+v became %+v", c.Saved, got.Saved)
		}
	}
	// The largest command fits the bound exactly.
	long := PlayerID(strings.Repeat("y", MaxPlayerIDLen))
	b, err := Command{Op: CommandInput, Player: long, Input: Input{Player: long, Target: long}}.MarshalBinary()
	if err != nil || len(b) != MaxCommandWireSize {
		t.Fatalf("largest command: %d bytes (%v), bound %d", len(b), err, MaxCommandWireSize)
	}
}

func TestCommandRejects(t *testing.T) {
	for _, c := range []Command{
		{Op: 0, Player: "p"},
		{Op: commandOps, Player: "p"},
		{Op: CommandLeave},
		{Op: CommandInput, Player: "p", Input: Input{Player: "q"}},
		{Op: CommandJoin, Player: "p"},
		{Op: CommandJoin, Player: "p", Name: "bad\x01"},
		{Op: CommandLeave, Player: "p", Name: "x"},
		{Op: CommandRespawn, Player: "p", Input: Input{Player: "p"}},
		{Op: CommandLeave, Player: "p", Saved: &Character{}},
	} {
		if _, err := c.MarshalBinary(); err == nil {
			t.Errorf("encoded %+v", c)
		}
	}
	good, _ := Command{Op: CommandJoin, Player: "p", Name: "Pat"}.MarshalBinary()
	for name, b := range map[string][]byte{
		"empty":     nil,
		"format":    append([]byte{9}, good[1:]...),
		"truncated": good[:len(good)-1],
		"trailing":  append(slices.Clone(good), 0),
		"flag":      append(slices.Clone(good[:len(good)-1]), 2),
		"oversized": make([]byte, MaxCommandWireSize+1),
	} {
		if c, err := UnmarshalCommand(b); err == nil {
			t.Errorf("%s: decoded %+v", name, c)
		}
	}
}

func TestCompareCommands(t *testing.T) {
	base := Command{Stamp: 10, Mirror: 2, Seq: 5, Op: CommandLeave, Player: "p"}
	later := []Command{
		{Stamp: 11, Mirror: 0, Seq: 0, Op: CommandLeave, Player: "a"},
		{Stamp: 10, Mirror: 3, Seq: 0, Op: CommandLeave, Player: "a"},
		{Stamp: 10, Mirror: 2, Seq: 6, Op: CommandLeave, Player: "a"},
		// Same key, different command: still a strict order.
		{Stamp: 10, Mirror: 2, Seq: 5, Op: CommandRespawn, Player: "a"},
		{Stamp: 10, Mirror: 2, Seq: 5, Op: CommandLeave, Player: "q"},
	}
	for _, l := range later {
		if CompareCommands(base, l) >= 0 || CompareCommands(l, base) <= 0 {
			t.Errorf("%v should sort before %v", base, l)
		}
	}
	if CompareCommands(base, base) != 0 {
		t.Error("a command differs from itself")
	}
	if m, s := base.Key(); base.At() != 10 || m != 2 || s != 5 {
		t.Errorf("At/Key: %d %d %d", base.At(), m, s)
	}
}

// newEmptyWorld is a 2×2 world with nobody in it.
func newEmptyWorld(t testing.TB) *World {
	t.Helper()
	cfg := DefaultConfig()
	cfg.RegionsX, cfg.RegionsY = 2, 2
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func kinds(events []Event) []EventKind {
	var out []EventKind
	for _, e := range events {
		out = append(out, e.Kind)
	}
	return out
}

func TestJoinLeaveRespawnCommands(t *testing.T) {
	w := newEmptyWorld(t)
	rec := w.Advance([]Command{
		{Seq: 1, Op: CommandJoin, Player: "p", Name: "Pat"},
		{Seq: 2, Op: CommandInput, Player: "p", Input: Input{Player: "p", MoveX: 127}},
		{Seq: 3, Op: CommandInput, Player: "ghost", Input: Input{Player: "ghost"}},
		{Seq: 4, Op: CommandJoin, Player: "p", Name: "Again"},
		{Seq: 5, Op: CommandInput, Player: "p", Input: Input{Player: "q"}},
	})
	p, ok := w.Player("p")
	if !ok || p.Name != "Pat" || p.Health != MaxHealth || p.Skill != 10 {
		t.Fatalf("joined player %+v (present %v)", p, ok)
	}
	if rec.Ignored != 3 || !slices.Equal(kinds(rec.Events), []EventKind{EventJoined}) {
		t.Fatalf("record %+v: want one join and 3 ignored commands", rec)
	}
	if p.Vel.X <= 0 {
		t.Fatalf("the input after the join did not move the player: %+v", p)
	}
	home := w.HomeRegion("p")
	if rec.Events[0].To != home || w.RegionOf(p.Pos) != home {
		t.Fatalf("joined in %v at %+v, home is %v", rec.Events[0].To, p.Pos, home)
	}
	if len(rec.Positions) != 1 || rec.Positions[0] != (PlayerPosition{"p", p.Pos}) {
		t.Fatalf("positions %+v", rec.Positions)
	}

	// An input filed before a leave leaves with the player; a join after
	// the leave in the same tick comes back fresh.
	w.ref("p").Score = 50
	rec = w.Advance([]Command{
		{Seq: 1, Op: CommandInput, Player: "p", Input: Input{Player: "p", MoveX: 127}},
		{Seq: 2, Op: CommandLeave, Player: "p"},
		{Seq: 3, Op: CommandJoin, Player: "p", Name: "Pat"},
	})
	p, _ = w.Player("p")
	if !slices.Equal(kinds(rec.Events), []EventKind{EventLeft, EventJoined}) || p.Score != 0 || p.Vel != (Vec{}) {
		t.Fatalf("leave and rejoin: events %v, player %+v", kinds(rec.Events), p)
	}

	// A returning player comes back as saved: bars clamped, at its place.
	savedAt := w.SpawnPoint("r", RegionCoord{1, 1}, 3)
	rec = w.Advance([]Command{{Seq: 1, Op: CommandJoin, Player: "r", Name: "Ria",
		Saved: &Character{Pos: savedAt, Health: 33, Hunger: 70, Score: 12, Skill: 500}}})
	r, _ := w.Player("r")
	if r.Pos != savedAt || r.Health != 33 || r.Hunger != 70 || r.Score != 12 || r.Skill != MaxSkill || !r.Alive {
		t.Fatalf("restored %+v from a save at %+v", r, savedAt)
	}
	if rec.Events[0].To != (RegionCoord{1, 1}) {
		t.Fatalf("join event %+v", rec.Events[0])
	}
	// A save inside a wall or outside the world lands on a spawn point of
	// its region; a save of a dead character comes back whole.
	rec = w.Advance([]Command{{Seq: 1, Op: CommandJoin, Player: "s", Name: "Sol",
		Saved: &Character{Pos: Vec{-500, 1 << 30}, Health: -3, Hunger: 90, Skill: 4}}})
	s, _ := w.Player("s")
	if want := w.SpawnPoint("s", w.RegionOf(Vec{-500, 1 << 30}), 0); s.Pos != want || s.Health != MaxHealth || s.Hunger != 0 || s.Skill != 4 {
		t.Fatalf("restored %+v, want full bars at %+v", s, want)
	}

	// A respawn request of a living player is ignored; a dead one comes
	// back at home at its respawn tick, not earlier.
	rec = w.Advance([]Command{{Seq: 1, Op: CommandRespawn, Player: "r"}, {Seq: 2, Op: CommandRespawn, Player: "nobody"}})
	if rec.Ignored != 2 {
		t.Fatalf("ignored %d respawn requests, want 2", rec.Ignored)
	}
	rp := w.ref("r")
	rp.Health = 1
	rp.Hunger = MaxHunger
	var died Event
	for died.Kind == 0 {
		for _, e := range w.Advance(nil).Events {
			if e.Kind == EventDied && e.Player == "r" {
				died = e
			}
		}
	}
	w.Advance([]Command{{Seq: 1, Op: CommandRespawn, Player: "r"}})
	r, _ = w.Player("r")
	if !r.RespawnHome || r.Alive {
		t.Fatalf("after asking to respawn at home: %+v", r)
	}
	var back Event
	for back.Kind == 0 {
		for _, e := range w.Advance(nil).Events {
			if e.Kind == EventRespawned && e.Player == "r" {
				back = e
			}
		}
	}
	r, _ = w.Player("r")
	if back.Tick != died.Tick+w.cfg.RespawnTicks {
		t.Fatalf("respawned at tick %d, died at %d", back.Tick, died.Tick)
	}
	if want := w.SpawnPoint("r", w.HomeRegion("r"), 1); r.Pos != want || back.To != w.HomeRegion("r") || r.RespawnHome {
		t.Fatalf("respawned at %+v in %v, want home spawn %+v in %v", r.Pos, back.To, want, w.HomeRegion("r"))
	}

	rec = w.Advance([]Command{{Seq: 1, Op: CommandLeave, Player: "r"}, {Seq: 2, Op: CommandLeave, Player: "r"}})
	if _, ok := w.Player("r"); ok || rec.Ignored != 1 || !slices.Equal(kinds(rec.Events), []EventKind{EventLeft}) {
		t.Fatalf("double leave: %+v", rec)
	}
}

// Advance applies commands in canonical order whatever order the slice has.
func TestShuffledCommandsGiveSameState(t *testing.T) {
	s := botScript(t, 5, 12, 2000)
	sorted, shuffled := mustWorld(t, s.cfg), mustWorld(t, s.cfg)
	rng := NewRand(77)
	shuffledTicks := 0
	for i, cmds := range s.cmds {
		mixed := slices.Clone(cmds)
		for j := len(mixed) - 1; j > 0; j-- {
			k := rng.IntN(j + 1)
			mixed[j], mixed[k] = mixed[k], mixed[j]
		}
		if !slices.IsSortedFunc(mixed, CompareCommands) {
			shuffledTicks++
		}
		before := slices.Clone(mixed)
		ra, rb := sorted.Advance(cmds), shuffled.Advance(mixed)
		if sorted.Hash() != shuffled.Hash() {
			t.Fatalf("tick %d: shuffled commands gave another state", i+1)
		}
		if why, bad := ra.Diverges(rb, 0); bad {
			t.Fatalf("shuffled commands gave another record: %s", why)
		}
		if !slices.EqualFunc(before, mixed, func(a, b Command) bool { return CompareCommands(a, b) == 0 }) {
			t.Fatal("Advance reordered the caller's slice")
		}
	}
	if shuffledTicks < len(s.cmds)/2 {
		t.Fatalf("only %d of %d ticks had their commands out of order", shuffledTicks, len(s.cmds))
	}
}

func mustWorld(t testing.TB, cfg Config) *World {
	t.Helper()
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestEventStrictness(t *testing.T) {
	for k := EventAte; k <= EventLeft; k++ {
		if want := k != EventRegionChanged; k.Strict() != want {
			t.Errorf("%s.Strict() = %v", k, k.Strict())
		}
	}
}

func TestTickRecordDiverges(t *testing.T) {
	base := TickRecord{
		Tick: 9,
		Events: []Event{
			{Tick: 9, Kind: EventRegionChanged, Player: "a", From: RegionCoord{0, 0}, To: RegionCoord{1, 0}},
			{Tick: 9, Kind: EventAte, Player: "a", Object: ObjectID{RegionCoord{1, 0}, 2}, Amount: 1},
			{Tick: 9, Kind: EventHit, Player: "a", Other: "b", Amount: 7},
		},
		Positions: []PlayerPosition{{"a", Vec{100, 100}}, {"b", Vec{500, 20}}},
	}
	clone := func(edit func(*TickRecord)) TickRecord {
		r := TickRecord{Tick: base.Tick, Events: slices.Clone(base.Events), Positions: slices.Clone(base.Positions)}
		edit(&r)
		return r
	}
	same := []TickRecord{
		clone(func(r *TickRecord) {}),
		// Weak events are not compared.
		clone(func(r *TickRecord) { r.Events = r.Events[1:] }),
		// Positions within the margin.
		clone(func(r *TickRecord) { r.Positions[1].Pos = Vec{510, 10} }),
		// Ignored counts are not compared.
		clone(func(r *TickRecord) { r.Ignored = 4 }),
	}
	for i, r := range same {
		if why, bad := base.Diverges(r, 10); bad {
			t.Errorf("case %d diverges: %s", i, why)
		}
	}
	differ := map[string]TickRecord{
		"tick":            clone(func(r *TickRecord) { r.Tick++ }),
		"strict amount":   clone(func(r *TickRecord) { r.Events[2].Amount = 8 }),
		"strict missing":  clone(func(r *TickRecord) { r.Events = r.Events[:2] }),
		"strict extra":    clone(func(r *TickRecord) { r.Events = append(r.Events, Event{Tick: 9, Kind: EventDied, Player: "b"}) }),
		"strict order":    clone(func(r *TickRecord) { r.Events[1], r.Events[2] = r.Events[2], r.Events[1] }),
		"position":        clone(func(r *TickRecord) { r.Positions[0].Pos.Y = 111 }),
		"player missing":  clone(func(r *TickRecord) { r.Positions = r.Positions[:1] }),
		"player extra":    clone(func(r *TickRecord) { r.Positions = append(r.Positions, PlayerPosition{"c", Vec{}}) }),
		"player replaced": clone(func(r *TickRecord) { r.Positions[0].Player = "c" }),
	}
	for name, r := range differ {
		why, bad := base.Diverges(r, 10)
		if !bad || why == "" {
			t.Errorf("%s: not reported", name)
		}
		if _, back := r.Diverges(base, 10); !back {
			t.Errorf("%s: reported one way only", name)
		}
	}
	// A zero margin compares positions exactly.
	if _, bad := base.Diverges(same[2], 0); !bad {
		t.Error("a 10-unit difference passed a zero margin")
	}
}

// FuzzUnmarshalCommand: any input either fails cleanly or decodes to a
// command that encodes to the same bytes, and a decoded command advances a
// world without panicking.
func FuzzUnmarshalCommand(f *testing.F) {
	for _, c := range []Command{
		{Stamp: 1, Mirror: 2, Seq: 3, Op: CommandInput, Player: "p", Input: Input{Player: "p", MoveX: 127, Eat: true}},
		{Op: CommandJoin, Player: "q", Name: "Quinn"},
		{Op: CommandJoin, Player: "r", Name: "R", Saved: &Character{Pos: Vec{3000, 3000}, Health: 10, Skill: 3}},
		{Op: CommandLeave, Player: "p"},
		{Op: CommandRespawn, Player: "p"},
	} {
		b, err := c.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	base := newEmptyWorld(f)
	base.AddPlayer("p", "P")
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := UnmarshalCommand(b)
		if err != nil {
			return
		}
		again, err := c.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("not canonical: %x -> %+v -> %x (%v)", b, c, again, err)
		}
		w := base.Clone()
		w.Advance([]Command{c})
		w.Advance([]Command{c})
	})
}

// The interfaces game/tss defines (TSS_CONTRACT.md), restated here so the
// build proves *World satisfies tss.State[*World, Command, TickRecord]
// without importing tss.
type (
	contractCommand interface {
		At() int64
		Key() (mirror uint32, seq uint64)
	}
	contractRecord[R any] interface {
		Diverges(other R, weakMargin int64) (why string, diverged bool)
	}
	contractState[S any, C contractCommand, R contractRecord[R]] interface {
		Tick() uint64
		Advance(cmds []C) R
		CopyFrom(src S)
		Hash() [32]byte
	}
)

var _ contractState[*World, Command, TickRecord] = (*World)(nil)
