package play

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
)

// TestDuelPieces runs fights over FightProtocol between two virtual hosts
// with the exported halves of the protocol: with the same view of each
// other both sides compute the same outcome from the same draw, and the
// defender gets the attacker's settle; the defender fights the attacker
// as it saw it, whatever the attack declares, and a stale view is told
// apart from a mismatch; a stale counter is refused with its reason.
func TestDuelPieces(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		hs := connectedHosts(t, nil)
		attacker, defender := hs[0], hs[1]
		aID, dID := game.PlayerID(attacker.ID().String()), game.PlayerID(defender.ID().String())
		defState := game.Fighter{Skill: 14, Health: 70}
		me := game.Fighter{Skill: 10, Health: 100}
		var last uint64
		seenAny := false
		records := make(chan FightRecord, 8)
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
			// The defender knows the attacker from its card: me.
			out, rec := DefendAttack(aID, dID, a, me, defState)
			_ = WriteOutcome(s, out)
			if theirs, err := a.ReadSettle(); err == nil {
				rec = Settled(rec, theirs)
			}
			records <- rec
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		fight := func(counter uint64, declared, seen game.Fighter) FightRecord {
			t.Helper()
			out, err := SendAttack(ctx, attacker, defender.ID(), NewAttack(aID, dID, counter, declared, seen))
			if err != nil {
				t.Fatal(err)
			}
			if !out.Accepted {
				t.Fatalf("fight %d refused: %s", counter, out.Refusal)
			}
			return SettleAttack(aID, dID, counter, declared, seen, out)
		}
		// Same view: agreement.
		for counter := range uint64(3) {
			rec := fight(counter, me, defState)
			def := <-records
			want := game.FightOutcome(aID, dID, rec.Draw, me, defState)
			if rec.Mismatch || rec.Stale || rec.Mine != want || def.Mismatch || def.Stale || def.Mine != want ||
				!def.Settled || def.Theirs != want || def.Draw != rec.Draw {
				t.Fatalf("fight %d: attacker %+v, defender %+v, want %+v", counter, rec, def, want)
			}
		}
		// The attacker has not seen the defender's latest card: stale, no
		// blame; each side used its own view.
		rec := fight(3, me, game.Fighter{Skill: 10, Health: game.MaxHealth})
		def := <-records
		if !rec.Stale || rec.Mismatch || !def.Stale || def.Mismatch {
			t.Fatalf("stale view: attacker %+v, defender %+v", rec, def)
		}
		// The attacker declares itself a master: the defender fights it as
		// its card shows it.
		rec = fight(4, game.Fighter{Skill: game.MaxSkill, Health: game.MaxHealth}, defState)
		def = <-records
		if want := game.FightOutcome(aID, dID, rec.Draw, me, defState); def.Mine != want {
			t.Fatalf("defender used the declared state: %+v, want %+v", def.Mine, want)
		}
		out, err := SendAttack(ctx, attacker, defender.ID(), NewAttack(aID, dID, 1, me, defState))
		if err != nil {
			t.Fatal(err)
		}
		if out.Accepted || !strings.Contains(out.Refusal, "stale") {
			t.Fatalf("replayed counter: %+v", out)
		}
	})
}
