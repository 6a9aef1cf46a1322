package mirror

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/tss"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// The event protocol (Cronin et al. 2001, §3.3.4; MIRROR_MODE.md §2),
// which the paper proposed and never built. The ingress mirror turns a
// client's input into events of three classes:
//
//   - Real-time events (moves): multicast unreliably to every mirror, the
//     authority included (a CRIMP datagram carrying the player's newest
//     move and up to MoveRedundancy before it, so one lost datagram costs
//     nothing), and run by every state at their stamp's tick, with no
//     consistency check of their own.
//   - Consistent real-time events (eat, pick up, attack: actions): run at
//     once, optimistically, by every mirror's guessing states (the ingress
//     first), and sent reliably over CRIMP, so the authority gets them. The
//     authority decides each in canonical order: in its own tick if it
//     arrives within DecideWithin of that tick, else in the tick it
//     arrives in (a stand-in stamped at arrival; a new holder of a
//     rotating authority first waits one CRIMP history, in case its
//     predecessor decided them). It multicasts its decisions reliably,
//     signed. Every mirror's last state runs actions only as decided; a
//     guessing state whose guess differs is rolled back by TSS, and a
//     guess the decision moved to another tick is taken back by resetting
//     every state to the last one (tss.Synchronizer.Reset).
//   - Consistent events (damage, death, respawn, regrowth, and the outcome
//     of every decided action): the authority's last state generates the
//     authoritative ones and multicasts them reliably, signed, tick by
//     tick; every mirror keeps them as its log of authoritative events.
//     The mirrors' own states run the same rules (game/, written once),
//     so each predicts them; the state hash exchange (hashcheck.go) finds a
//     mirror whose last state differs from the authority's (after moves
//     lost beyond the redundancy) and installs the authority's state.
//
// Joins, leaves, respawn requests and releases stay commands, sent
// reliably, as in the command protocol. Trust: decisions and consistent
// events count only with the signature of the mirror holding the
// authority (the fixed authority's key, or in rotate mode the key CRIMP
// bound to the holder); a move or an action counts only for a player whose
// ingress is its sender (State's ingress table).

// Protocol is how the mirrors of a group keep one world.
type Protocol uint8

// Protocols.
const (
	// ProtocolCommand: every input goes reliably to every mirror, which
	// all run it (the paper's command-based protocol, §3.3.3).
	ProtocolCommand Protocol = iota
	// ProtocolEvent: the event-based protocol (§3.3.4, this file).
	ProtocolEvent
)

func (p Protocol) String() string {
	switch p {
	case ProtocolCommand:
		return "command"
	case ProtocolEvent:
		return "event"
	}
	return fmt.Sprintf("protocol(%d)", uint8(p))
}

// ParseProtocol reads "command" or "event".
func ParseProtocol(s string) (Protocol, error) {
	switch s {
	case "command":
		return ProtocolCommand, nil
	case "event":
		return ProtocolEvent, nil
	}
	return 0, fmt.Errorf("protocol %q: want command or event", s)
}

// Bounds of the event protocol's tables.
const (
	maxTrackedActions = 1 << 14
	maxLogTicks       = 1 << 14
	maxLogDecisions   = 1 << 16
)

// eventState is a mirror's side of the event protocol (under its lock).
type eventState struct {
	decided decisionTable
	// actions are the actions this mirror knows and no decision it heard
	// covers yet; the holder decides them.
	actions map[actionKey]trackedAction
	// decideFrom: a new holder decides nothing before (one history after
	// it took the duty over); holder is the last holder this mirror heard
	// of.
	decideFrom time.Time
	holder     crimp.MemberID
	// moves are the newest moves of this mirror's own players (newest
	// first), repeated in each move datagram.
	moves map[game.PlayerID][]Command
	// out are the decisions this mirror (the holder) took and has not
	// multicast yet.
	out []Command
	// emitted is the last tick of the authority's last state whose
	// consistent events went out.
	emitted uint64
	log     eventLog
}

type trackedAction struct {
	cmd  Command
	seen time.Time
}

// event reports whether the mirror runs the event protocol.
func (s *Server) event() bool { return s.cfg.Protocol == ProtocolEvent }

// newState allocates a state for the synchronizer; under the event
// protocol it is a guessing lane (startSync makes the last one confirm).
func (s *Server) newState() *State {
	if !s.event() {
		return &State{}
	}
	return &State{ev: &eventLane{decided: &s.ev.decided}}
}

// eventInput is sendInput under the event protocol: the move goes into
// this mirror's synchronizer and out unreliably, the action (if any) into
// its synchronizer (a guess) and reliably to the authority.
func (s *Server) eventInput(sess *session, in *mirrorpb.Input, now time.Time) {
	g := gameInput(in, sess.player)
	move := Command{Command: s.stamp(now)}
	move.Op, move.Player = game.CommandInput, sess.player
	move.Input = game.Input{Player: sess.player, MoveX: g.MoveX, MoveY: g.MoveY}
	s.tickTo(now)
	if v := s.sync.Deliver(move, now.UnixNano()); v != tss.Accepted {
		s.log.Warn("own move refused by the synchronizer", "cmd", move, "verdict", v)
		s.countVerdict(v)
	}
	hist := append([]Command{move}, s.ev.moves[sess.player]...)
	hist = hist[:min(len(hist), 1+max(s.cfg.MoveRedundancy, 0))]
	s.ev.moves[sess.player] = hist
	s.sendUnreliable(s.outgoing(movesMessage(sess.player, hist)))
	s.m.ev.movesSent.Add(1)
	if !isAction(game.Command{Op: game.CommandInput, Input: g}) {
		return
	}
	act := Command{Command: s.stamp(now)}
	act.Op, act.Player = game.CommandInput, sess.player
	act.Input = game.Input{Player: sess.player, Eat: g.Eat, PickUp: g.PickUp, Fight: g.Fight}
	if g.Fight {
		act.Input.Target = g.Target
	}
	s.issue(act, now)
	s.m.ev.actionsSent.Add(1)
	s.trackAction(act, now)
}

// sendUnreliable multicasts a datagram once the lock is released.
func (s *Server) sendUnreliable(payload []byte) {
	s.post = append(s.post, func() {
		if err := s.member.SendUnreliable(payload); err != nil && err != crimp.ErrNotMember {
			s.log.Debug("crimp datagram not sent", "err", err)
		}
	})
}

// deliverMoves files the moves of a datagram from mirror src (lock held).
// Copies of moves already filed are the redundancy working, not refusals.
func (s *Server) deliverMoves(src crimp.MemberID, moves []Command) {
	now := s.clock.Now()
	for _, c := range moves {
		c.Mirror = uint32(src)
		if s.sync == nil {
			if len(s.buffered) >= maxBuffered {
				s.m.refuse(refusedBuffer)
				continue
			}
			s.buffered = append(s.buffered, c)
			continue
		}
		if s.sync.Config().TickOf(c.Stamp) <= s.base {
			continue
		}
		s.tickTo(now)
		switch v := s.sync.Deliver(c, now.UnixNano()); v {
		case tss.Accepted:
			s.m.ev.movesTaken.Add(1)
		case tss.Duplicate:
			s.m.ev.movesRedundant.Add(1)
		case tss.TooLate:
			s.m.ev.movesLate.Add(1)
		default:
			s.countVerdict(v)
		}
	}
}

// trackAction notes an action this mirror filed (its own or a peer's);
// the holder decides it.
func (s *Server) trackAction(c Command, now time.Time) {
	key := actionKey{c.Mirror, c.Seq}
	if _, ok := s.ev.decided.tickOf(key); ok || s.sync == nil || s.sync.Config().TickOf(c.Stamp) <= s.base {
		return
	}
	if _, ok := s.ev.actions[key]; ok {
		return
	}
	if len(s.ev.actions) >= maxTrackedActions {
		s.m.refuse(refusedActionOverflow)
		return
	}
	s.ev.actions[key] = trackedAction{cmd: c, seen: now}
	if s.isHolder() && !now.Before(s.ev.decideFrom) {
		s.decide(key, now)
	}
}

// decide is the authority's decision on a tracked action: in its own tick
// if there is time for the decision to reach every mirror before its last
// state runs that tick, else in the tick it arrived in.
func (s *Server) decide(key actionKey, now time.Time) {
	a, ok := s.ev.actions[key]
	if !ok {
		return
	}
	cfg := s.sync.Config()
	at := a.cmd.Stamp
	tick := cfg.TickOf(at)
	// Within the group's last delay: the decision must reach every mirror
	// before its last state runs the tick.
	within := min(s.cfg.DecideWithin, cfg.Delays[len(cfg.Delays)-1])
	deadline := cfg.Epoch + int64(tick)*int64(cfg.TickPeriod) + int64(within)
	late := a.seen.UnixNano() > deadline || now.UnixNano() > deadline || tick <= s.sync.Last().Tick()
	if late {
		// Late: a stand-in stamped now, in this tick, in canonical order
		// with the others decided in it.
		at = max(now.UnixNano(), at)
		s.m.ev.decidedLate.Add(1)
	}
	s.m.ev.decided.Add(1)
	s.log.Debug("decided an action", "ingress", key.mirror, "seq", key.seq, "tick", cfg.TickOf(at), "late", late)
	d := Command{Command: a.cmd.Command, Decision: at}
	s.ev.out = append(s.ev.out, d)
	s.applyDecision(d, now)
}

// applyDecision takes a decision (the holder's own, or received signed
// from it): the action leaves the undecided ones, guessing states will run
// it only in its decided tick (a guess run in another is taken back), and
// the decision goes into the synchronizer, where the last state runs it.
func (s *Server) applyDecision(d Command, now time.Time) {
	key := actionKey{d.Mirror, d.Seq}
	delete(s.ev.actions, key)
	if s.sync == nil {
		if len(s.buffered) < maxBuffered {
			s.buffered = append(s.buffered, d)
		}
		return
	}
	cfg := s.sync.Config()
	td := cfg.TickOf(d.Decision)
	if td <= s.base {
		return // our state holds it already
	}
	if _, ok := s.ev.decided.tickOf(key); ok {
		return
	}
	s.ev.decided.set(key, td)
	s.ev.log.addDecision(key, td)
	s.m.ev.applied.Add(1)
	s.m.ev.decisionDelaySum.Add(now.UnixNano() - d.Stamp)
	s.m.ev.decisionDelayCount.Add(1)
	s.tickTo(now)
	if td != cfg.TickOf(d.Stamp) {
		s.m.ev.appliedLate.Add(1)
	}
	if td != cfg.TickOf(d.Stamp) && s.guessedElsewhere(key, td) {
		if err := s.sync.Reset(s.sync.Last().Clone()); err != nil {
			s.log.Warn("taking back a guess the authority moved failed", "action", d.Command, "err", err)
		} else {
			s.m.ev.reconciled.Add(1)
		}
	}
	s.deliver(d, now)
}

// guessedElsewhere reports whether a guessing state ran the action in
// another tick than the decided one.
func (s *Server) guessedElsewhere(key actionKey, td uint64) bool {
	for i := range s.sync.States() - 1 {
		if t, ok := s.sync.State(i).ranAt(key); ok && t != td {
			return true
		}
	}
	return false
}

// flushDecisions multicasts the holder's new decisions, signed, in
// messages that fit a CRIMP payload (lock held).
func (s *Server) flushDecisions() {
	out := s.ev.out
	s.ev.out = nil
	for len(out) > 0 {
		n, size := 0, 0
		for n < len(out) && n < maxDecisions {
			b, err := out[n].Command.MarshalBinary()
			if err != nil {
				s.log.Error("cannot encode a decision", "decision", out[n], "err", err)
				return
			}
			if n > 0 && size+len(b)+16 > decisionBytes {
				break
			}
			size += len(b) + 16
			n++
		}
		pm, err := decisionsMessage(out[:n])
		if err != nil {
			s.log.Error("cannot encode decisions", "err", err)
			return
		}
		s.send(signedPeerMessage(s.signingKey(), pm))
		out = out[n:]
	}
}

// takeDecisions applies the holder's signed decisions (lock held).
func (s *Server) takeDecisions(ds []Command) {
	now := s.clock.Now()
	for _, d := range ds {
		s.applyDecision(d, now)
	}
}

// takeConsistent logs one part of the authority's consistent events.
func (s *Server) takeConsistent(p *consistentPart) {
	s.ev.log.addPart(p)
	s.m.ev.authoritative.Add(uint64(len(p.events)))
}

// onDuty notes a move of the rotating authority: a mirror that takes the
// duty over from another decides nothing for one CRIMP history, in case
// its predecessor decided what it still holds undecided; and it multicasts
// consistent events from its own present on.
func (s *Server) onDuty(holder crimp.MemberID, now time.Time) {
	prev := s.ev.holder
	s.ev.holder = holder
	if holder == s.id && prev != 0 && prev != s.id {
		s.ev.decideFrom = now.Add(s.cfg.CRIMP.History)
		if s.sync != nil {
			s.ev.emitted = s.sync.Last().Tick()
		}
		s.log.Info("took the authority over: deciding from one history on", "from", s.ev.decideFrom)
	}
}

// eventTick is the event protocol's per-tick work (lock held): the holder
// decides what it holds undecided once it may, actions no decision reached
// within three histories are given up, and the holder multicasts its last
// state's consistent events.
func (s *Server) eventTick(now time.Time) {
	holder := s.isHolder()
	if holder && !now.Before(s.ev.decideFrom) && len(s.ev.actions) > 0 {
		keys := make([]actionKey, 0, len(s.ev.actions))
		for k := range s.ev.actions {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b actionKey) int {
			return cmp.Or(cmp.Compare(s.ev.actions[a].cmd.Stamp, s.ev.actions[b].cmd.Stamp), cmp.Compare(a.mirror, b.mirror), cmp.Compare(a.seq, b.seq))
		})
		for _, k := range keys {
			s.decide(k, now)
		}
	}
	for k, a := range s.ev.actions {
		if now.Sub(a.seen) > 3*s.cfg.CRIMP.History {
			delete(s.ev.actions, k)
			s.m.ev.undecided.Add(1)
			s.log.Warn("no decision reached this mirror for an action", "action", a.cmd)
		}
	}
	last := s.sync.Last()
	t := last.Tick()
	if !holder {
		s.ev.emitted = t
		return
	}
	from := max(s.ev.emitted+1, t-min(t, recentTicks-1))
	for u := from; u <= t; u++ {
		evs, ok := last.EventsOf(u)
		if !ok || len(evs) == 0 {
			continue
		}
		for _, pm := range consistentMessages(u, evs) {
			s.send(signedPeerMessage(s.signingKey(), pm))
			p, err := consistentFromProto(pm.GetConsistent())
			if err == nil {
				s.takeConsistent(p)
			}
		}
	}
	s.ev.emitted = t
}

// eventSecond is the event protocol's slow upkeep: old decisions and the
// moves of players no longer here are forgotten.
func (s *Server) eventSecond() {
	keep := uint64(4 * s.cfg.CRIMP.History / s.sync.Config().TickPeriod)
	if t := s.sync.Last().Tick(); t > keep {
		s.ev.decided.prune(t - keep)
	}
	for p := range s.ev.moves {
		if s.players[p] == nil {
			delete(s.ev.moves, p)
		}
	}
}

// eventStatus adds the event protocol's counters to the page's status.
func (s *Server) eventStatus(st *mirrorpb.MirrorStatus) {
	if !s.event() {
		return
	}
	e := s.m.ev.stats()
	st.Protocol, st.Decided, st.DecidedLate, st.Undecided, st.Reconciled = "event", e.Applied, e.AppliedLate, e.Undecided, e.Reconciled
}
