package play

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/regions/position"
)

// gameLoop is the player's own game. At the world's tick rate it takes the
// client's held input (or the bot's), steps the avatar in its movement
// world (terrain and collision; hunger, death and respawn by the game's
// rules), hands the new position to the position service, refreshes the
// smoothed view of the other players the position service hears, and
// passes the tick's eat, pick-up and fight on (act) to the parts that
// carry them out over the network.
//
// Its lock guards the avatar and its movement world, the object table the
// object cache writes into included (with).
type gameLoop struct {
	game game.Config
	id   game.PlayerID
	pos  *position.Service
	msgs *messageLog
	life lifetime

	// What the loop asks of the other parts; the Peer sets them before
	// start. None is called with mu held.
	cards  func(ids []peer.ID) map[peer.ID]cardState // the cards held of those players
	loaded func() map[game.RegionCoord]bool          // the regions whose objects are current
	act    func(in game.Input)                       // the tick's eat, pick-up or fight
	nameOf func(id peer.ID) string                   // a player's shown name

	mu        sync.Mutex
	av        *Avatar
	input     inputLatch
	bot       *game.Bot
	others    []other
	smoothers map[peer.ID]*game.Smoother

	// relocationsSent is the avatar's relocation count the position
	// service last heard of; only the loop's goroutine touches it.
	relocationsSent uint32
}

// other is another player as this peer shows it.
type other struct {
	id  peer.ID
	pos game.Vec // smoothed, dead-reckoned
	vel game.Vec // units per tick
	// card is its card as the last tick found it; nil before the first.
	card *cardState
}

func newGameLoop(cfg game.Config, id game.PlayerID, av *Avatar, bot *game.Bot, pos *position.Service, msgs *messageLog) *gameLoop {
	return &gameLoop{
		game: cfg, id: id, av: av, bot: bot, pos: pos, msgs: msgs, life: newLifetime(),
		smoothers: map[peer.ID]*game.Smoother{},
	}
}

func (g *gameLoop) start() {
	g.life.spawn(func() {
		tick := time.NewTicker(time.Second / time.Duration(g.game.TickRate))
		defer tick.Stop()
		for {
			select {
			case <-g.life.ctx.Done():
				return
			case now := <-tick.C:
				g.step(now)
			}
		}
	})
}

func (g *gameLoop) stop() { g.life.end() }

// step is one tick.
func (g *gameLoop) step(now time.Time) {
	seen := g.pos.View(now)
	ids := make([]peer.ID, len(seen))
	for i, s := range seen {
		ids[i] = s.Player
	}
	cards, loaded := g.cards(ids), g.loaded()
	g.mu.Lock()
	g.updateOthers(seen, cards)
	in := g.input.take(g.id)
	if g.bot != nil {
		in = g.bot.Next(g.observe(loaded))
	}
	events := g.av.Step(in.MoveX, in.MoveY)
	self := g.av.Player()
	relocations := g.av.Relocations()
	g.mu.Unlock()
	for _, e := range events {
		g.describe(e)
	}
	if relocations != g.relocationsSent {
		g.relocationsSent = relocations
		g.pos.Relocate(position.Vec{X: self.Pos.X, Y: self.Pos.Y})
	}
	tr := int32(g.game.TickRate)
	g.pos.MoveAt(position.Vec{X: self.Pos.X, Y: self.Pos.Y}, position.Vec{X: self.Vel.X * tr, Y: self.Vel.Y * tr}, now)
	if in.Eat || in.PickUp || in.Fight {
		g.act(in)
	}
}

// updateOthers refreshes the smoothed view of other players from the
// position service's dead-reckoned view. Caller holds g.mu.
func (g *gameLoop) updateOthers(seen []position.Seen, cards map[peer.ID]cardState) {
	g.others = g.others[:0]
	keep := make(map[peer.ID]bool, len(seen))
	tr := int32(g.game.TickRate)
	for _, s := range seen {
		sm := g.smoothers[s.Player]
		if sm == nil {
			sm = game.NewSmoother()
			g.smoothers[s.Player] = sm
		}
		keep[s.Player] = true
		o := other{id: s.Player, pos: sm.Update(game.Vec{X: s.Pos.X, Y: s.Pos.Y}), vel: game.Vec{X: s.Vel.X / tr, Y: s.Vel.Y / tr}}
		if c, ok := cards[s.Player]; ok {
			o.card = &c
		}
		g.others = append(g.others, o)
	}
	for id := range g.smoothers {
		if !keep[id] {
			delete(g.smoothers, id)
		}
	}
}

// observe builds the bot's observation. Caller holds g.mu.
func (g *gameLoop) observe(loaded map[game.RegionCoord]bool) game.BotObservation {
	const sight = 8 * game.TileUnits
	self := g.av.Player()
	obs := game.BotObservation{Tick: g.av.Tick(), Self: self}
	in := func(rc game.RegionCoord) bool { return loaded[rc] }
	if e, ok := g.av.Nearest(game.ObjectFood, sight, in); ok {
		obs.Food, obs.HasFood = e.Pos, true
	}
	if e, ok := g.av.Nearest(game.ObjectHealthPack, sight, in); ok {
		obs.Pack, obs.HasPack = e.Pos, true
	}
	best := int64(-1)
	for _, o := range g.others {
		if o.card != nil && !o.card.Alive {
			continue
		}
		if d := game.DistSq(self.Pos, o.pos); d <= sight*sight && (best < 0 || d < best) {
			best, obs.Opponent, obs.HasOpponent = d, o.pos, true
		}
	}
	return obs
}

// describe turns an avatar event into a notice. Called without g.mu.
func (g *gameLoop) describe(e game.Event) {
	switch e.Kind {
	case game.EventDied:
		if e.Other != "" {
			g.msgs.notice("event", fmt.Sprintf("You were defeated by %s.", g.nameOf(peer.ID(e.Other))))
		} else {
			g.msgs.notice("event", "You starved.")
		}
	case game.EventRespawned:
		g.msgs.notice("event", "You are back on your feet.")
	case game.EventRegionChanged:
		g.msgs.notice("event", fmt.Sprintf("Entered region %s.", e.To))
	}
}

// setInput records the client's input for the next tick: the direction is
// held until changed; eat, pick-up and fight happen once.
func (g *gameLoop) setInput(in game.Input) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.input.apply(in)
}

// with runs f with the avatar while no step runs.
func (g *gameLoop) with(f func(av *Avatar)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f(g.av)
}

func (g *gameLoop) player() game.Player {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.av.Player()
}

func (g *gameLoop) region() game.RegionCoord {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.av.Region()
}

// fighter is the player's fight-relevant state.
func (g *gameLoop) fighter() game.Fighter {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.av.Fighter()
}

// terrain is the movement world for its terrain and shape only (Map,
// Neighbours, RegionOf), which never change and need no lock.
func (g *gameLoop) terrain() *game.World { return g.av.World() }

// damage takes amount of health, dealt by by, and describes a fatal blow.
func (g *gameLoop) damage(amount int32, by game.PlayerID) bool {
	g.mu.Lock()
	e, died := g.av.Damage(amount, by)
	g.mu.Unlock()
	if died {
		g.describe(e)
	}
	return died
}

// otherIDs lists the players in view.
func (g *gameLoop) otherIDs() []peer.ID {
	g.mu.Lock()
	defer g.mu.Unlock()
	ids := make([]peer.ID, len(g.others))
	for i, o := range g.others {
		ids[i] = o.id
	}
	return ids
}

// target picks the target of a fight (the named player, else the nearest
// living one within limit units) and starts the fight cooldown.
func (g *gameLoop) target(named string, limit int32) (other, uint64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	self := g.av.Player()
	within := int64(limit) * int64(limit)
	var best other
	var bestD int64 = -1
	for _, o := range g.others {
		if (o.card != nil && !o.card.Alive) || (named != "" && o.id.String() != named) {
			continue
		}
		if d := game.DistSq(self.Pos, o.pos); d <= within && (bestD < 0 || d < bestD) {
			best, bestD = o, d
		}
	}
	if bestD < 0 {
		return other{}, 0, false
	}
	counter, ok := g.av.TryFight()
	if !ok {
		return other{}, 0, false
	}
	return best, counter, true
}

// view fills the loop's part of the client's view: the player, the
// others, and the objects of the loaded regions around the player.
func (g *gameLoop) view(v *View, loaded map[game.RegionCoord]bool) game.RegionCoord {
	g.mu.Lock()
	defer g.mu.Unlock()
	w := g.av.World()
	self := g.av.Player()
	here := w.RegionOf(self.Pos)
	v.Tick, v.Self, v.World = g.av.Tick(), playerViewOf(self), g.game
	for _, rc := range w.Neighbours(here) {
		v.Regions = append(v.Regions, rc)
		if !loaded[rc] {
			continue
		}
		for _, e := range w.Objects(rc) {
			if e.Object.Amount > 0 {
				v.Objects = append(v.Objects, e)
			}
		}
	}
	for _, o := range g.others {
		pv := PlayerView{
			ID: o.id.String(), Name: shortID(o.id), X: o.pos.X, Y: o.pos.Y, VX: o.vel.X, VY: o.vel.Y,
			Health: game.MaxHealth, Skill: 1, Alive: true,
		}
		if c := o.card; c != nil {
			pv.Name, pv.Health, pv.Hunger, pv.Score, pv.Skill, pv.Alive = c.Name, c.Health, c.Hunger, c.Score, c.Skill, c.Alive
		}
		v.Players = append(v.Players, pv)
	}
	return here
}

// inputLatch holds what the client asked for between two ticks: the
// direction until the client changes it, eat, pick-up and fight once, on
// the next tick.
type inputLatch struct {
	held    game.Input // direction
	pending game.Input // one-shot actions
}

// apply records an input from the client after checking its target.
func (l *inputLatch) apply(in game.Input) error {
	if len(in.Target) > game.MaxPlayerIDLen || !utf8.ValidString(string(in.Target)) {
		return errors.New("input: target too long or not UTF-8")
	}
	l.held.MoveX, l.held.MoveY = in.MoveX, in.MoveY
	l.pending.Eat = l.pending.Eat || in.Eat
	l.pending.PickUp = l.pending.PickUp || in.PickUp
	if in.Fight {
		l.pending.Fight, l.pending.Target = true, in.Target
	}
	return nil
}

// take returns player id's input for this tick and clears the one-shot
// actions.
func (l *inputLatch) take(id game.PlayerID) game.Input {
	in := l.held
	in.Player = id
	in.Eat, in.PickUp, in.Fight, in.Target = l.pending.Eat, l.pending.PickUp, l.pending.Fight, l.pending.Target
	l.pending = game.Input{}
	return in
}

// shortID is the last six characters of a peer ID, as the status line and
// unnamed players show it.
func shortID(id peer.ID) string {
	s := id.String()
	return s[max(len(s)-6, 0):]
}
