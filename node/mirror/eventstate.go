package mirror

import (
	"slices"

	"github.com/overworld-p2p/overworld/game"
)

// What a State does differently under the event protocol (event.go): it
// tells moves from actions (consistent real-time events: eat, pick up,
// attack) and their decisions, runs each action at most once, and merges
// a player's move and actions of one tick into the one input the world
// takes per player.
//
// The states of one synchronizer play two roles. Every state but the last
// guesses: it runs an action at its stamp's tick as soon as it has it, as
// the paper's egress mirror processes a non-authoritative event
// optimistically — unless the authority has decided it for another tick.
// The last state runs actions only as the authority decided them, so it is
// the same on every mirror that got the same moves. When the two differ
// for a tick, the synchronizer's comparison rolls the guessing state back
// (TSS).

// ranKeepTicks is how long a state remembers the actions it ran, in ticks:
// far beyond CRIMP's history, within which an action and its decision
// arrive.
const (
	ranKeepTicks = 1024
	maxRan       = 1 << 12
)

// actionKey names an action: its ingress mirror and sequence number.
type actionKey struct {
	mirror uint32
	seq    uint64
}

// ranAction is an action a state executed, and in which tick.
type ranAction struct {
	key  actionKey
	tick uint64
}

// eventLane is a state's role in its synchronizer: confirming for the last
// state, guessing for the others; decided is the mirror's table of the
// decisions it has heard, shared by its states.
type eventLane struct {
	confirming bool
	decided    *decisionTable
}

// decisionTable maps each decided action to the tick the authority put it
// in. A guessing state does not guess an action decided for another tick.
type decisionTable struct {
	ticks map[actionKey]uint64
}

func (d *decisionTable) tickOf(k actionKey) (uint64, bool) {
	t, ok := d.ticks[k]
	return t, ok
}

func (d *decisionTable) set(k actionKey, t uint64) {
	if d.ticks == nil {
		d.ticks = map[actionKey]uint64{}
	}
	d.ticks[k] = t
}

// prune forgets decisions of ticks before before.
func (d *decisionTable) prune(before uint64) {
	for k, t := range d.ticks {
		if t < before {
			delete(d.ticks, k)
		}
	}
}

// runs reports whether the state executes input command c in the tick it
// is about to run, and notes the actions it executes: a move always; an
// action or a decision at most once; an action (a guess) never in the last
// state, nor where the authority decided it for another tick.
func (s *State) runs(c Command) bool {
	if c.Decision == 0 && !isAction(c.Command) {
		return true
	}
	key := actionKey{c.Mirror, c.Seq}
	t := s.world.Tick() + 1
	if _, ok := s.ranAt(key); ok {
		return false
	}
	if c.Decision == 0 {
		if s.ev.confirming {
			return false
		}
		if td, ok := s.ev.decided.tickOf(key); ok && td != t {
			return false
		}
	}
	s.noteRun(key, t)
	return true
}

// ranAt returns the tick in which the state ran an action, if it did.
func (s *State) ranAt(k actionKey) (uint64, bool) {
	for i := len(s.ran) - 1; i >= 0; i-- {
		if s.ran[i].key == k {
			return s.ran[i].tick, true
		}
	}
	return 0, false
}

func (s *State) noteRun(k actionKey, t uint64) {
	keep := 0
	for keep < len(s.ran) && (s.ran[keep].tick+ranKeepTicks < t || len(s.ran)-keep >= maxRan) {
		keep++
	}
	if keep > 0 {
		s.ran = slices.Delete(s.ran, 0, keep)
	}
	s.ran = append(s.ran, ranAction{k, t})
}

// mergeInput adds input command c to the tick's commands: the first input
// of a player as it is, later ones merged into it (the newest move's
// direction, every action's flags, the last attack's target), so the
// world, which takes one input per player and tick, sees the move and the
// actions together.
func (s *State) mergeInput(gc []game.Command, c game.Command) []game.Command {
	if s.merged == nil {
		s.merged = map[game.PlayerID]int{}
	}
	i, ok := s.merged[c.Player]
	if !ok {
		s.merged[c.Player] = len(gc)
		return append(gc, c)
	}
	m, in := &gc[i].Input, c.Input
	if isAction(c) {
		m.Eat, m.PickUp = m.Eat || in.Eat, m.PickUp || in.PickUp
		if in.Fight {
			m.Fight, m.Target = true, in.Target
		}
	} else {
		m.MoveX, m.MoveY = in.MoveX, in.MoveY
	}
	return gc
}
