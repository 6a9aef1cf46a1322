package play

import (
	"bufio"
	"context"
	"io"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play/playpb"
)

// The fight protocol (FightProtocol, see fight.go) in pieces, for drivers
// of a player other than Peer — the simulator's bots keep their own state
// and position but speak the same protocol with the same messages,
// validation and outcome rules:
//
//	attacker: NewAttack -> SendAttack -> SettleAttack
//	defender: ReadAttack -> (own admission checks) -> DefendAttack -> WriteOutcome
//
// Both sides pass the other's state as they last saw it (a player's card;
// a driver without cards assumes what game/play assumes of a player whose
// card has not arrived) and their own as they last published it.

// NewAttack is the attacker's opening message for the fight numbered
// counter: its own state as its last card published it, the defender's as
// its card last said, and the outcome it computes from both.
func NewAttack(attacker, defender game.PlayerID, counter uint64, me, seen game.Fighter) *playpb.Attack {
	return newAttackWith(game.FightOutcome, attacker, defender, counter, me, seen)
}

// fightRule computes one attack; game.FightOutcome is the rule. Tests
// give a peer another one to play a peer whose outcomes differ.
type fightRule func(attacker, defender game.PlayerID, counter uint64, a, d game.Fighter) game.FightResult

func newAttackWith(rule fightRule, attacker, defender game.PlayerID, counter uint64, me, seen game.Fighter) *playpb.Attack {
	guess := rule(attacker, defender, counter, me, seen)
	return &playpb.Attack{Counter: counter, Attacker: fighterOf(me), DefenderSeen: fighterOf(seen), Result: resultOf(guess)}
}

// SendAttack opens a FightProtocol stream to the defender, sends a and
// returns its validated outcome.
func SendAttack(ctx context.Context, h host.Host, to peer.ID, a *playpb.Attack) (*playpb.Outcome, error) {
	s, err := h.NewStream(network.WithAllowLimitedConn(ctx, "fight"), to, protocol.ID(FightProtocol)) // two small messages: fits a relay
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	if err := writeFrame(s, a, MaxFightMessageBytes); err != nil {
		s.Reset()
		return nil, err
	}
	_ = s.CloseWrite()
	b, err := readFrame(bufio.NewReader(s), MaxFightMessageBytes)
	if err != nil {
		s.Reset()
		return nil, err
	}
	return DecodeOutcome(b)
}

// SettleAttack is the attacker's reading of an accepted outcome: its own
// computation, from its own public state (me) and the defender's as it
// last saw it (seen) — never the state the defender declares in the
// answer — beside the defender's. When the defender used the same two
// states the results must agree (else Mismatch); when it did not, one of
// the cards was in flight (Stale) and nothing is compared. The attacker
// applies rec.Mine.AttackerDamage to itself.
func SettleAttack(attacker, defender game.PlayerID, counter uint64, me, seen game.Fighter, out *playpb.Outcome) FightRecord {
	return settleWith(game.FightOutcome, attacker, defender, counter, me, seen, out)
}

func settleWith(rule fightRule, attacker, defender game.PlayerID, counter uint64, me, seen game.Fighter, out *playpb.Outcome) FightRecord {
	rec := FightRecord{Attacker: attacker, Defender: defender, Counter: counter}
	rec.Mine = rule(attacker, defender, counter, me, seen)
	rec.Theirs = resultFrom(out.Result)
	rec.Stale = !proto.Equal(out.AttackerSeen, fighterOf(me)) || !proto.Equal(out.Defender, fighterOf(seen))
	rec.Mismatch = out.Mismatch || (!rec.Stale && rec.Mine != rec.Theirs)
	rec.DefenderDied = out.DefenderDied
	return rec
}

// ReadAttack reads and validates the attack that opens a fight stream.
func ReadAttack(r io.Reader) (*playpb.Attack, error) {
	b, err := readFrame(bufio.NewReader(r), MaxFightMessageBytes)
	if err != nil {
		return nil, err
	}
	return DecodeAttack(b)
}

// DefendAttack computes the defender's answer to an attack it admitted:
// the outcome from the attacker's state as the defender last saw it
// (attackerSeen, from the attacker's card — never the state the attack
// declares) and its own public state (mine). When the attack declares the
// same two states, the attacker's result must equal the defender's (else
// Mismatch); otherwise the sides saw different cards (Stale) and nothing
// is compared. The caller applies rec.Mine.DefenderDamage to its player
// and sets DefenderDied in the outcome if the blow was fatal.
func DefendAttack(attacker, defender game.PlayerID, a *playpb.Attack, attackerSeen, mine game.Fighter) (*playpb.Outcome, FightRecord) {
	return defendWith(game.FightOutcome, attacker, defender, a, attackerSeen, mine)
}

func defendWith(rule fightRule, attacker, defender game.PlayerID, a *playpb.Attack, attackerSeen, mine game.Fighter) (*playpb.Outcome, FightRecord) {
	rec := FightRecord{Attacker: attacker, Defender: defender, Counter: a.Counter}
	rec.Mine = rule(attacker, defender, a.Counter, attackerSeen, mine)
	rec.Theirs = resultFrom(a.Result)
	rec.Stale = !proto.Equal(a.Attacker, fighterOf(attackerSeen)) || !proto.Equal(a.DefenderSeen, fighterOf(mine))
	rec.Mismatch = !rec.Stale && rec.Mine != rec.Theirs
	return &playpb.Outcome{
		Accepted: true, Defender: fighterOf(mine), AttackerSeen: fighterOf(attackerSeen),
		Result: resultOf(rec.Mine), Mismatch: rec.Mismatch,
	}, rec
}

// RefuseAttack is the outcome of an attack the defender did not admit.
func RefuseAttack(why string) *playpb.Outcome { return &playpb.Outcome{Refusal: why} }

// WriteOutcome writes the defender's answer on the fight stream.
func WriteOutcome(w io.Writer, o *playpb.Outcome) error {
	return writeFrame(w, o, MaxFightMessageBytes)
}
