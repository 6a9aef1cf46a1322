package play

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play/playpb"
	"github.com/overworld-p2p/overworld/game/webui"
	"github.com/overworld-p2p/overworld/regions/guard"
)

// A fight is settled by the two players alone, over a direct stream
// (FightProtocol). Each side computes game.FightOutcome from the two
// fighters' states as the public record gives them: its own as its last
// card published it, the other's as the other's card last reached it —
// never the state the other side declares in the fight, which a hostile
// player would make up.
//
// The fight's randomness is a draw neither side can choose (FightDraw):
// SHA-256 over both player IDs, the fight's counter and a 32-byte nonce
// from each side, exchanged as a commitment scheme. The attacker opens
// with the counter (its own fight count) and the states it uses; the
// defender answers with the hash of a fresh nonce, fixing its nonce before
// it sees the attacker's; the attacker then reveals its own fresh nonce,
// fixing it before it learns the defender's; the defender computes,
// applies its damage and answers with its nonce and result; the attacker
// checks that the nonce opens the commitment (else the fight is void and
// counted, bad_nonce), computes and settles with its result. A hostile
// attacker trying counters or nonces until the roll favours it is
// therefore guessing: whatever it sends, the draw is uniform to it, since
// it does not know the defender's nonce until its own is fixed. A hostile
// defender cannot steer the draw either (its nonce is bound by the
// commitment before the attacker's is known); what either side can still
// do is walk away once it knows the outcome — the defender before
// answering, the attacker before settling — which changes nothing already
// applied: the defender's damage is applied before its answer, and the
// attacker's computation is only compared. (Up to protocol 2.0.0 the draw
// came from the IDs and the attacker's counter alone, and an attacker
// could try counters until one hit.)
//
// The defender checks the attacker's login token before reading a byte,
// then the attack (alive, attacker seen within fight range and its card
// known, counter fresh, not faster than the cooldown). Each side applies
// the damage to itself (each peer is the authority over its own player).
// When the two used the same inputs their results must agree; either side
// that finds otherwise reports a mismatch (metric, log, chat notice): the
// attacker on the defender's answer, the defender on the attacker's
// settle. When the inputs differ (a card was in flight) the fight counts
// as stale and nothing is compared.

// FightRecord is one fight as this peer saw it.
type FightRecord struct {
	Attacker, Defender game.PlayerID
	Counter            uint64
	// Draw is the fight's random draw (FightDraw), from both sides'
	// nonces; game.FightOutcome takes it in place of a counter.
	Draw uint64
	// Mine is this peer's computation, Theirs the other side's.
	Mine, Theirs game.FightResult
	// Mismatch: the two sides used the same inputs and computed different
	// results (a bug, another build, or a cheat). Stale: they used
	// different inputs (a card was in flight), so nothing was compared.
	Mismatch, Stale bool
	// DefenderDied reports that the attack was fatal.
	DefenderDied bool
	// Settled: the other side's computation arrived (a defender's record
	// lacks it when the attacker walked away before settling).
	Settled bool
}

// maxFights is how many fight records a peer keeps.
const maxFights = 32

// The defender remembers each attacker's last fight (for the counter and
// cooldown checks) for attackerMemory, and at most maxAttackers of them.
const (
	attackerMemory = 2 * time.Minute
	maxAttackers   = 1024
)

// attackSeen is the last accepted attack from one attacker.
type attackSeen struct {
	counter uint64
	at      time.Time
}

// ErrRefused wraps a fight the defender refused.
var ErrRefused = errors.New("fight refused")

// planFight picks the target of a fight input (the named player, else the
// nearest living one in range) and starts the cooldown. Caller holds p.mu.
func (p *Peer) planFight(named string) (other, uint64, bool) {
	if p.fighting {
		return other{}, 0, false
	}
	self := p.av.Player()
	limit := int64(p.cfg.Game.FightRangeUnits) * int64(p.cfg.Game.FightRangeUnits)
	var best other
	var bestD int64 = -1
	for _, o := range p.others {
		if (o.card != nil && !o.card.Alive) || (named != "" && o.id.String() != named) {
			continue
		}
		if d := game.DistSq(self.Pos, o.pos); d <= limit && (bestD < 0 || d < bestD) {
			best, bestD = o, d
		}
	}
	if bestD < 0 {
		return other{}, 0, false
	}
	counter, ok := p.av.TryFight()
	if !ok {
		return other{}, 0, false
	}
	p.fighting = true
	return best, counter, true
}

// Attack fights the player target now if it is in range (the F key does
// the same on the next tick).
func (p *Peer) Attack(ctx context.Context, target game.PlayerID) (FightRecord, error) {
	p.mu.Lock()
	o, counter, ok := p.planFight(string(target))
	p.mu.Unlock()
	if !ok {
		return FightRecord{}, fmt.Errorf("attack %s: not in range, dead, busy or cooling down", target)
	}
	return p.attack(ctx, o, counter)
}

// attack runs the attacker's side of one fight.
func (p *Peer) attack(ctx context.Context, target other, counter uint64) (rec FightRecord, err error) {
	p.mu.Lock()
	rule, nonces := p.rule, p.nonces
	me := p.publicSelfLocked()
	// A player whose card has not arrived is taken for a fresh one, as
	// the page shows it.
	seen := game.Fighter{Skill: 10, Health: game.MaxHealth}
	if c := p.cards[target.id]; c != nil {
		seen = game.Fighter{Skill: c.Skill, Health: c.Health}
	}
	name := p.nameOf(target.id)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.fighting = false
		if err != nil && ctx.Err() == nil {
			p.notice("event", "", fmt.Sprintf("Your attack on %s failed: %v", name, err))
		}
		p.mu.Unlock()
	}()

	attacker, defender := p.id, game.PlayerID(target.id.String())
	out, err := sendAttackWith(ctx, rule, nonces, p.h, target.id, NewAttack(attacker, defender, counter, me, seen))
	if errors.Is(err, ErrBadNonce) {
		p.metrics.fights.WithLabelValues("attacker", "bad_nonce").Inc()
		p.log.Warn("fight voided: the defender's nonce does not open its commitment", "defender", target.id)
		return FightRecord{Attacker: attacker, Defender: defender, Counter: counter}, err
	}
	if err != nil {
		p.metrics.fights.WithLabelValues("attacker", "failed").Inc()
		return FightRecord{Attacker: attacker, Defender: defender, Counter: counter}, err
	}
	if !out.Accepted {
		p.metrics.fights.WithLabelValues("attacker", "refused").Inc()
		return FightRecord{Attacker: attacker, Defender: defender, Counter: counter}, fmt.Errorf("%w: %s", ErrRefused, out.Refusal)
	}
	rec = settleWith(rule, attacker, defender, counter, me, seen, out)

	p.mu.Lock()
	switch {
	case rec.Mine.Hit:
		p.notice("event", "", fmt.Sprintf("You hit %s for %d.", name, rec.Mine.DefenderDamage))
	default:
		p.notice("event", "", fmt.Sprintf("You missed %s.", name))
	}
	if rec.Mine.AttackerDamage > 0 {
		p.notice("event", "", fmt.Sprintf("%s hit you for %d.", name, rec.Mine.AttackerDamage))
		if e, died := p.av.Damage(rec.Mine.AttackerDamage, rec.Defender); died {
			p.describe(e)
		}
	}
	if rec.DefenderDied {
		p.av.Rewarded()
		p.notice("event", "", fmt.Sprintf("%s was defeated by you.", name))
	}
	p.recordFight(rec)
	p.mu.Unlock()
	p.countFight("attacker", rec)
	if rec.Mismatch {
		p.reportMismatch(rec, name)
	}
	return rec, nil
}

// countFight counts a fought fight under the role and how the two sides'
// computations compared.
func (p *Peer) countFight(role string, rec FightRecord) {
	result := "fought"
	switch {
	case !rec.Settled:
		result = "unsettled"
	case rec.Mismatch:
		result = "mismatch"
	case rec.Stale:
		result = "stale"
	}
	p.metrics.fights.WithLabelValues(role, result).Inc()
}

// publicSelfLocked is the player's fight state as its last card published
// it (what every other player sees), or its real state before the first
// card. Caller holds p.mu.
func (p *Peer) publicSelfLocked() game.Fighter {
	if p.cardSeq == 0 || p.lastCardT.IsZero() {
		return p.av.Fighter()
	}
	return game.Fighter{Skill: p.lastCard.Skill, Health: p.lastCard.Health}
}

// handleFight is the defender's side.
func (p *Peer) handleFight(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(5 * time.Second))
	from := s.Conn().RemotePeer()
	if reason := p.admitStream(from); reason != "" {
		// Nothing is read from a peer without a login: not even the
		// frame its length prefix announces.
		p.metrics.fightRefusals.WithLabelValues(reason).Inc()
		s.Reset()
		return
	}
	p.mu.Lock()
	nonces := p.nonces
	p.mu.Unlock()
	a, err := readAttackWith(s, nonces)
	if err != nil {
		p.metrics.fightRefusals.WithLabelValues("malformed").Inc()
		p.log.Debug("bad attack", "from", from, "err", err)
		s.Reset()
		return
	}
	now := time.Now()
	var attackerPos *game.Vec
	for _, seen := range p.pos.View(now) {
		if seen.Player == from {
			attackerPos = &game.Vec{X: seen.Pos.X, Y: seen.Pos.Y}
		}
	}
	p.mu.Lock()
	out, rec, name := p.defend(from, a, attackerPos, now)
	p.mu.Unlock()
	if err := WriteOutcome(s, out); err != nil {
		s.Reset()
	}
	if !out.Accepted {
		return
	}
	// The damage is applied; the attacker's settle only tells whether the
	// two computations agree.
	if theirs, err := a.ReadSettle(); err == nil {
		rec = Settled(rec, theirs)
	} else {
		p.log.Debug("attacker did not settle", "from", from, "err", err)
	}
	p.mu.Lock()
	p.recordFight(rec)
	p.mu.Unlock()
	p.countFight("defender", rec)
	if rec.Mismatch {
		p.reportMismatch(rec, name)
	}
}

// admitStream is "" if the peer at the other end of a direct stream may be
// heard (with an account: it holds a valid login token for its peer ID),
// else the reason it may not. It waits a little for a token being fetched.
func (p *Peer) admitStream(from peer.ID) string {
	if p.admit == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	switch p.admit.Wait(ctx, from) {
	case guard.Admitted:
		return ""
	case guard.Refused:
		return "bad_token"
	default:
		return "token_pending"
	}
}

// defend decides an attack and applies it; the caller records it once the
// attacker has settled. Caller holds p.mu.
func (p *Peer) defend(from peer.ID, a *Incoming, attackerPos *game.Vec, now time.Time) (*playpb.Outcome, FightRecord, string) {
	name := p.nameOf(from)
	refuse := func(reason, why string) (*playpb.Outcome, FightRecord, string) {
		p.metrics.fights.WithLabelValues("defender", "refused").Inc()
		p.metrics.fightRefusals.WithLabelValues(reason).Inc()
		return RefuseAttack(why), FightRecord{}, name
	}
	self := p.av.Player()
	// Positions are a position interval or two old and dead-reckoned: allow
	// a second of walking on top of the fight range.
	slack := p.cfg.Game.MaxSpeed * int32(p.cfg.Game.TickRate)
	limit := int64(p.cfg.Game.FightRangeUnits+slack) * int64(p.cfg.Game.FightRangeUnits+slack)
	last, known := p.attackers[from]
	minGap := time.Duration(p.cfg.Game.ActionCooldownTicks) * time.Second / time.Duration(p.cfg.Game.TickRate) / 2
	card := p.cards[from]
	switch {
	case !self.Alive:
		return refuse("defender_down", "the defender is down")
	case attackerPos == nil:
		return refuse("attacker_unseen", "the attacker is not in sight")
	case game.DistSq(self.Pos, *attackerPos) > limit:
		return refuse("out_of_range", "out of range")
	case card == nil:
		// The defender fights the attacker as it publicly is, never as
		// the attack says it is; without its card there is nothing to go
		// by.
		return refuse("attacker_card_unseen", "the attacker's card has not reached the defender yet")
	case known && a.Counter <= last.counter:
		return refuse("stale_counter", fmt.Sprintf("fight counter %d is not after %d", a.Counter, last.counter))
	case known && now.Sub(last.at) < minGap:
		return refuse("too_fast", "attacking faster than the cooldown")
	}
	p.rememberAttackerLocked(from, attackSeen{counter: a.Counter, at: now})
	attackerSeen := game.Fighter{Skill: card.Skill, Health: card.Health}
	out, rec := defendWith(p.rule, game.PlayerID(from.String()), p.id, a, attackerSeen, p.publicSelfLocked())
	if rec.Mine.Hit {
		p.notice("event", "", fmt.Sprintf("%s hit you for %d.", name, rec.Mine.DefenderDamage))
		if e, died := p.av.Damage(rec.Mine.DefenderDamage, rec.Attacker); died {
			rec.DefenderDied = true
			out.DefenderDied = true
			p.describe(e)
		}
	} else {
		p.notice("event", "", fmt.Sprintf("%s attacked you and missed.", name))
	}
	return out, rec, name
}

// rememberAttackerLocked records an attacker's fight, forgetting those
// not heard from for attackerMemory and, past maxAttackers, the one heard
// from longest ago. Caller holds p.mu.
func (p *Peer) rememberAttackerLocked(from peer.ID, seen attackSeen) {
	if _, ok := p.attackers[from]; !ok && len(p.attackers) >= maxAttackers {
		p.pruneAttackersLocked(seen.at)
		if len(p.attackers) >= maxAttackers {
			var oldest peer.ID
			for id, a := range p.attackers {
				if oldest == "" || a.at.Before(p.attackers[oldest].at) {
					oldest = id
				}
			}
			delete(p.attackers, oldest)
		}
	}
	p.attackers[from] = seen
}

// pruneAttackersLocked forgets attackers not heard from for
// attackerMemory. Caller holds p.mu.
func (p *Peer) pruneAttackersLocked(now time.Time) {
	for id, a := range p.attackers {
		if now.Sub(a.at) > attackerMemory {
			delete(p.attackers, id)
		}
	}
}

// recordFight keeps rec for Fights. Caller holds p.mu.
func (p *Peer) recordFight(rec FightRecord) {
	p.fights = append(p.fights, rec)
	if len(p.fights) > maxFights {
		p.fights = append(p.fights[:0], p.fights[len(p.fights)-maxFights:]...)
	}
}

// Fights returns the recent fights this peer took part in, oldest first.
func (p *Peer) Fights() []FightRecord {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]FightRecord(nil), p.fights...)
}

// reportMismatch flags two computations of one fight that disagree: a bug,
// a different build, or a cheat.
func (p *Peer) reportMismatch(rec FightRecord, name string) {
	p.metrics.fightMismatches.Inc()
	p.log.Warn("fight outcome mismatch", "attacker", rec.Attacker, "defender", rec.Defender,
		"counter", rec.Counter, "draw", rec.Draw, "mine", rec.Mine, "theirs", rec.Theirs)
	p.mu.Lock()
	p.addMessage(webui.Message{Kind: "system", Text: fmt.Sprintf("Fight with %s: the two sides computed different outcomes (reported).", name)})
	p.mu.Unlock()
}
