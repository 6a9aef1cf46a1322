package play

import (
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
)

// TestDecideDefence plays the defender's decision on every refusal and at
// the edges of range and cooldown: it depends on nothing but its inputs.
func TestDecideDefence(t *testing.T) {
	cfg := testGame()
	slack := cfg.MaxSpeed * int32(cfg.TickRate)
	reach := cfg.FightRangeUnits + slack
	minGap := time.Duration(cfg.ActionCooldownTicks) * time.Second / time.Duration(cfg.TickRate) / 2
	now := time.Unix(1000, 0)
	self := game.Player{Alive: true, Pos: game.Vec{X: 1000, Y: 1000}}
	at := func(dx int32) *game.Vec { return &game.Vec{X: 1000 + dx, Y: 1000} }
	card := &cardState{Skill: 10, Health: 100, Alive: true}
	ok := defence{self: self, attackerAt: at(reach), card: card, counter: 5, last: &attackSeen{counter: 4, at: now.Add(-minGap)}, now: now}
	cases := map[string]struct {
		change func(d *defence)
		want   string
	}{
		"fights at the edge of range and cooldown": {func(d *defence) {}, ""},
		"first attack of a player":                 {func(d *defence) { d.last = nil }, ""},
		"defender down":                            {func(d *defence) { d.self.Alive = false }, "defender_down"},
		"attacker not in sight":                    {func(d *defence) { d.attackerAt = nil }, "attacker_unseen"},
		"one unit out of range":                    {func(d *defence) { d.attackerAt = at(reach + 1) }, "out_of_range"},
		"attacker's card unseen":                   {func(d *defence) { d.card = nil }, "attacker_card_unseen"},
		"counter replayed":                         {func(d *defence) { d.counter = 4 }, "stale_counter"},
		"faster than the cooldown":                 {func(d *defence) { d.last.at = now.Add(-minGap + time.Millisecond) }, "too_fast"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			d := ok
			last := *ok.last
			d.last = &last
			c.change(&d)
			reason, why := decideDefence(cfg, d)
			if reason != c.want || (reason != "") != (why != "") {
				t.Fatalf("decided %q (%q), want %q", reason, why, c.want)
			}
		})
	}
}

// TestInputLatch: the direction holds until changed; eat, pick-up and
// fight go once, on the next tick; a target too long is refused.
func TestInputLatch(t *testing.T) {
	var l inputLatch
	if err := l.apply(game.Input{MoveX: 127, Eat: true, PickUp: true, Fight: true, Target: "them"}); err != nil {
		t.Fatal(err)
	}
	if err := l.apply(game.Input{MoveX: 127}); err != nil {
		t.Fatal(err)
	}
	first, second := l.take("me"), l.take("me")
	if first.Player != "me" || first.MoveX != 127 || !first.Eat || !first.PickUp || !first.Fight || first.Target != "them" {
		t.Fatalf("first tick %+v", first)
	}
	if second.MoveX != 127 || second.Eat || second.PickUp || second.Fight || second.Target != "" {
		t.Fatalf("second tick %+v", second)
	}
	if err := l.apply(game.Input{Fight: true, Target: game.PlayerID(strings.Repeat("x", game.MaxPlayerIDLen+1))}); err == nil {
		t.Fatal("took a target over the bound")
	}
	if in := l.take("me"); in.Fight {
		t.Fatalf("a refused input fights: %+v", in)
	}
}

// TestCloseStopsEveryPart: Close ends Run and waits for it; afterwards
// the peer serves no fight or whisper stream, is in no chat topic, and
// runs no more.
func TestCloseStopsEveryPart(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		rc := game.RegionCoord{X: 0, Y: 0}
		tn := newTestNet(t, 1, rc, nil)
		p := tn.peers[0]
		waitFor(t, 20*time.Second, "the peer in its region's chat topic", func() bool {
			for _, name := range p.n.PubSub().GetTopics() {
				if name == ChatTopic(p.cfg.World, rc) {
					return true
				}
			}
			return false
		})
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-p.done:
		default:
			t.Fatal("Close returned before Run did")
		}
		for _, id := range p.h.Mux().Protocols() {
			if id == protocol.ID(FightProtocol) || id == protocol.ID(WhisperProtocol) {
				t.Errorf("still serving %s", id)
			}
		}
		for _, name := range p.n.PubSub().GetTopics() {
			if strings.HasSuffix(name, ChatTopicSuffix) {
				t.Errorf("still in chat topic %s", name)
			}
		}
		if err := p.Run(t.Context()); err == nil {
			t.Error("a closed peer ran again")
		}
	})
}
