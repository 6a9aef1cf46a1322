package mirror

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// Command is what the mirrors' synchronizers order and replay: a game
// command from an ingress mirror, or the authority's release of the
// players of a dropped mirror.
type Command struct {
	game.Command
	// Release, when non-zero, makes this the authority's release of the
	// players whose ingress is the dropped mirror Release; of the game
	// fields only Stamp, Mirror and Seq are set.
	Release uint32
	// Decision, when non-zero, makes this the authority's decision (event
	// protocol) that the action Command, as its ingress mirror stamped and
	// numbered it, takes effect in the tick of the stamp Decision.
	Decision int64
}

// decisionSeq marks the sequence number of a decision's key: the decision
// on action (mirror, seq) is keyed (mirror, seq|decisionSeq), so that the
// synchronizer keeps one decision per action and it never collides with a
// command (whose sequence numbers stay below maxCommandSeq).
const (
	decisionSeq   = 1 << 63
	maxCommandSeq = 1 << 62
)

// At is when the command runs (tss.Command): a decision's stamp, else the
// ingress stamp.
func (c Command) At() int64 {
	if c.Decision != 0 {
		return c.Decision
	}
	return c.Stamp
}

// Key is the command's ingress mirror and sequence number (tss.Command); a
// decision's is its action's, marked.
func (c Command) Key() (mirror uint32, seq uint64) {
	if c.Decision != 0 {
		return c.Mirror, c.Seq | decisionSeq
	}
	return c.Mirror, c.Seq
}

func (c Command) String() string {
	switch {
	case c.Release != 0:
		return fmt.Sprintf("release m%d @%d m%d#%d", c.Release, c.Stamp, c.Mirror, c.Seq)
	case c.Decision != 0:
		return fmt.Sprintf("decision @%d on %s", c.Decision, c.Command)
	}
	return c.Command.String()
}

// isAction reports whether an input command carries a consistent
// real-time event (eat, pick up, attack): under the event protocol those
// are the authority's to decide.
func isAction(c game.Command) bool {
	return c.Op == game.CommandInput && (c.Input.Eat || c.Input.PickUp || c.Input.Fight)
}

// Owner says which mirror is a player's ingress: the only mirror whose
// commands for that player the world takes.
type Owner struct {
	Player game.PlayerID
	Mirror uint32
}

// Refusal counters the state keeps (in State.Refused's order).
const (
	// RefusedNotIngress: a command for a player from a mirror that is not
	// the player's ingress.
	RefusedNotIngress = iota
	// RefusedRelease: a release from a mirror that is not the authority.
	RefusedRelease
	refusalKinds
)

// Departures: a state remembers who left in its last keepDepartedSeconds
// (at most maxDeparted of them, the oldest forgotten first) with the
// character it had for them at the tick before the leave. It is part of
// what is hashed, so a checkpoint on which the authority and a mirror
// agree confirms the character the mirror saves; the time covers the
// hash exchange and a resync, after which the mirror reads it from the
// authority's state. The bound keeps a mass leave from growing the state.
const (
	keepDepartedSeconds = 10
	maxDeparted         = 256
)

// Departure is a player who left lately, and the character the state had
// for them at the tick before the leave (a leave from the player's
// ingress, or a release).
type Departure struct {
	Player    game.PlayerID
	Tick      uint64 // the leave's tick
	Character game.Character
}

// recentTicks is how many ticks of strict events a state remembers for
// egress: the leading state's are shown tentatively, the last state's
// confirm them.
const recentTicks = 64

type tickEvents struct {
	tick   uint64
	events []game.Event
}

// State is what every mirror's synchronizer keeps several copies of: the
// world plus the ingress table. Advance applies the trust rule of mirror
// commands deterministically, so every mirror takes and refuses the same
// commands: a join makes its sender the player's ingress (a player who
// reconnects through another mirror moves there); inputs, respawns and
// leaves count only from the player's ingress; a release, only from the
// authority, takes out every player still on the released mirror.
//
// A state also remembers its recent departures (Departed), hashed with the
// rest.
//
// Besides what it hashes, a state remembers the strict events of its
// recent ticks and its refusal counts; both move with CopyFrom, so after a
// rollback they are the trailing state's.
type State struct {
	world     *game.World
	authority uint32
	owners    []Owner     // sorted by player
	departed  []Departure // in the order they left
	refused   [refusalKinds]uint64
	recent    [recentTicks]tickEvents
	scratch   []game.Command
	// Event protocol: ev is this state's role in its synchronizer (nil
	// under the command protocol); ran the actions it executed lately.
	// Neither is hashed; ev is not copied either (it belongs to the lane).
	ev     *eventLane
	ran    []ranAction
	merged map[game.PlayerID]int
}

// The mirror's State satisfies the synchronizer's interface.
var _ tss.State[*State, Command, game.TickRecord] = (*State)(nil)

// NewState wraps a world; authority is the ID of the mirror whose releases
// the state accepts.
func NewState(w *game.World, authority uint32) *State {
	return &State{world: w, authority: authority}
}

// World is the state's world. Callers must not change it.
func (s *State) World() *game.World { return s.world }

// AnyAuthority as a State's authority accepts releases from any mirror: in
// rotate mode the duty moves, and each mirror checks at ingress that a
// release was signed by the mirror holding the duty.
const AnyAuthority = ^uint32(0)

// Authority is the mirror whose releases the state accepts.
func (s *State) Authority() uint32 { return s.authority }

// Tick is the world's tick.
func (s *State) Tick() uint64 { return s.world.Tick() }

// OwnerOf returns the ingress mirror of a player (0 if none).
func (s *State) OwnerOf(p game.PlayerID) uint32 {
	if i, ok := s.findOwner(p); ok {
		return s.owners[i].Mirror
	}
	return 0
}

// Owners returns the ingress table, sorted by player.
func (s *State) Owners() []Owner { return slices.Clone(s.owners) }

// Departed returns the departure of p at tick t, if the state still
// remembers it.
func (s *State) Departed(p game.PlayerID, t uint64) (Departure, bool) {
	for _, d := range s.departed {
		if d.Player == p && d.Tick == t {
			return d, true
		}
	}
	return Departure{}, false
}

// Departures returns the departures the state remembers, oldest first.
func (s *State) Departures() []Departure { return slices.Clone(s.departed) }

// depart remembers that p leaves in the coming tick, with the character it
// has now.
func (s *State) depart(p game.PlayerID) {
	pl, ok := s.world.Player(p)
	if !ok {
		return
	}
	if len(s.departed) >= maxDeparted {
		s.departed = slices.Delete(s.departed, 0, 1)
	}
	s.departed = append(s.departed, Departure{Player: p, Tick: s.world.Tick() + 1, Character: game.CharacterOf(pl)})
}

// forgetDepartures drops the departures older than keepDepartedSeconds.
func (s *State) forgetDepartures() {
	keep := uint64(keepDepartedSeconds * s.world.Config().TickRate)
	now := s.world.Tick()
	n := 0
	for n < len(s.departed) && s.departed[n].Tick+keep <= now {
		n++
	}
	if n > 0 {
		s.departed = slices.Delete(s.departed, 0, n)
	}
}

// Refused returns the state's refusal counters.
func (s *State) Refused() [refusalKinds]uint64 { return s.refused }

// EventsOf returns the strict events the state produced in tick t, if it
// still remembers that tick.
func (s *State) EventsOf(t uint64) ([]game.Event, bool) {
	r := &s.recent[t%recentTicks]
	return r.events, r.tick == t && t != 0
}

func (s *State) findOwner(p game.PlayerID) (int, bool) {
	return slices.BinarySearchFunc(s.owners, p, func(o Owner, p game.PlayerID) int { return cmp.Compare(o.Player, p) })
}

// Advance executes one tick (tss.State).
func (s *State) Advance(cmds []Command) game.TickRecord {
	gc := s.scratch[:0]
	clear(s.merged)
	for _, c := range cmds {
		if c.Release != 0 {
			if s.authority != AnyAuthority && c.Mirror != s.authority {
				s.refused[RefusedRelease]++
				continue
			}
			kept := s.owners[:0]
			for _, o := range s.owners {
				if o.Mirror != c.Release {
					kept = append(kept, o)
					continue
				}
				s.depart(o.Player)
				gc = append(gc, game.Command{Stamp: c.Stamp, Mirror: c.Mirror, Seq: c.Seq, Op: game.CommandLeave, Player: o.Player})
			}
			clear(s.owners[len(kept):])
			s.owners = kept
			continue
		}
		i, owned := s.findOwner(c.Player)
		if c.Op == game.CommandJoin {
			if owned {
				s.owners[i].Mirror = c.Mirror
			} else {
				s.owners = slices.Insert(s.owners, i, Owner{c.Player, c.Mirror})
			}
			gc = append(gc, c.Command)
			continue
		}
		if !owned || s.owners[i].Mirror != c.Mirror {
			s.refused[RefusedNotIngress]++
			continue
		}
		if c.Op == game.CommandLeave {
			s.owners = slices.Delete(s.owners, i, i+1)
			s.depart(c.Player)
		}
		if s.ev != nil && c.Op == game.CommandInput {
			if !s.runs(c) {
				continue
			}
			gc = s.mergeInput(gc, c.Command)
			continue
		}
		gc = append(gc, c.Command)
	}
	rec := s.world.Advance(gc)
	s.forgetDepartures()
	clear(gc)
	s.scratch = gc[:0]
	if rec.Ignored > 0 {
		// A join the world refused leaves an owner without a player.
		s.owners = slices.DeleteFunc(s.owners, func(o Owner) bool {
			_, ok := s.world.Player(o.Player)
			return !ok
		})
	}
	var strict []game.Event
	for _, e := range rec.Events {
		if e.Kind.Strict() {
			strict = append(strict, e)
		}
	}
	s.recent[rec.Tick%recentTicks] = tickEvents{tick: rec.Tick, events: strict}
	return rec
}

// CopyFrom makes s an exact copy of src (tss.State): the world's cheap
// copy plus the small ingress table.
func (s *State) CopyFrom(src *State) {
	if s == src {
		return
	}
	if s.world == nil {
		s.world = src.world.Clone()
	} else {
		s.world.CopyFrom(src.world)
	}
	s.authority = src.authority
	s.owners = append(s.owners[:0], src.owners...)
	s.departed = append(s.departed[:0], src.departed...)
	s.refused = src.refused
	s.recent = src.recent
	s.ran = append(s.ran[:0], src.ran...)
}

// Clone returns an independent copy.
func (s *State) Clone() *State {
	c := &State{}
	c.CopyFrom(s)
	return c
}

// Hash digests the world, the ingress table and the departures (tss.State).
func (s *State) Hash() [32]byte {
	h := sha256.New()
	wh := s.world.Hash()
	b := make([]byte, 0, 64+len(s.owners)*40)
	b = append(b, "overworld/mirror-state/2"...)
	b = append(b, wh[:]...)
	b = binary.BigEndian.AppendUint32(b, s.authority)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.owners)))
	for _, o := range s.owners {
		b = binary.BigEndian.AppendUint16(b, uint16(len(o.Player)))
		b = append(b, o.Player...)
		b = binary.BigEndian.AppendUint32(b, o.Mirror)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.departed)))
	for _, d := range s.departed {
		b = binary.BigEndian.AppendUint16(b, uint16(len(d.Player)))
		b = append(b, d.Player...)
		b = binary.BigEndian.AppendUint64(b, d.Tick)
		c := d.Character
		for _, v := range []int32{c.Pos.X, c.Pos.Y, c.Health, c.Hunger, c.Score, c.Skill} {
			b = binary.BigEndian.AppendUint32(b, uint32(v))
		}
	}
	h.Write(b)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// toProto encodes the state for a transfer or a dump.
func (s *State) toProto() (*mirrorpb.MirrorState, error) {
	w, err := s.world.MarshalBinary()
	if err != nil {
		return nil, err
	}
	m := &mirrorpb.MirrorState{World: w, Authority: s.authority, Refused: s.refused[:]}
	for _, o := range s.owners {
		m.Owners = append(m.Owners, &mirrorpb.Owner{Player: string(o.Player), Mirror: o.Mirror})
	}
	for _, d := range s.departed {
		c := d.Character
		m.Departed = append(m.Departed, &mirrorpb.Departure{Player: string(d.Player), Tick: d.Tick,
			X: c.Pos.X, Y: c.Pos.Y, Health: c.Health, Hunger: c.Hunger, Score: c.Score, Skill: c.Skill})
	}
	return m, nil
}

// MarshalBinary encodes the state (world snapshot and ingress table).
func (s *State) MarshalBinary() ([]byte, error) {
	m, err := s.toProto()
	if err != nil {
		return nil, fmt.Errorf("encode mirror state: %w", err)
	}
	return proto.Marshal(m)
}

// stateFromProto decodes a state whose world must have config cfg.
func stateFromProto(m *mirrorpb.MirrorState, cfg game.Config) (*State, error) {
	if m == nil {
		return nil, errors.New("no state")
	}
	got, err := game.SnapshotConfig(m.World)
	if err != nil {
		return nil, err
	}
	if got != cfg {
		return nil, fmt.Errorf("world config %+v, this mirror runs %+v", got, cfg)
	}
	w, err := game.UnmarshalWorld(m.World)
	if err != nil {
		return nil, err
	}
	if m.Authority == 0 {
		return nil, errors.New("no authority")
	}
	if len(m.Refused) > refusalKinds {
		return nil, fmt.Errorf("%d refusal counters, want at most %d", len(m.Refused), refusalKinds)
	}
	s := &State{world: w, authority: m.Authority}
	copy(s.refused[:], m.Refused)
	if len(m.Owners) > game.MaxSnapshotPlayers {
		return nil, fmt.Errorf("%d owners", len(m.Owners))
	}
	for i, o := range m.Owners {
		p := game.PlayerID(o.GetPlayer())
		if _, ok := w.Player(p); !ok {
			return nil, fmt.Errorf("owner %d: player %q not in the world", i, p)
		}
		if o.GetMirror() == 0 {
			return nil, fmt.Errorf("owner %d: player %q on mirror 0", i, p)
		}
		if i > 0 && p <= s.owners[i-1].Player {
			return nil, fmt.Errorf("owner %d: %q not after %q", i, p, s.owners[i-1].Player)
		}
		s.owners = append(s.owners, Owner{p, o.GetMirror()})
	}
	if len(m.Departed) > maxDeparted {
		return nil, fmt.Errorf("%d departures, want at most %d", len(m.Departed), maxDeparted)
	}
	keep := uint64(keepDepartedSeconds * cfg.TickRate)
	for i, d := range m.Departed {
		p := game.PlayerID(d.GetPlayer())
		switch {
		case p == "" || len(p) > game.MaxPlayerIDLen:
			return nil, fmt.Errorf("departure %d: player ID of %d bytes", i, len(p))
		case d.GetTick() == 0 || d.GetTick() > w.Tick() || d.GetTick()+keep <= w.Tick():
			return nil, fmt.Errorf("departure %d: tick %d, the state is at %d", i, d.GetTick(), w.Tick())
		case i > 0 && d.GetTick() < s.departed[i-1].Tick:
			return nil, fmt.Errorf("departure %d: tick %d before %d", i, d.GetTick(), s.departed[i-1].Tick)
		}
		s.departed = append(s.departed, Departure{Player: p, Tick: d.GetTick(), Character: game.Character{
			Pos: game.Vec{X: d.GetX(), Y: d.GetY()}, Health: d.GetHealth(), Hunger: d.GetHunger(), Score: d.GetScore(), Skill: d.GetSkill()}})
	}
	return s, nil
}

// UnmarshalState decodes a state encoded by MarshalBinary whose world must
// have config cfg.
func UnmarshalState(b []byte, cfg game.Config) (*State, error) {
	if len(b) > game.MaxSnapshotSize+1<<20 {
		return nil, fmt.Errorf("decode mirror state: %d bytes", len(b))
	}
	var m mirrorpb.MirrorState
	if err := proto.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode mirror state: %w", err)
	}
	s, err := stateFromProto(&m, cfg)
	if err != nil {
		return nil, fmt.Errorf("decode mirror state: %w", err)
	}
	return s, nil
}
