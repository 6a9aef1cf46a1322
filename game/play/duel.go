package play

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play/playpb"
	"github.com/overworld-p2p/overworld/node/pbframe"
)

// The fight protocol (FightProtocol, see fight.go) in pieces, for drivers
// of a player other than Peer — the simulator's bots keep their own state
// and position but speak the same protocol with the same messages,
// validation, draw and outcome rules:
//
//	attacker: NewAttack -> SendAttack -> SettleAttack
//	defender: ReadAttack -> (own admission checks) -> DefendAttack -> WriteOutcome
//	          (-> Incoming.ReadSettle to compare with the attacker's result)
//
// Both sides pass the other's state as they last saw it (a player's card;
// a driver without cards assumes what game/play assumes of a player whose
// card has not arrived) and their own as they last published it.

// NonceBytes is the size of each side's fight nonce.
const NonceBytes = 32

// ErrBadNonce is an Outcome whose nonce does not open the defender's
// commitment: the defender changed its contribution after it saw the
// attacker's.
var ErrBadNonce = errors.New("fight: the defender's nonce does not match its commitment")

// NewAttack is the attacker's opening message for the fight numbered
// counter: its own state as its last card published it and the defender's
// as its card last said.
func NewAttack(attacker, defender game.PlayerID, counter uint64, me, seen game.Fighter) *playpb.Attack {
	return &playpb.Attack{Counter: counter, Attacker: fighterOf(me), DefenderSeen: fighterOf(seen)}
}

// fightRule computes one attack from the fight's draw; game.FightOutcome is
// the rule (the draw takes the place of its counter argument). Tests give
// a peer another one to play a peer whose outcomes differ.
type fightRule func(attacker, defender game.PlayerID, draw uint64, a, d game.Fighter) game.FightResult

// FightDraw is the number a fight's randomness comes from: SHA-256 over
// both player IDs, the fight's counter and both sides' nonces. Each side
// fixed its nonce before it knew the other's, so neither chose the draw.
func FightDraw(attacker, defender game.PlayerID, counter uint64, attackerNonce, defenderNonce []byte) uint64 {
	h := sha256.New()
	h.Write([]byte("overworld/fight/draw/3"))
	for _, part := range [][]byte{[]byte(attacker), []byte(defender), attackerNonce, defenderNonce} {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(part))))
		h.Write(part)
	}
	h.Write(binary.BigEndian.AppendUint64(nil, counter))
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// nonceCommitment is the hash the defender commits to its nonce with.
func nonceCommitment(nonce []byte) []byte {
	h := sha256.New()
	h.Write([]byte("overworld/fight/commit/3"))
	h.Write(nonce)
	return h.Sum(nil)
}

func newNonce(r io.Reader) ([]byte, error) {
	n := make([]byte, NonceBytes)
	if _, err := io.ReadFull(r, n); err != nil {
		return nil, fmt.Errorf("fight nonce: %w", err)
	}
	return n, nil
}

// Answer is the defender's Outcome as the attacker checked it: when
// accepted, the defender's nonce opened its commitment, and Draw is the
// fight's draw.
type Answer struct {
	*playpb.Outcome
	Draw uint64
}

// SendAttack runs the attacker's side of one fight over a new FightProtocol
// stream to the defender: it sends a, takes the defender's commitment,
// reveals a fresh nonce of its own, checks the defender's Outcome (its
// nonce must open the commitment, else ErrBadNonce), and settles with its
// own computation from the states a declares. SettleAttack then makes the
// attacker's record of the fight.
func SendAttack(ctx context.Context, h host.Host, to peer.ID, a *playpb.Attack) (*Answer, error) {
	return sendAttackWith(ctx, game.FightOutcome, rand.Reader, h, to, a)
}

func sendAttackWith(ctx context.Context, rule fightRule, nonces io.Reader, h host.Host, to peer.ID, a *playpb.Attack) (*Answer, error) {
	s, err := h.NewStream(network.WithAllowLimitedConn(ctx, "fight"), to, protocol.ID(FightProtocol)) // small messages: fits a relay
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	ans, err := attackOver(s, rule, nonces, game.PlayerID(h.ID().String()), game.PlayerID(to.String()), a)
	if err != nil {
		s.Reset()
		return nil, err
	}
	_ = s.CloseWrite()
	return ans, nil
}

// attackOver is the attacker's exchange on an open stream.
func attackOver(rw io.ReadWriter, rule fightRule, nonces io.Reader, attacker, defender game.PlayerID, a *playpb.Attack) (*Answer, error) {
	r := bufio.NewReader(rw)
	if _, err := pbframe.WriteMessage(rw, a, MaxFightMessageBytes); err != nil {
		return nil, err
	}
	b, err := pbframe.Read(r, MaxFightMessageBytes)
	if err != nil {
		return nil, err
	}
	commit, err := DecodeCommitment(b)
	if err != nil {
		return nil, err
	}
	mine, err := newNonce(nonces)
	if err != nil {
		return nil, err
	}
	if _, err := pbframe.WriteMessage(rw, &playpb.Reveal{Nonce: mine}, MaxFightMessageBytes); err != nil {
		return nil, err
	}
	if b, err = pbframe.Read(r, MaxFightMessageBytes); err != nil {
		return nil, err
	}
	out, err := DecodeOutcome(b)
	if err != nil {
		return nil, err
	}
	if !out.Accepted {
		return &Answer{Outcome: out}, nil
	}
	if subtle.ConstantTimeCompare(nonceCommitment(out.Nonce), commit.NonceHash) != 1 {
		return nil, ErrBadNonce
	}
	draw := FightDraw(attacker, defender, a.Counter, mine, out.Nonce)
	result := rule(attacker, defender, draw, fighterFrom(a.Attacker), fighterFrom(a.DefenderSeen))
	if _, err := pbframe.WriteMessage(rw, &playpb.Settle{Result: resultOf(result)}, MaxFightMessageBytes); err != nil {
		return nil, err
	}
	return &Answer{Outcome: out, Draw: draw}, nil
}

// SettleAttack is the attacker's reading of an accepted answer: its own
// computation, from its own public state (me) and the defender's as it
// last saw it (seen) — never the state the defender declares in the
// answer — beside the defender's. When the defender used the same two
// states the results must agree (else Mismatch); when it did not, one of
// the cards was in flight (Stale) and nothing is compared. The attacker
// applies rec.Mine.AttackerDamage to itself.
func SettleAttack(attacker, defender game.PlayerID, counter uint64, me, seen game.Fighter, out *Answer) FightRecord {
	return settleWith(game.FightOutcome, attacker, defender, counter, me, seen, out)
}

func settleWith(rule fightRule, attacker, defender game.PlayerID, counter uint64, me, seen game.Fighter, out *Answer) FightRecord {
	rec := FightRecord{Attacker: attacker, Defender: defender, Counter: counter, Draw: out.Draw, Settled: true}
	rec.Mine = rule(attacker, defender, out.Draw, me, seen)
	rec.Theirs = resultFrom(out.Result)
	rec.Stale = !proto.Equal(out.AttackerSeen, fighterOf(me)) || !proto.Equal(out.Defender, fighterOf(seen))
	rec.Mismatch = !rec.Stale && rec.Mine != rec.Theirs
	rec.DefenderDied = out.DefenderDied
	return rec
}

// Incoming is an attack as the defender read it: the attacker's opening
// and, exchanged after it, the two nonces the fight's draw comes from.
type Incoming struct {
	*playpb.Attack
	attackerNonce, defenderNonce []byte
	r                            *bufio.Reader
}

// ReadAttack reads the attack that opens a fight stream and runs the
// nonce exchange: it commits to a fresh nonce of the defender's and reads
// the attacker's. The defender's checks come after it; none of them
// depends on the draw, which the attacker cannot know before the Outcome
// reveals the defender's nonce.
func ReadAttack(rw io.ReadWriter) (*Incoming, error) {
	return readAttackWith(rw, rand.Reader)
}

func readAttackWith(rw io.ReadWriter, nonces io.Reader) (*Incoming, error) {
	r := bufio.NewReader(rw)
	b, err := pbframe.Read(r, MaxFightMessageBytes)
	if err != nil {
		return nil, err
	}
	a, err := DecodeAttack(b)
	if err != nil {
		return nil, err
	}
	mine, err := newNonce(nonces)
	if err != nil {
		return nil, err
	}
	if _, err := pbframe.WriteMessage(rw, &playpb.Commitment{NonceHash: nonceCommitment(mine)}, MaxFightMessageBytes); err != nil {
		return nil, err
	}
	if b, err = pbframe.Read(r, MaxFightMessageBytes); err != nil {
		return nil, err
	}
	reveal, err := DecodeReveal(b)
	if err != nil {
		return nil, err
	}
	return &Incoming{Attack: a, attackerNonce: reveal.Nonce, defenderNonce: mine, r: r}, nil
}

// DefendAttack computes the defender's answer to an attack it admitted:
// the outcome from the fight's draw, the attacker's state as the defender
// last saw it (attackerSeen, from the attacker's card — never the state
// the attack declares) and its own public state (mine). The answer carries
// the defender's nonce. The caller applies rec.Mine.DefenderDamage to its
// player, sets DefenderDied in the outcome if the blow was fatal, writes
// it (WriteOutcome), and may read the attacker's computation
// (Incoming.ReadSettle) to compare.
func DefendAttack(attacker, defender game.PlayerID, a *Incoming, attackerSeen, mine game.Fighter) (*playpb.Outcome, FightRecord) {
	return defendWith(game.FightOutcome, attacker, defender, a, attackerSeen, mine)
}

func defendWith(rule fightRule, attacker, defender game.PlayerID, a *Incoming, attackerSeen, mine game.Fighter) (*playpb.Outcome, FightRecord) {
	draw := FightDraw(attacker, defender, a.Counter, a.attackerNonce, a.defenderNonce)
	rec := FightRecord{Attacker: attacker, Defender: defender, Counter: a.Counter, Draw: draw}
	rec.Mine = rule(attacker, defender, draw, attackerSeen, mine)
	rec.Stale = !proto.Equal(a.Attacker, fighterOf(attackerSeen)) || !proto.Equal(a.DefenderSeen, fighterOf(mine))
	return &playpb.Outcome{
		Accepted: true, Defender: fighterOf(mine), AttackerSeen: fighterOf(attackerSeen),
		Result: resultOf(rec.Mine), Nonce: a.defenderNonce,
	}, rec
}

// ReadSettle reads the attacker's computation, which follows the
// defender's Outcome.
func (a *Incoming) ReadSettle() (game.FightResult, error) {
	b, err := pbframe.Read(a.r, MaxFightMessageBytes)
	if err != nil {
		return game.FightResult{}, err
	}
	s, err := DecodeSettle(b)
	if err != nil {
		return game.FightResult{}, err
	}
	return resultFrom(s.Result), nil
}

// Settled completes the defender's record with the attacker's computation:
// when both sides used the same states the results must agree.
func Settled(rec FightRecord, theirs game.FightResult) FightRecord {
	rec.Theirs, rec.Settled = theirs, true
	rec.Mismatch = !rec.Stale && rec.Mine != theirs
	return rec
}

// RefuseAttack is the outcome of an attack the defender did not admit.
func RefuseAttack(why string) *playpb.Outcome { return &playpb.Outcome{Refusal: why} }

// WriteOutcome writes the defender's answer on the fight stream.
func WriteOutcome(w io.Writer, o *playpb.Outcome) error {
	_, err := pbframe.WriteMessage(w, o, MaxFightMessageBytes)
	return err
}
