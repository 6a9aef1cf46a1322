package game

import "fmt"

// TickRecord is what one execution of one tick produced: the tick, its
// events in the order they happened, and every player's position after it.
// Trailing state synchronization compares the records two states made of
// the same tick (Diverges) to find out whether they disagree.
type TickRecord struct {
	Tick   uint64
	Events []Event
	// Positions lists every player in the world after the tick, sorted by
	// ID: the weakly consistent values.
	Positions []PlayerPosition
	// Ignored counts the tick's commands that could not apply (see
	// Advance). It follows from the commands and the state, so it is not
	// compared.
	Ignored uint32
}

// PlayerPosition is one player's position after a tick.
type PlayerPosition struct {
	Player PlayerID
	Pos    Vec
}

// Diverges compares two records of the same tick. Strictly consistent
// events (EventKind.Strict) must be identical and in the same order; the
// roster must be the same; each player's position may differ by at most
// weakMargin units on each axis (0 or less: exact). Weakly consistent
// events (region changes) are not compared: they follow from positions.
// It names the first difference.
func (r TickRecord) Diverges(other TickRecord, weakMargin int64) (why string, diverged bool) {
	if r.Tick != other.Tick {
		return fmt.Sprintf("records of ticks %d and %d", r.Tick, other.Tick), true
	}
	a, b := 0, 0
	for n := 0; ; n++ {
		for a < len(r.Events) && !r.Events[a].Kind.Strict() {
			a++
		}
		for b < len(other.Events) && !other.Events[b].Kind.Strict() {
			b++
		}
		switch {
		case a == len(r.Events) && b == len(other.Events):
		case a == len(r.Events):
			return fmt.Sprintf("tick %d: strict event %d only in the other record: %s", r.Tick, n, describeEvent(other.Events[b])), true
		case b == len(other.Events):
			return fmt.Sprintf("tick %d: strict event %d only in this record: %s", r.Tick, n, describeEvent(r.Events[a])), true
		case r.Events[a] != other.Events[b]:
			return fmt.Sprintf("tick %d: strict event %d differs: %s vs %s", r.Tick, n, describeEvent(r.Events[a]), describeEvent(other.Events[b])), true
		default:
			a, b = a+1, b+1
			continue
		}
		break
	}
	margin := max(weakMargin, 0)
	i, j := 0, 0
	for i < len(r.Positions) || j < len(other.Positions) {
		switch {
		case j == len(other.Positions) || i < len(r.Positions) && r.Positions[i].Player < other.Positions[j].Player:
			return fmt.Sprintf("tick %d: player %s only in this record", r.Tick, r.Positions[i].Player), true
		case i == len(r.Positions) || other.Positions[j].Player < r.Positions[i].Player:
			return fmt.Sprintf("tick %d: player %s only in the other record", r.Tick, other.Positions[j].Player), true
		}
		p, q := r.Positions[i].Pos, other.Positions[j].Pos
		if abs64(int64(p.X)-int64(q.X)) > margin || abs64(int64(p.Y)-int64(q.Y)) > margin {
			return fmt.Sprintf("tick %d: player %s at (%d,%d) vs (%d,%d), beyond the margin of %d", r.Tick, r.Positions[i].Player, p.X, p.Y, q.X, q.Y, margin), true
		}
		i, j = i+1, j+1
	}
	return "", false
}

func describeEvent(e Event) string {
	s := fmt.Sprintf("%s@%d %s", e.Kind, e.Tick, e.Player)
	if e.Other != "" {
		s += " other=" + string(e.Other)
	}
	switch e.Kind {
	case EventAte, EventPickedUp, EventObjectRestored:
		s += fmt.Sprintf(" object=%s amount=%d", e.Object, e.Amount)
	case EventHit:
		s += fmt.Sprintf(" amount=%d", e.Amount)
	case EventRespawned, EventJoined:
		s += " to=" + e.To.String()
	case EventLeft:
		s += " from=" + e.From.String()
	}
	return s
}

func abs64(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
