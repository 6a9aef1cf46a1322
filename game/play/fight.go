package play

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play/playpb"
	"github.com/overworld-p2p/overworld/game/webui"
)

// A fight is settled by the two players alone, over a direct stream
// (FightProtocol). The attacker picks the counter (its own fight count),
// computes game.FightOutcome with its state and the defender's as its card
// last said, and sends all of it. The defender checks the attack (alive,
// attacker seen within fight range, counter fresh, not faster than the
// cooldown), computes the outcome with its real state, applies its own
// damage and answers with its state and result. The attacker recomputes
// with the defender's stated state and compares; either side that finds
// the two computations disagree for the same inputs reports a mismatch
// (metric, log, chat notice). Each side applies the damage to itself: each
// peer is the authority over its own player.

// FightRecord is one fight as this peer saw it.
type FightRecord struct {
	Attacker, Defender game.PlayerID
	Counter            uint64
	// Mine is this peer's computation, Theirs the other side's.
	Mine, Theirs game.FightResult
	Mismatch     bool
	// DefenderDied reports that the attack was fatal.
	DefenderDied bool
}

// maxFights is how many fight records a peer keeps.
const maxFights = 32

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
	me := p.av.Fighter()
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

	rec = FightRecord{Attacker: p.id, Defender: game.PlayerID(target.id.String()), Counter: counter}
	guess := game.FightOutcome(rec.Attacker, rec.Defender, counter, me, seen)
	out, err := SendAttack(ctx, p.h, target.id, &playpb.Attack{
		Counter: counter, Attacker: fighterOf(me), DefenderSeen: fighterOf(seen), Result: resultOf(guess),
	})
	if err != nil {
		p.metrics.fights.WithLabelValues("attacker", "failed").Inc()
		return rec, err
	}
	if !out.Accepted {
		p.metrics.fights.WithLabelValues("attacker", "refused").Inc()
		return rec, fmt.Errorf("%w: %s", ErrRefused, out.Refusal)
	}
	rec.Mine = game.FightOutcome(rec.Attacker, rec.Defender, counter, me, fighterFrom(out.Defender))
	rec.Theirs = resultFrom(out.Result)
	rec.Mismatch = rec.Mine != rec.Theirs || out.Mismatch
	rec.DefenderDied = out.DefenderDied

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
	p.metrics.fights.WithLabelValues("attacker", "fought").Inc()
	if rec.Mismatch {
		p.reportMismatch(rec, name)
	}
	return rec, nil
}

// handleFight is the defender's side.
func (p *Peer) handleFight(s network.Stream) {
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(5 * time.Second))
	from := s.Conn().RemotePeer()
	b, err := readFrame(bufio.NewReader(s), MaxFightMessageBytes)
	var a *playpb.Attack
	if err == nil {
		a, err = DecodeAttack(b)
	}
	if err != nil {
		p.metrics.fights.WithLabelValues("defender", "malformed").Inc()
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
	if err := writeFrame(s, out, MaxFightMessageBytes); err != nil {
		s.Reset()
	}
	if out.Accepted && rec.Mismatch {
		p.reportMismatch(rec, name)
	}
}

// defend decides an attack and applies it. Caller holds p.mu.
func (p *Peer) defend(from peer.ID, a *playpb.Attack, attackerPos *game.Vec, now time.Time) (*playpb.Outcome, FightRecord, string) {
	name := p.nameOf(from)
	refuse := func(why string) (*playpb.Outcome, FightRecord, string) {
		p.metrics.fights.WithLabelValues("defender", "refused").Inc()
		return &playpb.Outcome{Refusal: why}, FightRecord{}, name
	}
	self := p.av.Player()
	// Positions are a position interval or two old and dead-reckoned: allow
	// a second of walking on top of the fight range.
	slack := p.cfg.Game.MaxSpeed * int32(p.cfg.Game.TickRate)
	limit := int64(p.cfg.Game.FightRangeUnits+slack) * int64(p.cfg.Game.FightRangeUnits+slack)
	last, known := p.attackers[from]
	minGap := time.Duration(p.cfg.Game.ActionCooldownTicks) * time.Second / time.Duration(p.cfg.Game.TickRate) / 2
	switch {
	case !self.Alive:
		return refuse("the defender is down")
	case attackerPos == nil:
		return refuse("the attacker is not in sight")
	case game.DistSq(self.Pos, *attackerPos) > limit:
		return refuse("out of range")
	case known && a.Counter <= last.counter:
		return refuse(fmt.Sprintf("fight counter %d is not after %d", a.Counter, last.counter))
	case known && now.Sub(last.at) < minGap:
		return refuse("attacking faster than the cooldown")
	}
	p.attackers[from] = attackSeen{counter: a.Counter, at: now}
	mine := p.av.Fighter()
	rec := FightRecord{Attacker: game.PlayerID(from.String()), Defender: p.id, Counter: a.Counter}
	rec.Mine = game.FightOutcome(rec.Attacker, rec.Defender, a.Counter, fighterFrom(a.Attacker), mine)
	rec.Theirs = resultFrom(a.Result)
	// The attacker's own result counts only if it used the defender's
	// real state; a stale card legitimately gives another result.
	if proto.Equal(a.DefenderSeen, fighterOf(mine)) {
		rec.Mismatch = rec.Mine != rec.Theirs
	} else {
		rec.Theirs = rec.Mine
	}
	if rec.Mine.Hit {
		p.notice("event", "", fmt.Sprintf("%s hit you for %d.", name, rec.Mine.DefenderDamage))
		if e, died := p.av.Damage(rec.Mine.DefenderDamage, rec.Attacker); died {
			rec.DefenderDied = true
			p.describe(e)
		}
	} else {
		p.notice("event", "", fmt.Sprintf("%s attacked you and missed.", name))
	}
	p.recordFight(rec)
	p.metrics.fights.WithLabelValues("defender", "fought").Inc()
	return &playpb.Outcome{
		Accepted: true, Defender: fighterOf(mine), Result: resultOf(rec.Mine),
		Mismatch: rec.Mismatch, DefenderDied: rec.DefenderDied,
	}, rec, name
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
		"counter", rec.Counter, "mine", rec.Mine, "theirs", rec.Theirs)
	p.mu.Lock()
	p.addMessage(webui.Message{Kind: "system", Text: fmt.Sprintf("Fight with %s: the two sides computed different outcomes (reported).", name)})
	p.mu.Unlock()
}
