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

// NewAttack is the attacker's opening message for the fight numbered
// counter: its own state, the defender's as last seen, and the outcome it
// computes from both.
func NewAttack(attacker, defender game.PlayerID, counter uint64, me, seen game.Fighter) *playpb.Attack {
	guess := game.FightOutcome(attacker, defender, counter, me, seen)
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
// computation with the defender's stated state beside the defender's, and
// whether they disagree.
func SettleAttack(attacker, defender game.PlayerID, counter uint64, me game.Fighter, out *playpb.Outcome) FightRecord {
	rec := FightRecord{Attacker: attacker, Defender: defender, Counter: counter}
	rec.Mine = game.FightOutcome(attacker, defender, counter, me, fighterFrom(out.Defender))
	rec.Theirs = resultFrom(out.Result)
	rec.Mismatch = rec.Mine != rec.Theirs || out.Mismatch
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
// the outcome from the attacker's stated state and its own, compared with
// the attacker's computation when that used the defender's real state. The
// caller applies rec.Mine.DefenderDamage to its player and sets
// DefenderDied in the outcome if the blow was fatal.
func DefendAttack(attacker, defender game.PlayerID, a *playpb.Attack, mine game.Fighter) (*playpb.Outcome, FightRecord) {
	rec := FightRecord{Attacker: attacker, Defender: defender, Counter: a.Counter}
	rec.Mine = game.FightOutcome(attacker, defender, a.Counter, fighterFrom(a.Attacker), mine)
	rec.Theirs = resultFrom(a.Result)
	if proto.Equal(a.DefenderSeen, fighterOf(mine)) {
		rec.Mismatch = rec.Mine != rec.Theirs
	} else {
		rec.Theirs = rec.Mine
	}
	return &playpb.Outcome{Accepted: true, Defender: fighterOf(mine), Result: resultOf(rec.Mine), Mismatch: rec.Mismatch}, rec
}

// RefuseAttack is the outcome of an attack the defender did not admit.
func RefuseAttack(why string) *playpb.Outcome { return &playpb.Outcome{Refusal: why} }

// WriteOutcome writes the defender's answer on the fight stream.
func WriteOutcome(w io.Writer, o *playpb.Outcome) error {
	return writeFrame(w, o, MaxFightMessageBytes)
}
