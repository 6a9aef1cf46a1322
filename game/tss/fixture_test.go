package tss

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// The fixture is a small deterministic world for the synchronizer's tests:
// fxPlayers players on a line, each with a position (weakly consistent) and
// a count of shots; a shot is a strictly consistent event that records
// where and when it happened, so executing one a tick late is a mismatch
// while a late move is one only beyond the margin.

const fxPlayers = 8

type fxOp uint8

const (
	fxMove fxOp = iota + 1 // pos += Arg
	fxSet                  // pos = Arg (last one in a tick wins)
	fxFire                 // strict event at the current position
	fxOps
)

var fxOpNames = [...]string{"", "move", "set", "fire"}

func (o fxOp) String() string {
	if o > 0 && o < fxOps {
		return fxOpNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

type fxCmd struct {
	Stamp  int64
	Mirror uint32
	Seq    uint64
	Player uint8
	Op     fxOp
	Arg    int64
}

func (c fxCmd) At() int64                        { return c.Stamp }
func (c fxCmd) Key() (mirror uint32, seq uint64) { return c.Mirror, c.Seq }

func compareFx(a, b fxCmd) int {
	if c := cmp.Compare(a.Stamp, b.Stamp); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Mirror, b.Mirror); c != 0 {
		return c
	}
	return cmp.Compare(a.Seq, b.Seq)
}

const fxCmdSize = 8 + 4 + 8 + 1 + 1 + 8

func (c fxCmd) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, fxCmdSize)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Stamp))
	b = binary.BigEndian.AppendUint32(b, c.Mirror)
	b = binary.BigEndian.AppendUint64(b, c.Seq)
	b = append(b, c.Player, byte(c.Op))
	b = binary.BigEndian.AppendUint64(b, uint64(c.Arg))
	return b, nil
}

func encodeFx(c fxCmd) ([]byte, error) { return c.MarshalBinary() }

func decodeFx(b []byte) (fxCmd, error) {
	if len(b) != fxCmdSize {
		return fxCmd{}, fmt.Errorf("fixture command of %d bytes, want %d", len(b), fxCmdSize)
	}
	c := fxCmd{
		Stamp:  int64(binary.BigEndian.Uint64(b)),
		Mirror: binary.BigEndian.Uint32(b[8:]),
		Seq:    binary.BigEndian.Uint64(b[12:]),
		Player: b[20],
		Op:     fxOp(b[21]),
		Arg:    int64(binary.BigEndian.Uint64(b[22:])),
	}
	if c.Player >= fxPlayers || c.Op == 0 || c.Op >= fxOps {
		return fxCmd{}, errors.New("fixture command: bad player or op")
	}
	return c, nil
}

type fxEvent struct {
	Tick   uint64
	Player uint8
	Pos    int64
	Shot   uint32
}

type fxRecord struct {
	Tick   uint64
	Events []fxEvent
	Pos    [fxPlayers]int64
}

func (r fxRecord) Diverges(o fxRecord, margin int64) (string, bool) {
	if r.Tick != o.Tick {
		return fmt.Sprintf("records of ticks %d and %d", r.Tick, o.Tick), true
	}
	for i := range max(len(r.Events), len(o.Events)) {
		switch {
		case i >= len(r.Events):
			return fmt.Sprintf("tick %d: shot of p%d only ahead", r.Tick, o.Events[i].Player), true
		case i >= len(o.Events):
			return fmt.Sprintf("tick %d: shot of p%d only behind", r.Tick, r.Events[i].Player), true
		case r.Events[i] != o.Events[i]:
			return fmt.Sprintf("tick %d: shot %+v vs %+v", r.Tick, r.Events[i], o.Events[i]), true
		}
	}
	for p := range fxPlayers {
		if d := r.Pos[p] - o.Pos[p]; d > margin || -d > margin {
			return fmt.Sprintf("tick %d: p%d at %d vs %d", r.Tick, p, r.Pos[p], o.Pos[p]), true
		}
	}
	return "", false
}

type fxState struct {
	tick  uint64
	pos   [fxPlayers]int64
	shots [fxPlayers]uint32
	// advances counts Advance calls on this object; it is not state (not
	// copied, not hashed). Tests use it to inject nondeterminism.
	advances int
	// perturb, when set, runs after each Advance with the call count: a
	// test's way to make the state nondeterministic.
	perturb func(s *fxState)
}

func newFx() *fxState { return &fxState{} }

func (s *fxState) Tick() uint64 { return s.tick }

func (s *fxState) Advance(cmds []fxCmd) fxRecord {
	s.tick++
	rec := fxRecord{Tick: s.tick}
	for _, c := range cmds {
		p := c.Player % fxPlayers
		switch c.Op {
		case fxMove:
			s.pos[p] += c.Arg
		case fxSet:
			s.pos[p] = c.Arg
		case fxFire:
			s.shots[p]++
			rec.Events = append(rec.Events, fxEvent{Tick: s.tick, Player: p, Pos: s.pos[p], Shot: s.shots[p]})
		}
	}
	s.advances++
	if s.perturb != nil {
		s.perturb(s)
	}
	rec.Pos = s.pos
	return rec
}

func (s *fxState) CopyFrom(src *fxState) {
	s.tick, s.pos, s.shots = src.tick, src.pos, src.shots
}

func (s *fxState) Hash() [32]byte {
	b := binary.BigEndian.AppendUint64(nil, s.tick)
	for p := range fxPlayers {
		b = binary.BigEndian.AppendUint64(b, uint64(s.pos[p]))
		b = binary.BigEndian.AppendUint32(b, s.shots[p])
	}
	return sha256.Sum256(b)
}

var _ State[*fxState, fxCmd, fxRecord] = (*fxState)(nil)

type fxSync = Synchronizer[*fxState, fxCmd, fxRecord]

func newFxSync(cfg Config, opts Options[fxCmd]) (*fxSync, error) {
	return New[*fxState, fxCmd, fxRecord](cfg, newFx(), newFx, opts)
}

// fxReference runs the commands in order on one state: the state every
// synchronizer's last state must equal. It returns the hash after each
// tick, index 0 being the initial state.
func fxReference(cfg Config, cmds []fxCmd, ticks uint64) [][32]byte {
	cfg = cfg.WithDefaults()
	byTick := map[uint64][]fxCmd{}
	for _, c := range cmds {
		t := cfg.TickOf(c.Stamp)
		byTick[t] = append(byTick[t], c)
	}
	s := newFx()
	hashes := [][32]byte{s.Hash()}
	for t := uint64(1); t <= ticks; t++ {
		batch := byTick[t]
		slices.SortFunc(batch, compareFx)
		s.Advance(batch)
		hashes = append(hashes, s.Hash())
	}
	return hashes
}
