package play

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/regions/guard"
	"github.com/overworld-p2p/overworld/regions/position"
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
// known, counter fresh, not faster than the cooldown): decideDefence, a
// pure function of what the defender knows, decides; handleFight is the
// stream adapter around it and duel.go's protocol pieces. Each side applies
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

// fights carries out the player's fights, both sides: the attacks the
// game loop asks for (tryAttack) and those other players open on the
// FightProtocol stream (handleFight). Its loop forgets attackers gone
// quiet.
type fights struct {
	game    game.Config
	id      game.PlayerID
	h       host.Host
	admit   *guard.Admission // nil: an open world
	pos     *position.Service
	loop    *gameLoop
	social  *social
	msgs    *messageLog
	metrics *metrics
	log     *slog.Logger
	life    lifetime

	mu        sync.Mutex
	fighting  bool // this player's attack is in flight
	attackers map[peer.ID]attackSeen
	records   []FightRecord
	rule      fightRule // game.FightOutcome; tests give a peer another
	nonces    io.Reader // fight nonces: crypto/rand; tests give a seeded one
}

func newFights(cfg game.Config, id game.PlayerID, h host.Host, admit *guard.Admission, pos *position.Service, loop *gameLoop, soc *social, msgs *messageLog, m *metrics, log *slog.Logger) *fights {
	return &fights{
		game: cfg, id: id, h: h, admit: admit, pos: pos, loop: loop, social: soc, msgs: msgs, metrics: m, log: log,
		life: newLifetime(), attackers: map[peer.ID]attackSeen{}, rule: game.FightOutcome, nonces: rand.Reader,
	}
}

func (f *fights) start() {
	f.h.SetStreamHandler(protocol.ID(FightProtocol), f.handleFight)
	f.life.spawn(func() {
		t := time.NewTicker(attackerMemory / 4)
		defer t.Stop()
		for {
			select {
			case <-f.life.ctx.Done():
				return
			case now := <-t.C:
				f.mu.Lock()
				f.pruneLocked(now)
				f.mu.Unlock()
			}
		}
	})
}

// stop refuses new fights and waits for those in flight.
func (f *fights) stop() {
	f.h.RemoveStreamHandler(protocol.ID(FightProtocol))
	f.life.end()
}

// plan picks the target of a fight (the named player, else the nearest
// living one in range) and starts the cooldown, unless a fight of this
// player's is in flight.
func (f *fights) plan(named string) (other, uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fighting {
		return other{}, 0, false
	}
	target, counter, ok := f.loop.target(named, f.game.FightRangeUnits)
	f.fighting = ok
	return target, counter, ok
}

// tryAttack carries out the fight of a tick in the background.
func (f *fights) tryAttack(named string) {
	target, counter, ok := f.plan(named)
	if !ok {
		return
	}
	if !f.life.spawn(func() {
		ctx, cancel := context.WithTimeout(f.life.ctx, 5*time.Second)
		defer cancel()
		_, _ = f.attack(ctx, target, counter)
	}) {
		f.mu.Lock()
		f.fighting = false
		f.mu.Unlock()
	}
}

// attack runs the attacker's side of one fight.
func (f *fights) attack(ctx context.Context, target other, counter uint64) (rec FightRecord, err error) {
	f.mu.Lock()
	rule, nonces := f.rule, f.nonces
	f.mu.Unlock()
	me := f.social.publicSelf()
	// A player whose card has not arrived is taken for a fresh one, as
	// the page shows it.
	seen := game.Fighter{Skill: 10, Health: game.MaxHealth}
	if c, ok := f.social.card(target.id); ok {
		seen = game.Fighter{Skill: c.Skill, Health: c.Health}
	}
	name := f.social.nameOf(target.id)
	defer func() {
		f.mu.Lock()
		f.fighting = false
		f.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			f.msgs.notice("event", fmt.Sprintf("Your attack on %s failed: %v", name, err))
		}
	}()

	attacker, defender := f.id, game.PlayerID(target.id.String())
	out, err := sendAttackWith(ctx, rule, nonces, f.h, target.id, NewAttack(attacker, defender, counter, me, seen))
	if errors.Is(err, ErrBadNonce) {
		f.metrics.fights.WithLabelValues("attacker", "bad_nonce").Inc()
		f.log.Warn("fight voided: the defender's nonce does not open its commitment", "defender", target.id)
		return FightRecord{Attacker: attacker, Defender: defender, Counter: counter}, err
	}
	if err != nil {
		f.metrics.fights.WithLabelValues("attacker", "failed").Inc()
		return FightRecord{Attacker: attacker, Defender: defender, Counter: counter}, err
	}
	if !out.Accepted {
		f.metrics.fights.WithLabelValues("attacker", "refused").Inc()
		return FightRecord{Attacker: attacker, Defender: defender, Counter: counter}, fmt.Errorf("%w: %s", ErrRefused, out.Refusal)
	}
	rec = settleWith(rule, attacker, defender, counter, me, seen, out)

	if rec.Mine.Hit {
		f.msgs.notice("event", fmt.Sprintf("You hit %s for %d.", name, rec.Mine.DefenderDamage))
	} else {
		f.msgs.notice("event", fmt.Sprintf("You missed %s.", name))
	}
	if rec.Mine.AttackerDamage > 0 {
		f.msgs.notice("event", fmt.Sprintf("%s hit you for %d.", name, rec.Mine.AttackerDamage))
		f.loop.damage(rec.Mine.AttackerDamage, rec.Defender)
	}
	if rec.DefenderDied {
		f.loop.with(func(av *Avatar) { av.Rewarded() })
		f.msgs.notice("event", fmt.Sprintf("%s was defeated by you.", name))
	}
	f.record(rec)
	f.count("attacker", rec)
	if rec.Mismatch {
		f.reportMismatch(rec, name)
	}
	return rec, nil
}

// count counts a fought fight under the role and how the two sides'
// computations compared.
func (f *fights) count(role string, rec FightRecord) {
	result := "fought"
	switch {
	case !rec.Settled:
		result = "unsettled"
	case rec.Mismatch:
		result = "mismatch"
	case rec.Stale:
		result = "stale"
	}
	f.metrics.fights.WithLabelValues(role, result).Inc()
}

// defence is what a defender knows when it decides an attack.
type defence struct {
	self game.Player // the defender now
	// attackerAt is where the defender sees the attacker; nil: not in
	// sight.
	attackerAt *game.Vec
	// card is the attacker's card as the defender holds it; nil: none yet.
	card *cardState
	// counter is the attack's; last the attacker's last accepted attack
	// (nil: none remembered).
	counter uint64
	last    *attackSeen
	now     time.Time
}

// decideDefence decides an attack from what the defender knows: "" to
// fight, else the refusal's reason (the metric's label) and the words the
// attacker gets. Positions are a position interval or two old and
// dead-reckoned, so the range allows a second of walking on top of the
// fight range; the cooldown check allows half the game's cooldown.
func decideDefence(cfg game.Config, d defence) (reason, why string) {
	slack := cfg.MaxSpeed * int32(cfg.TickRate)
	limit := int64(cfg.FightRangeUnits+slack) * int64(cfg.FightRangeUnits+slack)
	minGap := time.Duration(cfg.ActionCooldownTicks) * time.Second / time.Duration(cfg.TickRate) / 2
	switch {
	case !d.self.Alive:
		return "defender_down", "the defender is down"
	case d.attackerAt == nil:
		return "attacker_unseen", "the attacker is not in sight"
	case game.DistSq(d.self.Pos, *d.attackerAt) > limit:
		return "out_of_range", "out of range"
	case d.card == nil:
		// The defender fights the attacker as it publicly is, never as
		// the attack says it is; without its card there is nothing to go
		// by.
		return "attacker_card_unseen", "the attacker's card has not reached the defender yet"
	case d.last != nil && d.counter <= d.last.counter:
		return "stale_counter", fmt.Sprintf("fight counter %d is not after %d", d.counter, d.last.counter)
	case d.last != nil && d.now.Sub(d.last.at) < minGap:
		return "too_fast", "attacking faster than the cooldown"
	}
	return "", ""
}

// handleFight is the defender's side: the stream adapter around
// decideDefence and duel.go's protocol pieces.
func (f *fights) handleFight(s network.Stream) {
	if !f.life.enter() {
		s.Reset()
		return
	}
	defer f.life.leave()
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(5 * time.Second))
	from := s.Conn().RemotePeer()
	if reason := admitStream(f.life.ctx, f.admit, from); reason != "" {
		// Nothing is read from a peer without a login: not even the
		// frame its length prefix announces.
		f.metrics.fightRefusals.WithLabelValues(reason).Inc()
		s.Reset()
		return
	}
	f.mu.Lock()
	nonces := f.nonces
	f.mu.Unlock()
	a, err := readAttackWith(s, nonces)
	if err != nil {
		f.metrics.fightRefusals.WithLabelValues("malformed").Inc()
		f.log.Debug("bad attack", "from", from, "err", err)
		s.Reset()
		return
	}
	now := time.Now()
	d := defence{self: f.loop.player(), counter: a.Counter, now: now}
	for _, seen := range f.pos.View(now) {
		if seen.Player == from {
			d.attackerAt = &game.Vec{X: seen.Pos.X, Y: seen.Pos.Y}
		}
	}
	if c, ok := f.social.card(from); ok {
		d.card = &c
	}
	name := f.social.nameOf(from)
	mine := f.social.publicSelf()
	f.mu.Lock()
	if last, ok := f.attackers[from]; ok {
		d.last = &last
	}
	reason, why := decideDefence(f.game, d)
	if reason == "" {
		f.rememberLocked(from, attackSeen{counter: a.Counter, at: now})
	}
	rule := f.rule
	f.mu.Unlock()
	if reason != "" {
		f.metrics.fights.WithLabelValues("defender", "refused").Inc()
		f.metrics.fightRefusals.WithLabelValues(reason).Inc()
		if err := WriteOutcome(s, RefuseAttack(why)); err != nil {
			s.Reset()
		}
		return
	}
	attackerSeen := game.Fighter{Skill: d.card.Skill, Health: d.card.Health}
	out, rec := defendWith(rule, game.PlayerID(from.String()), f.id, a, attackerSeen, mine)
	if rec.Mine.Hit {
		f.msgs.notice("event", fmt.Sprintf("%s hit you for %d.", name, rec.Mine.DefenderDamage))
		if f.loop.damage(rec.Mine.DefenderDamage, rec.Attacker) {
			rec.DefenderDied = true
			out.DefenderDied = true
		}
	} else {
		f.msgs.notice("event", fmt.Sprintf("%s attacked you and missed.", name))
	}
	if err := WriteOutcome(s, out); err != nil {
		s.Reset()
	}
	// The damage is applied; the attacker's settle only tells whether the
	// two computations agree.
	if theirs, err := a.ReadSettle(); err == nil {
		rec = Settled(rec, theirs)
	} else {
		f.log.Debug("attacker did not settle", "from", from, "err", err)
	}
	f.record(rec)
	f.count("defender", rec)
	if rec.Mismatch {
		f.reportMismatch(rec, name)
	}
}

// rememberLocked records an attacker's fight, forgetting those not heard
// from for attackerMemory and, past maxAttackers, the one heard from
// longest ago. Caller holds f.mu.
func (f *fights) rememberLocked(from peer.ID, seen attackSeen) {
	if _, ok := f.attackers[from]; !ok && len(f.attackers) >= maxAttackers {
		f.pruneLocked(seen.at)
		if len(f.attackers) >= maxAttackers {
			var oldest peer.ID
			for id, a := range f.attackers {
				if oldest == "" || a.at.Before(f.attackers[oldest].at) {
					oldest = id
				}
			}
			delete(f.attackers, oldest)
		}
	}
	f.attackers[from] = seen
}

// pruneLocked forgets attackers not heard from for attackerMemory.
// Caller holds f.mu.
func (f *fights) pruneLocked(now time.Time) {
	for id, a := range f.attackers {
		if now.Sub(a.at) > attackerMemory {
			delete(f.attackers, id)
		}
	}
}

// record keeps rec for Fights.
func (f *fights) record(rec FightRecord) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.records = append(f.records, rec)
	if len(f.records) > maxFights {
		f.records = append(f.records[:0], f.records[len(f.records)-maxFights:]...)
	}
}

// list returns the recent fights, oldest first.
func (f *fights) list() []FightRecord {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]FightRecord(nil), f.records...)
}

// reportMismatch flags two computations of one fight that disagree: a bug,
// a different build, or a cheat.
func (f *fights) reportMismatch(rec FightRecord, name string) {
	f.metrics.fightMismatches.Inc()
	f.log.Warn("fight outcome mismatch", "attacker", rec.Attacker, "defender", rec.Defender,
		"counter", rec.Counter, "draw", rec.Draw, "mine", rec.Mine, "theirs", rec.Theirs)
	f.msgs.notice("system", fmt.Sprintf("Fight with %s: the two sides computed different outcomes (reported).", name))
}
