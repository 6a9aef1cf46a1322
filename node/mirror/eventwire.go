package mirror

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// Wire forms of the event protocol's messages (peer.proto: Moves,
// Decisions, Consistent) and their bounds.
const (
	// maxMoves bounds the moves of one datagram: the newest and up to
	// seven before it.
	maxMoves = 8
	// maxDecisions bounds the decisions of one message; decisionBytes is
	// how many bytes of them the authority puts in one, so that the signed
	// message fits a CRIMP payload (an action is at most
	// game.MaxCommandWireSize bytes).
	maxDecisions  = 64
	decisionBytes = 1000
	// eventsPerPart is how many events one Consistent carries; maxParts
	// bounds the parts of one tick.
	eventsPerPart = 8
	maxParts      = 64
)

func validID(id string, emptyOK bool) bool {
	if id == "" {
		return emptyOK
	}
	return len(id) <= game.MaxPlayerIDLen && utf8.ValidString(id)
}

// movesFromProto decodes a Moves message into input commands; their
// Mirror is the CRIMP sender's, which the caller sets.
func movesFromProto(m *mirrorpb.Moves) ([]Command, error) {
	if m == nil || !validID(m.Player, false) {
		return nil, errors.New("moves without a valid player")
	}
	if len(m.Moves) == 0 || len(m.Moves) > maxMoves {
		return nil, fmt.Errorf("%d moves, need 1..%d", len(m.Moves), maxMoves)
	}
	p := game.PlayerID(m.Player)
	out := make([]Command, 0, len(m.Moves))
	var stamp int64
	var seq uint64
	for i, mv := range m.Moves {
		if mv == nil {
			return nil, fmt.Errorf("move %d empty", i)
		}
		if i == 0 {
			stamp, seq = mv.Stamp, mv.Seq
		} else {
			// Older than the one before: the differences.
			if mv.Stamp < 0 || mv.Seq == 0 || mv.Seq >= seq {
				return nil, fmt.Errorf("move %d: %d ns and %d numbers before the one before it", i, mv.Stamp, mv.Seq)
			}
			stamp, seq = stamp-mv.Stamp, seq-mv.Seq
		}
		switch {
		case stamp <= 0 || seq == 0 || seq >= maxCommandSeq:
			return nil, fmt.Errorf("move %d: stamp %d seq %d", i, stamp, seq)
		case mv.X < -127 || mv.X > 127 || mv.Y < -127 || mv.Y > 127:
			return nil, fmt.Errorf("move %d: (%d,%d) outside -127..127", i, mv.X, mv.Y)
		}
		c := Command{Command: game.Command{Stamp: stamp, Seq: seq, Op: game.CommandInput, Player: p,
			Input: game.Input{Player: p, MoveX: int8(mv.X), MoveY: int8(mv.Y)}}}
		out = append(out, c)
	}
	return out, nil
}

// movesMessage is the datagram of a player's newest moves (newest first,
// each older one by its differences to the one before).
func movesMessage(player game.PlayerID, moves []Command) *mirrorpb.PeerMessage {
	m := &mirrorpb.Moves{Player: string(player)}
	for i, c := range moves {
		mv := &mirrorpb.Move{Stamp: c.Stamp, Seq: c.Seq, X: int32(c.Input.MoveX), Y: int32(c.Input.MoveY)}
		if i > 0 {
			mv.Stamp, mv.Seq = moves[i-1].Stamp-c.Stamp, moves[i-1].Seq-c.Seq
		}
		m.Moves = append(m.Moves, mv)
	}
	return &mirrorpb.PeerMessage{Body: &mirrorpb.PeerMessage_Moves{Moves: m}}
}

// decisionsFromProto decodes the authority's decisions: each an action
// (an input with an action and no move, numbered below maxCommandSeq) and
// a stamp no earlier than the action's.
func decisionsFromProto(m *mirrorpb.Decisions) ([]Command, error) {
	if m == nil || len(m.Decisions) == 0 || len(m.Decisions) > maxDecisions {
		return nil, fmt.Errorf("decisions message with %d decisions, need 1..%d", len(m.GetDecisions()), maxDecisions)
	}
	out := make([]Command, 0, len(m.Decisions))
	for i, d := range m.Decisions {
		if d == nil {
			return nil, fmt.Errorf("decision %d empty", i)
		}
		gc, err := game.UnmarshalCommand(d.Action)
		if err != nil {
			return nil, fmt.Errorf("decision %d: %w", i, err)
		}
		switch {
		case !isAction(gc) || gc.Input.MoveX != 0 || gc.Input.MoveY != 0:
			return nil, fmt.Errorf("decision %d on %s: not an action", i, gc)
		case gc.Mirror == 0 || gc.Seq == 0 || gc.Seq >= maxCommandSeq:
			return nil, fmt.Errorf("decision %d on %s: bad key", i, gc)
		case d.At < gc.Stamp || gc.Stamp <= 0:
			return nil, fmt.Errorf("decision %d puts %s at %d, before its stamp", i, gc, d.At)
		}
		out = append(out, Command{Command: gc, Decision: d.At})
	}
	return out, nil
}

// decisionsMessage encodes decisions.
func decisionsMessage(ds []Command) (*mirrorpb.PeerMessage, error) {
	m := &mirrorpb.Decisions{}
	for _, d := range ds {
		b, err := d.Command.MarshalBinary()
		if err != nil {
			return nil, err
		}
		m.Decisions = append(m.Decisions, &mirrorpb.Decision{Action: b, At: d.Decision})
	}
	return &mirrorpb.PeerMessage{Body: &mirrorpb.PeerMessage_Decisions{Decisions: m}}, nil
}

// consistentPart is one decoded Consistent message.
type consistentPart struct {
	tick        uint64
	part, parts uint32
	events      []game.Event
}

func consistentFromProto(m *mirrorpb.Consistent) (*consistentPart, error) {
	switch {
	case m == nil || m.Tick == 0:
		return nil, errors.New("consistent events without a tick")
	case m.Parts == 0 || m.Parts > maxParts || m.Part >= m.Parts:
		return nil, fmt.Errorf("consistent events part %d of %d", m.Part, m.Parts)
	case len(m.Events) == 0 || len(m.Events) > eventsPerPart:
		return nil, fmt.Errorf("consistent events part with %d events, need 1..%d", len(m.Events), eventsPerPart)
	}
	out := &consistentPart{tick: m.Tick, part: m.Part, parts: m.Parts}
	for i, e := range m.Events {
		if e == nil || e.Kind == 0 || e.Kind > uint32(game.EventLeft) || !game.EventKind(e.Kind).Strict() {
			return nil, fmt.Errorf("consistent event %d: kind %d", i, e.GetKind())
		}
		if !validID(e.Player, true) || !validID(e.Other, true) || e.Slot > 0xffff {
			return nil, fmt.Errorf("consistent event %d: bad player or object", i)
		}
		for _, v := range []int32{e.RegionX, e.RegionY, e.FromX, e.FromY, e.ToX, e.ToY} {
			if v < 0 || v >= game.MaxRegions {
				return nil, fmt.Errorf("consistent event %d: region coordinate %d", i, v)
			}
		}
		out.events = append(out.events, game.Event{
			Tick: m.Tick, Kind: game.EventKind(e.Kind), Player: game.PlayerID(e.Player), Other: game.PlayerID(e.Other),
			Object: game.ObjectID{Region: game.RegionCoord{X: int(e.RegionX), Y: int(e.RegionY)}, Slot: uint16(e.Slot)},
			Amount: e.Amount,
			From:   game.RegionCoord{X: int(e.FromX), Y: int(e.FromY)}, To: game.RegionCoord{X: int(e.ToX), Y: int(e.ToY)},
		})
	}
	return out, nil
}

// consistentMessages splits one tick's events into parts.
func consistentMessages(tick uint64, events []game.Event) []*mirrorpb.PeerMessage {
	parts := (len(events) + eventsPerPart - 1) / eventsPerPart
	if parts > maxParts {
		parts = maxParts // more than 512 events in a tick: the log keeps the first
		events = events[:parts*eventsPerPart]
	}
	var out []*mirrorpb.PeerMessage
	for p := range parts {
		m := &mirrorpb.Consistent{Tick: tick, Part: uint32(p), Parts: uint32(parts)}
		for _, e := range events[p*eventsPerPart : min((p+1)*eventsPerPart, len(events))] {
			m.Events = append(m.Events, &mirrorpb.Event{
				Kind: uint32(e.Kind), Player: string(e.Player), Other: string(e.Other),
				RegionX: int32(e.Object.Region.X), RegionY: int32(e.Object.Region.Y), Slot: uint32(e.Object.Slot), Amount: e.Amount,
				FromX: int32(e.From.X), FromY: int32(e.From.Y), ToX: int32(e.To.X), ToY: int32(e.To.Y),
			})
		}
		out = append(out, &mirrorpb.PeerMessage{Body: &mirrorpb.PeerMessage_Consistent{Consistent: m}})
	}
	return out
}
