package play

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/overworld-p2p/overworld/game"
)

// TestDuelPieces runs fights over FightProtocol between two mocknet hosts
// with the exported halves of the protocol: both sides compute the same
// outcome, a stale counter is refused with its reason, and the defender's
// real state wins over the attacker's guess.
func TestDuelPieces(t *testing.T) {
	mn, err := mocknet.FullMeshConnected(2)
	if err != nil {
		t.Fatal(err)
	}
	defer mn.Close()
	hs := mn.Hosts()
	attacker, defender := hs[0], hs[1]
	aID, dID := game.PlayerID(attacker.ID().String()), game.PlayerID(defender.ID().String())
	defState := game.Fighter{Skill: 14, Health: 70}
	var last uint64
	seenAny := false
	defender.SetStreamHandler(protocol.ID(FightProtocol), func(s network.Stream) {
		defer s.Close()
		a, err := ReadAttack(s)
		if err != nil {
			s.Reset()
			return
		}
		if seenAny && a.Counter <= last {
			_ = WriteOutcome(s, RefuseAttack("stale fight counter"))
			return
		}
		seenAny, last = true, a.Counter
		out, rec := DefendAttack(aID, dID, a, defState)
		if rec.Mismatch {
			t.Errorf("defender found a mismatch: %+v", rec)
		}
		_ = WriteOutcome(s, out)
	})
	me := game.Fighter{Skill: 10, Health: 100}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for counter := range uint64(3) {
		// The attacker guesses a fresh defender; the defender's answer
		// carries its real state, from which the attacker recomputes.
		out, err := SendAttack(ctx, attacker, defender.ID(), NewAttack(aID, dID, counter, me, game.Fighter{Skill: 10, Health: game.MaxHealth}))
		if err != nil {
			t.Fatal(err)
		}
		if !out.Accepted {
			t.Fatalf("fight %d refused: %s", counter, out.Refusal)
		}
		rec := SettleAttack(aID, dID, counter, me, out)
		if rec.Mismatch || rec.Mine != game.FightOutcome(aID, dID, counter, me, defState) {
			t.Fatalf("fight %d: attacker's %+v, defender's %+v", counter, rec.Mine, rec.Theirs)
		}
	}
	out, err := SendAttack(ctx, attacker, defender.ID(), NewAttack(aID, dID, 1, me, defState))
	if err != nil {
		t.Fatal(err)
	}
	if out.Accepted || !strings.Contains(out.Refusal, "stale") {
		t.Fatalf("replayed counter: %+v", out)
	}
}
