package play

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	dto "github.com/prometheus/client_model/go"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play/playpb"
	"github.com/overworld-p2p/overworld/node/pbframe"
	"github.com/overworld-p2p/overworld/node/vnet"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
)

// accountNet starts one logged-in player per name in region rc.
func accountNet(t *testing.T, url string, names []string, rc game.RegionCoord) *testNet {
	t.Helper()
	return newTestNetWith(t, len(names), rc, nil, func(i int, c *Config) {
		c.Name = ""
		c.Account = &Account{URL: url, User: names[i], Password: "password-" + names[i], Register: true}
	})
}

// hostileBuild removes p's own check of what it publishes on region rc's
// chat topic, as a player running a modified build would: its messages
// then reach the others' validators unchecked.
func hostileBuild(t *testing.T, p *Peer, rc game.RegionCoord) {
	t.Helper()
	if err := p.n.PubSub().UnregisterTopicValidator(ChatTopic(p.cfg.World, rc)); err != nil {
		t.Fatal(err)
	}
}

func metricValue(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func (p *Peer) fightRefusals(t *testing.T, reason string) float64 {
	return metricValue(t, p.metrics.fightRefusals.WithLabelValues(reason))
}

func (p *Peer) fightsCounted(t *testing.T, role, result string) float64 {
	return metricValue(t, p.metrics.fights.WithLabelValues(role, result))
}

func (p *Peer) mismatches(t *testing.T) float64 { return metricValue(t, p.metrics.fightMismatches) }

// messagesWith lists p's messages of kind whose text contains text.
func messagesWith(p *Peer, kind, text string) []Message {
	var out []Message
	for _, m := range p.Messages() {
		if m.Kind == kind && strings.Contains(m.Text, text) {
			out = append(out, m)
		}
	}
	return out
}

// sideBySide places players i=0,1 half a tile apart on open ground of
// region rc, within fight range of each other.
func sideBySide(t *testing.T, rc game.RegionCoord) func(i int, p *Peer) {
	spot := isolatedFood(t, testGame(), rc).Pos
	return func(i int, p *Peer) {
		for dx := int32(0); dx < 4*game.TileUnits; dx += game.TileUnits / 4 {
			if p.Place(game.Vec{X: spot.X + int32(i)*game.TileUnits/2 + dx, Y: spot.Y}) {
				return
			}
		}
		t.Fatalf("no open ground near %+v for P%d", spot, i)
	}
}

// holdsCard reports whether p holds a card of q.
func holdsCard(p, q *Peer) bool {
	p.social.mu.Lock()
	defer p.social.mu.Unlock()
	return p.social.cards[q.h.ID()] != nil
}

// syncedCards waits until each of a and b holds the other's card as the
// other last published it, so that both fight from the same inputs.
func syncedCards(t *testing.T, a, b *Peer) {
	t.Helper()
	waitFor(t, 30*time.Second, a.Name()+" and "+b.Name()+" to hold each other's current cards", func() bool {
		return knowsCard(a, b) && knowsCard(b, a)
	})
}

func knowsCard(p, q *Peer) bool {
	q.social.mu.Lock()
	pub := q.social.publicSelfLocked()
	published := !q.social.lastCardT.IsZero() && q.social.lastCard.Health == q.Player().Health
	q.social.mu.Unlock()
	p.social.mu.Lock()
	defer p.social.mu.Unlock()
	c := p.social.cards[q.h.ID()]
	return published && c != nil && c.Skill == pub.Skill && c.Health == pub.Health
}

// TestAdversarialImpersonation: mallory, logged in as herself, poses as
// alice: a card and a chat line under alice's name, and a whisper to bob
// signed "alice". Bob refuses all three (counted), shows mallory's lines
// under her own name, and his whisper to "alice" reaches alice, never
// mallory.
func TestAdversarialImpersonation(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		url := startAccounts(t)
		rc := game.RegionCoord{X: 1, Y: 0}
		tn := accountNet(t, url, []string{"alice", "bob", "mallory"}, rc)
		alice, bob, mallory := tn.peers[0], tn.peers[1], tn.peers[2]
		for _, p := range tn.peers {
			for _, q := range tn.peers {
				if p != q {
					waitFor(t, 40*time.Second, p.Name()+" to show "+q.Name()+" by name", func() bool {
						v, ok := sees(p, q.ID())
						return ok && v.Name == q.Name()
					})
				}
			}
		}
		hostileBuild(t, mallory, rc)
		forged := func() {
			_ = mallory.social.publish(rc, &playpb.Social{Body: &playpb.Social_Card{Card: &playpb.Card{
				Player: []byte(mallory.h.ID()), Name: "alice", RegionX: int32(rc.X), RegionY: int32(rc.Y),
				Health: 100, Skill: 10, Alive: true, Seq: 1 << 40,
			}}})
			_ = mallory.social.publish(rc, &playpb.Social{Body: &playpb.Social_Chat{Chat: &playpb.ChatLine{
				Sender: []byte(mallory.h.ID()), Name: "alice", RegionX: int32(rc.X), RegionY: int32(rc.Y), Text: "send your gold to mallory",
			}}})
		}
		waitFor(t, 40*time.Second, "alice and bob to refuse mallory's messages as alice", func() bool {
			if counterValue(t, bob, "name_mismatch") < 2 || counterValue(t, alice, "name_mismatch") < 2 {
				forged()
				return false
			}
			return true
		})
		for _, p := range []*Peer{alice, bob} {
			if got := messagesWith(p, "chat", "gold"); len(got) != 0 {
				t.Errorf("%s shows mallory's forged line: %+v", p.Name(), got)
			}
			if v, ok := sees(p, mallory.ID()); ok && v.Name != "mallory" {
				t.Errorf("%s shows mallory as %q", p.Name(), v.Name)
			}
		}
		// Mallory's own line shows under her name.
		waitFor(t, 20*time.Second, "mallory's own line to reach bob", func() bool {
			if len(messagesWith(bob, "chat", "hi, I am mallory")) == 0 {
				_ = mallory.Chat("hi, I am mallory", "")
				return false
			}
			return true
		})
		if m := messagesWith(bob, "chat", "hi, I am mallory")[0]; m.From != "mallory" {
			t.Errorf("mallory's line shown from %q", m.From)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := bob.Whisper(ctx, "alice", "for alice only"); err != nil {
			t.Fatalf("bob's whisper to alice: %v", err)
		}
		if got := messagesWith(alice, "whisper", "for alice only"); len(got) != 1 || got[0].From != "bob" {
			t.Errorf("alice's whispers: %+v", got)
		}
		if got := messagesWith(mallory, "whisper", "for alice only"); len(got) != 0 {
			t.Errorf("mallory got alice's whisper: %+v", got)
		}

		// A whisper signed "alice" from mallory's peer.
		s, err := mallory.h.NewStream(ctx, bob.h.ID(), protocol.ID(WhisperProtocol))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pbframe.WriteMessage(s, &playpb.Whisper{FromName: "alice", Text: "it is me, alice"}, MaxWhisperMessageBytes); err != nil {
			t.Fatal(err)
		}
		_ = s.CloseWrite()
		if _, err := pbframe.Read(bufio.NewReader(s), 16); err == nil {
			t.Error("bob acknowledged a whisper signed with another player's name")
		}
		s.Reset()
		if got := messagesWith(bob, "whisper", "it is me"); len(got) != 0 {
			t.Errorf("bob shows the forged whisper: %+v", got)
		}
		if got := counterValue(t, bob, "whisper_name_mismatch"); got != 1 {
			t.Errorf("whisper_name_mismatch counted %v, want 1", got)
		}
		// Honest whispers still flow both ways, under the token's name.
		if err := mallory.Whisper(ctx, "bob", "an honest word"); err != nil {
			t.Fatal(err)
		}
		if got := messagesWith(bob, "whisper", "an honest word"); len(got) != 1 || got[0].From != "mallory" {
			t.Errorf("bob's whispers from mallory: %+v", got)
		}
	})
}

// TestAdversarialChatFlood: a player publishes valid chat lines as fast as
// it can. Its neighbour shows at most what the per-author bucket holds
// (the burst and one per chatEvery since the flood began), drops the rest
// unforwarded and counts them.
func TestAdversarialChatFlood(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		rc := game.RegionCoord{X: 0, Y: 0}
		tn := newTestNet(t, 2, rc, nil)
		bob, mallory := tn.peers[0], tn.peers[1]
		waitFor(t, 30*time.Second, "bob to hold mallory's card", func() bool { return holdsCard(bob, mallory) })
		hostileBuild(t, mallory, rc)
		waitFor(t, 30*time.Second, "bob to hear mallory", func() bool {
			if len(messagesWith(bob, "chat", "hello")) == 0 {
				_ = mallory.Chat("hello", "")
				return false
			}
			return true
		})
		start := time.Now()
		sent := 0
		waitFor(t, 30*time.Second, "bob to drop part of the flood", func() bool {
			if counterValue(t, bob, "rate_limited") > 0 {
				return true
			}
			for range 100 {
				sent++
				_ = mallory.Chat(fmt.Sprintf("flood %d", sent), "")
			}
			return false
		})
		time.Sleep(200 * time.Millisecond) // let what was taken reach the page's list
		elapsed := time.Since(start)
		bound := chatBurst + int(elapsed/chatEvery) + 1
		if got := len(messagesWith(bob, "chat", "flood")); got > bound || got > maxMessages-1 {
			t.Errorf("bob shows %d of %d flood lines in %s; the bucket allows %d", got, sent, elapsed, bound)
		}
		if !hasMessage(bob, "chat", mallory.Name(), "hello") && len(messagesWith(bob, "chat", "flood")) == 0 {
			t.Error("bob heard nothing of mallory at all")
		}
	})
}

// TestAdversarialFightStats: mallory attacks bob declaring herself a
// master at full health, with a result to match. Bob fights her as her
// card shows her (the declared state is not used: the fight counts as
// stale), and a card raising her skill by ninety at once is refused.
func TestAdversarialFightStats(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		rc := game.RegionCoord{X: 0, Y: 0}
		tn := newTestNet(t, 2, rc, sideBySide(t, rc))
		bob, mallory := tn.peers[0], tn.peers[1]
		syncedCards(t, bob, mallory)
		hostileBuild(t, mallory, rc)

		// A card claiming skill 100 right after one of 10.
		waitFor(t, 30*time.Second, "bob to refuse mallory's inflated card", func() bool {
			if counterValue(t, bob, "card_skill_jump") == 0 {
				_ = mallory.social.publish(rc, &playpb.Social{Body: &playpb.Social_Card{Card: &playpb.Card{
					Player: []byte(mallory.h.ID()), Name: mallory.Name(), RegionX: int32(rc.X), RegionY: int32(rc.Y),
					Health: 100, Skill: game.MaxSkill, Alive: true, Seq: 1 << 40,
				}}})
				return false
			}
			return true
		})
		bob.social.mu.Lock()
		card := bob.social.cards[mallory.h.ID()]
		bob.social.mu.Unlock()
		if card.Skill != 10 {
			t.Fatalf("bob holds mallory at skill %d", card.Skill)
		}

		master := game.Fighter{Skill: game.MaxSkill, Health: game.MaxHealth}
		syncedCards(t, bob, mallory)
		bob.social.mu.Lock()
		bobPublic := bob.social.publicSelfLocked()
		before := bob.Player().Health
		bob.social.mu.Unlock()
		mine := game.Fighter{Skill: card.Skill, Health: card.Health}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		const counter = 1000
		out, err := SendAttack(ctx, mallory.h, bob.h.ID(), NewAttack(mallory.ID(), bob.ID(), counter, master, bobPublic))
		if err != nil {
			t.Fatal(err)
		}
		if !out.Accepted {
			t.Fatalf("attack refused: %s", out.Refusal)
		}
		want := game.FightOutcome(mallory.ID(), bob.ID(), out.Draw, mine, bobPublic)
		if got := resultFrom(out.Result); got != want {
			t.Fatalf("bob computed %+v, want %+v from mallory's card", got, want)
		}
		if got := bob.Player().Health; got != before-want.DefenderDamage {
			t.Errorf("bob's health %d -> %d, his own computation says %d damage", before, got, want.DefenderDamage)
		}
		waitFor(t, 10*time.Second, "bob to record the fight", func() bool {
			return bob.fightsCounted(t, "defender", "stale")+bob.fightsCounted(t, "defender", "fought") > 0
		})
		if bob.fightsCounted(t, "defender", "stale") != 1 || bob.mismatches(t) != 0 {
			t.Errorf("the declared state should count as a stale view: stale %v, mismatches %v",
				bob.fightsCounted(t, "defender", "stale"), bob.mismatches(t))
		}
	})
}

// TestAdversarialFightMismatch plays a peer whose outcomes differ from the
// rule, both ways round, and one that forges its result: every time both
// sides flag the mismatch and count it.
func TestAdversarialFightMismatch(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		rc := game.RegionCoord{X: 0, Y: 0}
		tn := newTestNet(t, 2, rc, sideBySide(t, rc))
		bob, mallory := tn.peers[0], tn.peers[1]
		// Mallory's build hits harder than the rule says.
		mallory.fights.mu.Lock()
		mallory.fights.rule = func(a, d game.PlayerID, counter uint64, af, df game.Fighter) game.FightResult {
			r := game.FightOutcome(a, d, counter, af, df)
			r.Hit, r.DefenderDamage = true, r.DefenderDamage+7
			return r
		}
		mallory.fights.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		fight := func(attacker, defender *Peer) FightRecord {
			t.Helper()
			syncedCards(t, bob, mallory)
			var rec FightRecord
			var err error
			waitFor(t, 20*time.Second, attacker.Name()+" to attack", func() bool {
				rec, err = attacker.Attack(ctx, defender.ID())
				return err == nil
			})
			return rec
		}
		// The defender records a fight once the attacker has settled it.
		lastOf := func(p *Peer, counter uint64) FightRecord {
			t.Helper()
			var rec FightRecord
			waitFor(t, 10*time.Second, p.Name()+" to record fight "+fmt.Sprint(counter), func() bool {
				f := p.Fights()
				if len(f) == 0 || f[len(f)-1].Counter != counter || f[len(f)-1].Defender != p.ID() {
					return false
				}
				rec = f[len(f)-1]
				return true
			})
			return rec
		}

		rec := fight(mallory, bob)
		if def := lastOf(bob, rec.Counter); !rec.Mismatch || !def.Mismatch {
			t.Errorf("modified attacker: attacker %+v, defender %+v", rec, def)
		}
		rec = fight(bob, mallory)
		if def := lastOf(mallory, rec.Counter); !rec.Mismatch || !def.Mismatch {
			t.Errorf("modified defender: attacker %+v, defender %+v", rec, def)
		}
		// The defender counts once its answer is on the way.
		waitFor(t, 10*time.Second, "two mismatches counted on each side", func() bool {
			return bob.mismatches(t) == 2 && mallory.mismatches(t) == 2
		})

		// An honest computation with a forged result: mallory settles with a
		// fatal blow whatever the draw.
		syncedCards(t, bob, mallory)
		mallory.social.mu.Lock()
		me := mallory.social.publicSelfLocked()
		c := mallory.social.cards[bob.h.ID()]
		mallory.social.mu.Unlock()
		var counter uint64
		mallory.With(func(av *Avatar) { counter, _ = av.TryFight() })
		seen := game.Fighter{Skill: c.Skill, Health: c.Health}
		forged := func(a, d game.PlayerID, draw uint64, af, df game.Fighter) game.FightResult {
			return game.FightResult{Hit: true, DefenderDamage: 60, Roll: 0}
		}
		out, err := sendAttackWith(ctx, forged, rand.Reader, mallory.h, bob.h.ID(), NewAttack(mallory.ID(), bob.ID(), counter+100, me, seen))
		if err != nil {
			t.Fatal(err)
		}
		settled := SettleAttack(mallory.ID(), bob.ID(), counter+100, me, seen, out)
		def := lastOf(bob, counter+100)
		if settled.Mismatch || !def.Mismatch || def.Theirs.DefenderDamage != 60 {
			t.Errorf("forged result: outcome %+v, attacker (honest rule) %+v, defender %+v", out, settled, def)
		}
		waitFor(t, 10*time.Second, "bob to count the forged result", func() bool { return bob.mismatches(t) == 3 })
		if got, want := def.Mine, game.FightOutcome(mallory.ID(), bob.ID(), out.Draw, me, seen); got != want {
			t.Errorf("bob computed %+v, the rule says %+v", got, want)
		}
	})
}

// TestFightSidesAgree: two honest peers fight back and forth while each
// blow changes a card that may still be in flight when the next fight
// starts (and now and then the attacker's copy of the defender's card is
// set a blow behind, as when the newest is in flight), so the two sides
// may see different inputs. Whatever they saw,
// they agree on whether the inputs were the same, never report a
// mismatch, and with the same inputs compute the same outcome, the rule's.
func TestFightSidesAgree(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		rc := game.RegionCoord{X: 0, Y: 0}
		tn := newTestNet(t, 2, rc, sideBySide(t, rc))
		a, b := tn.peers[0], tn.peers[1]
		syncedCards(t, a, b)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		stale, fought := 0, 0
		for i := range 8 {
			attacker, defender := a, b
			if i%2 == 1 {
				attacker, defender = b, a
			}
			if !attacker.Player().Alive || !defender.Player().Alive {
				break
			}
			var rec FightRecord
			var err error
			waitFor(t, 20*time.Second, fmt.Sprintf("fight %d", i), func() bool {
				if i%4 == 0 {
					syncedCards(t, a, b)
				} else if i%4 == 1 {
					// The defender's latest card has not reached the
					// attacker yet: its view is a blow behind.
					attacker.social.mu.Lock()
					if c := attacker.social.cards[defender.h.ID()]; c != nil && c.Health > 10 {
						behind := *c
						behind.Health -= 5
						attacker.social.cards[defender.h.ID()] = &behind
					}
					attacker.social.mu.Unlock()
				}
				rec, err = attacker.Attack(ctx, defender.ID())
				return err == nil
			})
			var def FightRecord
			waitFor(t, 10*time.Second, fmt.Sprintf("the defender to record fight %d", i), func() bool {
				fs := defender.Fights()
				if len(fs) == 0 || fs[len(fs)-1].Counter != rec.Counter || fs[len(fs)-1].Attacker != rec.Attacker {
					return false
				}
				def = fs[len(fs)-1]
				return true
			})
			if rec.Mismatch || def.Mismatch || rec.Stale != def.Stale {
				t.Fatalf("fight %d: attacker %+v, defender %+v", i, rec, def)
			}
			fought++
			if rec.Stale {
				stale++
				continue
			}
			if rec.Mine != def.Mine || rec.Theirs != def.Mine || def.Theirs != rec.Mine || rec.Draw != def.Draw {
				t.Fatalf("fight %d with the same inputs: attacker %+v, defender %+v", i, rec, def)
			}
		}
		t.Logf("%d fights, %d with a card in flight", fought, stale)
		if fought == 0 || stale == fought {
			t.Fatalf("%d fights, %d stale: nothing compared", fought, stale)
		}
	})
}

// TestAdversarialUnloggedFightStream: a peer with no login opens a fight
// stream and announces a frame of 4 MiB. The defender checks its token
// before reading a byte, refuses it and counts it; nothing changes.
func TestAdversarialUnloggedFightStream(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		url := startAccounts(t)
		rc := game.RegionCoord{X: 0, Y: 0}
		tn := accountNet(t, url, []string{"bob"}, rc)
		bob := tn.peers[0]
		// A bare host on the same network, with no node and no login.
		key, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		h, err := tn.net.Net.AddHost(key, vnet.Addr(1000), vnet.HostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := tn.net.Net.Connect(h.ID(), bob.h.ID()); err != nil {
			t.Fatal(err)
		}
		before := bob.Player()
		s, err := h.NewStream(ctx, bob.h.ID(), protocol.ID(FightProtocol))
		if err != nil {
			t.Fatal(err)
		}
		frame := binary.AppendUvarint(nil, 4<<20)
		if _, err := s.Write(append(frame, make([]byte, 64)...)); err != nil {
			t.Fatal(err)
		}
		_ = s.CloseWrite()
		if _, err := bufio.NewReader(s).ReadByte(); err == nil {
			t.Error("bob answered a peer without a login")
		}
		waitFor(t, 20*time.Second, "bob to count the refusal", func() bool { return bob.fightRefusals(t, "bad_token") == 1 })
		if after := bob.Player(); after.Health != before.Health || !after.Alive {
			t.Errorf("bob changed: %+v -> %+v", before, after)
		}
	})
}

// TestAttackerTableBounded: the defender's per-attacker table forgets
// attackers after attackerMemory and never holds more than maxAttackers.
func TestAttackerTableBounded(t *testing.T) {
	p := &fights{attackers: map[peer.ID]attackSeen{}}
	t0 := time.Unix(1000, 0)
	for i := range maxAttackers + 100 {
		p.rememberLocked(peer.ID(fmt.Sprintf("attacker-%d", i)), attackSeen{counter: 1, at: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	if len(p.attackers) != maxAttackers {
		t.Fatalf("%d attackers held, limit %d", len(p.attackers), maxAttackers)
	}
	if _, ok := p.attackers["attacker-0"]; ok {
		t.Fatal("the oldest attacker was kept over newer ones")
	}
	p.pruneLocked(t0.Add(attackerMemory + time.Hour))
	if len(p.attackers) != 0 {
		t.Fatalf("%d attackers held after they all went quiet", len(p.attackers))
	}
}

// losingTransport forwards requests but loses the answers to the first
// lose character saves the server took: it stored them, the client hears
// nothing.
type losingTransport struct {
	base http.RoundTripper
	lose atomic.Int32
}

func (l *losingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusOK && r.Method == http.MethodPut && r.URL.Path == "/v1/character" && l.lose.Add(-1) >= 0 {
		resp.Body.Close()
		return nil, errors.New("connection reset (the test lost the answer)")
	}
	return resp, err
}

// TestSaveNeverConflictsWithItself: a save is stored but its answer lost
// (as when a busy machine times the request out); the next save goes on
// from the stored version instead of failing with a conflict, and the
// character saved last is the one a new session loads.
func TestSaveNeverConflictsWithItself(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		url := startAccounts(t)
		lossy := &losingTransport{base: inMemoryAccounts{}}
		lossy.lose.Store(2)
		tn := newTestNetWith(t, 1, game.RegionCoord{X: 0, Y: 0}, nil, func(i int, c *Config) {
			c.Name = ""
			c.Account = &Account{URL: url, User: "saver", Password: "password-saver", Register: true,
				HTTPClient: &http.Client{Timeout: 10 * time.Second, Transport: lossy}}
		})
		p := tn.peers[0]
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		p.With(func(av *Avatar) { av.Feed(1) })
		if err := p.Save(ctx); err == nil {
			t.Fatal("the first save's answer was not lost")
		}
		p.With(func(av *Avatar) { av.Feed(1) })
		if err := p.Save(ctx); err == nil {
			t.Fatal("the second save's answer was not lost")
		}
		p.With(func(av *Avatar) { av.Feed(1) })
		if err := p.Save(ctx); err != nil {
			t.Fatalf("save after two lost answers: %v", err)
		}
		c, err := accounts.NewClient(url, accounts.WithHTTPClient(accountsHTTP))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Login(ctx, "saver", "password-saver", p.h.ID()); err != nil {
			t.Fatal(err)
		}
		ch, err := c.LoadCharacter(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Score != 3 || ch.Version != 3 {
			t.Fatalf("stored %+v, want the third save (score 3, version 3)", ch)
		}
	})
}
