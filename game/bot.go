package game

// BotObservation is what a bot looks at before choosing its next input.
type BotObservation struct {
	Tick uint64
	Self Player
	// Food is the nearest food with nutrition left, if HasFood.
	Food    Vec
	HasFood bool
	// Pack is the nearest health pack not yet taken, if HasPack.
	Pack    Vec
	HasPack bool
	// Opponent is the nearest other living player, if HasOpponent.
	Opponent    Vec
	HasOpponent bool
}

// botSight is how far a bot looks for food, packs and opponents.
const botSight = 8 * TileUnits

// BotObserve builds the observation for player id from the world.
func (w *World) BotObserve(id PlayerID) (BotObservation, bool) {
	i, ok := w.find(id)
	if !ok {
		return BotObservation{}, false
	}
	p := &w.players[i]
	obs := BotObservation{Tick: w.tick, Self: *p}
	if e, ok := w.nearestEntry(p.Pos, ObjectFood, botSight); ok {
		obs.Food, obs.HasFood = e.Pos, true
	}
	if e, ok := w.nearestEntry(p.Pos, ObjectHealthPack, botSight); ok {
		obs.Pack, obs.HasPack = e.Pos, true
	}
	limit := int64(botSight) * int64(botSight)
	best := int64(-1)
	for j := range w.players {
		o := &w.players[j]
		if o.ID == id || !o.Alive {
			continue
		}
		if d := DistSq(p.Pos, o.Pos); d <= limit && (best < 0 || d < best) {
			best, obs.Opponent, obs.HasOpponent = d, o.Pos, true
		}
	}
	return obs, true
}

// BotPace sets the rhythm of the SimMud workload, in seconds on average.
type BotPace struct {
	// RegionChangeSeconds is the mean time a bot stays in one region.
	RegionChangeSeconds int
	// EatSeconds and FightSeconds are the mean gaps between eat attempts
	// and between fight attempts.
	EatSeconds, FightSeconds int
}

// DefaultBotPace is the SimMud model: a region change about every 40 s and
// an eat and a fight attempt about every 5 s each.
func DefaultBotPace() BotPace {
	return BotPace{RegionChangeSeconds: 40, EatSeconds: 5, FightSeconds: 5}
}

// Bot drives one player with the SimMud-style workload: a random walk,
// trips to a neighbouring region, and eat and fight attempts, every gap
// drawn uniformly between half and one and a half times its mean. A bot is
// deterministic: the same seed and observations give the same inputs.
type Bot struct {
	id   PlayerID
	cfg  Config
	pace BotPace
	rng  *Rand

	started                        bool
	nextRegionChange, nextEat      uint64
	nextFight                      uint64
	travelling                     bool
	target                         RegionCoord
	travelUntil                    uint64
	dirX, dirY                     int8
	dirUntil, escapeUntil, seekEnd uint64
	chaseEnd                       uint64
	lastPos                        Vec
	stuck                          int
}

// NewBot returns a bot for player id in a world with config cfg.
func NewBot(cfg Config, id PlayerID, seed uint64, pace BotPace) *Bot {
	return &Bot{id: id, cfg: cfg, pace: pace, rng: NewRand(deriveString("overworld/bot", string(id), seed))}
}

// ID is the player the bot drives.
func (b *Bot) ID() PlayerID { return b.id }

// draw returns a gap around mean seconds, in ticks.
func (b *Bot) draw(meanSeconds int) uint64 {
	mean := max(meanSeconds*b.cfg.TickRate, 2)
	return uint64(b.rng.Range(mean/2, mean*3/2))
}

// Next returns the bot's input for the coming tick.
func (b *Bot) Next(obs BotObservation) Input {
	t := obs.Tick
	self := obs.Self
	in := Input{Player: b.id}
	if !b.started {
		b.started = true
		b.nextRegionChange = t + b.draw(b.pace.RegionChangeSeconds)
		b.nextEat = t + b.draw(b.pace.EatSeconds)
		b.nextFight = t + b.draw(b.pace.FightSeconds)
		b.lastPos = self.Pos
	}
	if !self.Alive {
		b.travelling, b.stuck = false, 0
		b.lastPos = self.Pos
		return in
	}
	moving := b.dirX != 0 || b.dirY != 0
	if moving && self.Pos == b.lastPos {
		b.stuck++
	} else {
		b.stuck = 0
	}
	b.lastPos = self.Pos
	here := RegionOf(b.cfg, self.Pos)

	if t >= b.nextRegionChange {
		b.nextRegionChange = t + b.draw(b.pace.RegionChangeSeconds)
		var options []RegionCoord
		for _, d := range [4][2]int{{1, 0}, {-1, 0}, {0, 1}, {0, -1}} {
			n := RegionCoord{here.X + d[0], here.Y + d[1]}
			if n.X >= 0 && n.Y >= 0 && n.X < b.cfg.RegionsX && n.Y < b.cfg.RegionsY {
				options = append(options, n)
			}
		}
		if len(options) > 0 {
			b.target = options[b.rng.IntN(len(options))]
			b.travelling = true
			b.travelUntil = t + uint64(30*b.cfg.TickRate)
		}
	}
	if b.travelling && (here == b.target || t >= b.travelUntil) {
		b.travelling = false
	}
	if t >= b.nextEat {
		b.nextEat = t + b.draw(b.pace.EatSeconds)
		in.Eat, in.PickUp = true, true
		if obs.HasFood {
			b.seekEnd = t + uint64(4*b.cfg.TickRate)
		}
	}
	if t >= b.nextFight {
		b.nextFight = t + b.draw(b.pace.FightSeconds)
		in.Fight = true
		if obs.HasOpponent {
			b.chaseEnd = t + uint64(3*b.cfg.TickRate)
		}
	}
	fightRange := int64(b.cfg.FightRangeUnits) * int64(b.cfg.FightRangeUnits)
	hurt := self.Health < MaxHealth/2 && obs.HasPack

	switch {
	case b.stuck >= 8:
		// Pressed against a wall: go somewhere else for a second.
		b.stuck = 0
		b.randomDirection()
		b.escapeUntil = t + uint64(b.cfg.TickRate)
	case t < b.escapeUntil:
	case hurt:
		// Wounded: go for the nearest health pack and take it.
		b.dirX, b.dirY = steer(self.Pos, obs.Pack)
		in.PickUp = true
	case t < b.chaseEnd && obs.HasOpponent:
		if DistSq(self.Pos, obs.Opponent) <= fightRange {
			in.Fight = true
			b.chaseEnd = 0
		} else {
			b.dirX, b.dirY = steer(self.Pos, obs.Opponent)
		}
	case t < b.seekEnd && obs.HasFood:
		if DistSq(self.Pos, obs.Food) <= int64(b.cfg.ReachUnits/2)*int64(b.cfg.ReachUnits/2) {
			b.dirX, b.dirY = 0, 0
			in.Eat = true
			b.seekEnd = 0
		} else {
			b.dirX, b.dirY = steer(self.Pos, obs.Food)
		}
	case b.travelling:
		ru := b.cfg.RegionUnits()
		centre := Vec{int32(b.target.X)*ru + ru/2, int32(b.target.Y)*ru + ru/2}
		b.dirX, b.dirY = steer(self.Pos, centre)
	case t >= b.dirUntil:
		b.randomDirection()
		b.dirUntil = t + uint64(b.rng.Range(b.cfg.TickRate, 3*b.cfg.TickRate))
	}
	in.MoveX, in.MoveY = b.dirX, b.dirY
	return in
}

func (b *Bot) randomDirection() {
	// One of the eight compass directions, or standing still.
	k := b.rng.IntN(9)
	b.dirX, b.dirY = int8((k%3-1)*127), int8((k/3-1)*127)
}

// steer returns the full-throttle move input pointing from from to to.
func steer(from, to Vec) (int8, int8) {
	d := to.Sub(from)
	m := max(abs32(d.X), abs32(d.Y))
	if m == 0 {
		return 0, 0
	}
	return int8(int64(d.X) * 127 / int64(m)), int8(int64(d.Y) * 127 / int64(m))
}
