package game

// The rules that change one player's bars, each written once. World.Advance
// runs them for every player of the world; a P2P peer (game/play's Avatar),
// which is the only authority over its own character, and the simulator's
// bots run the same functions on their own copy of a player, so a rule
// change reaches every mode at once.

// StartingSkill is a new character's skill.
const StartingSkill = 10

// NewPlayer is a new character standing at pos: unhurt, fed, at the
// starting skill. Joins (World.AddPlayer, CommandJoin) start from it.
func NewPlayer(id PlayerID, name string, pos Vec) Player {
	p := Player{ID: id, Name: name, Skill: StartingSkill}
	Revive(&p, pos)
	return p
}

// FreshFighter is what a fight assumes of a player whose state it has not
// seen: a new character.
func FreshFighter() Fighter { return Fighter{Skill: StartingSkill, Health: MaxHealth} }

// Metabolize applies the hunger rule of tick t to p: every HungerTicks a
// living player's hunger rises by one; a starving player (hunger at
// MaxHunger) loses one health each interval, and a well-fed one (hunger
// below half) heals one health every other interval. It does not kill: the
// caller checks Health and calls Kill, as the world does after the fights.
func Metabolize(cfg Config, p *Player, t uint64) {
	if !p.Alive || cfg.HungerTicks == 0 || t%cfg.HungerTicks != 0 {
		return
	}
	if p.Hunger < MaxHunger {
		p.Hunger++
	}
	switch {
	case p.Hunger >= MaxHunger:
		p.Health--
	case p.Hunger < MaxHunger/2 && p.Health < MaxHealth && (t/cfg.HungerTicks)%2 == 0:
		p.Health++
	}
}

// ApplyDamage takes amount health from p and reports whether the blow was
// fatal (health at or below zero). The death itself is Kill's.
func ApplyDamage(p *Player, amount int32) (fatal bool) {
	p.Health -= amount
	return p.Health <= 0
}

// Kill applies the death rule at tick t: the player drops to zero health,
// stops, loses five points of score and may respawn RespawnTicks later.
// killer is the player who dealt the last blow ("" for starvation); the
// caller credits it with Reward. The returned event is the death.
func Kill(cfg Config, p *Player, t uint64, killer PlayerID) Event {
	p.Health, p.Alive, p.Vel = 0, false, Vec{}
	p.Deaths++
	p.RespawnAt = t + max(cfg.RespawnTicks, 1)
	p.RespawnHome = false
	p.Score = max(p.Score-5, 0)
	return Event{Tick: t, Kind: EventDied, Player: p.ID, Other: killer}
}

// Reward credits a player who defeated another: ten points of score and
// one of skill.
func Reward(p *Player) {
	p.Score += 10
	p.Skill = min(p.Skill+1, MaxSkill)
}

// RespawnDue reports whether dead player p comes back at tick t.
func RespawnDue(p Player, t uint64) bool { return !p.Alive && t >= p.RespawnAt }

// Revive applies the respawn rule: p stands at pos, unhurt and fed. Where
// pos is (a spawn point of the region it fell in, or of its home) is the
// world's choice; see World.RespawnPoint.
func Revive(p *Player, pos Vec) {
	p.Pos, p.Vel = pos, Vec{}
	p.Health, p.Hunger = MaxHealth, 0
	p.Alive, p.RespawnAt, p.RespawnHome = true, 0, false
}

// FeedPlayer applies the effect of eating units of nutrition: hunger falls
// by 20 per unit and the score rises by one per unit. A P2P peer calls it
// once the coordinator has committed the eat.
func FeedPlayer(p *Player, units int32) {
	p.Hunger = max(p.Hunger-20*units, 0)
	p.Score += units
}

// Heal applies a health pack of amount to a living player, up to
// MaxHealth.
func Heal(p *Player, amount int32) {
	if p.Alive && amount > 0 {
		p.Health = min(p.Health+amount, MaxHealth)
	}
}

// EatReady reports whether p may eat at tick t (alive, cooldown over).
func EatReady(p Player, t uint64) bool { return p.Alive && t >= p.EatReadyAt }

// StartEatCooldown starts the gap after an eat at tick t.
func StartEatCooldown(cfg Config, p *Player, t uint64) {
	p.EatReadyAt = t + cfg.ActionCooldownTicks
}

// FightReady reports whether p may attack at tick t (alive, cooldown
// over).
func FightReady(p Player, t uint64) bool { return p.Alive && t >= p.FightReadyAt }

// StartFight opens p's next fight at tick t: it starts the cooldown and
// returns the fight's counter (which, with both IDs, seeds FightOutcome).
func StartFight(cfg Config, p *Player, t uint64) (counter uint64) {
	counter = p.FightCounter
	p.FightCounter++
	p.FightReadyAt = t + cfg.ActionCooldownTicks
	return counter
}

// Character is the part of a player that outlives a session: what the
// account server keeps between logins and what a join restores.
type Character struct {
	// Pos is where the player was; a join puts it back there if its box
	// fits, else at a spawn point of that region.
	Pos                          Vec
	Health, Hunger, Score, Skill int32
}

// CharacterOf is the character to save for p.
func CharacterOf(p Player) Character {
	return Character{Pos: p.Pos, Health: max(p.Health, 0), Hunger: p.Hunger, Score: p.Score, Skill: p.Skill}
}

// RestoreCharacter sets p's bars from a saved character, clamped to their
// ranges, and brings p to life. A character saved dead comes back at full
// health and fed; one saved starving comes back starving. Placement (c.Pos)
// is the caller's: it needs the terrain.
func RestoreCharacter(p *Player, c Character) {
	health, hunger := c.Health, c.Hunger
	if health <= 0 || health > MaxHealth {
		health, hunger = MaxHealth, 0
	}
	p.Health = health
	p.Hunger = min(max(hunger, 0), MaxHunger)
	p.Score = max(c.Score, 0)
	p.Skill = min(max(c.Skill, 1), MaxSkill)
	p.Alive, p.RespawnAt, p.RespawnHome = true, 0, false
}
