package game

import "encoding/binary"

// Fighter is what a fight needs to know about one side.
type Fighter struct {
	Skill  int32
	Health int32
}

// FightResult is the outcome of one attack. Both participants compute it on
// their own and compare.
type FightResult struct {
	// Hit reports whether the attack landed.
	Hit bool
	// DefenderDamage is the health the defender loses.
	DefenderDamage int32
	// AttackerDamage is the health the attacker loses to the counter-blow.
	AttackerDamage int32
	// Roll is the raw draw (0..99) that decided the hit, for logs and
	// mismatch reports.
	Roll int32
}

// FightSeed derives the random seed of the fight numbered counter between
// players a and b. The IDs are put in a canonical order first, so either
// side computes the same seed whichever way round it names them.
func FightSeed(a, b PlayerID, counter uint64) uint64 {
	if b < a {
		a, b = b, a
	}
	var buf []byte
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(a)))
	buf = append(buf, a...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(b)))
	buf = append(buf, b...)
	return deriveString("overworld/fight", string(buf), counter)
}

// FightOutcome computes the attack of attacker on defender, the fight
// numbered counter between them. The result depends only on its arguments:
// the chance to hit grows with the skill difference, damage grows with the
// attacker's skill and shrinks as the attacker is hurt, and a living
// defender strikes back.
func FightOutcome(attackerID, defenderID PlayerID, counter uint64, attacker, defender Fighter) FightResult {
	rng := NewRand(FightSeed(attackerID, defenderID, counter))
	skillA := clamp32(attacker.Skill, 1, MaxSkill)
	skillD := clamp32(defender.Skill, 1, MaxSkill)
	healthA := clamp32(attacker.Health, 0, MaxHealth)

	chance := clamp32(60+(skillA-skillD)*3, 10, 95)
	roll := int32(rng.IntN(100))
	res := FightResult{Roll: roll, Hit: roll < chance}
	if res.Hit {
		base := 6 + skillA/4 + int32(rng.IntN(8))
		// A wounded attacker hits softer: full strength at full health,
		// half strength near death.
		res.DefenderDamage = base * (MaxHealth + healthA) / (2 * MaxHealth)
		res.DefenderDamage = max(res.DefenderDamage, 1)
	}
	if defender.Health-res.DefenderDamage > 0 {
		res.AttackerDamage = 1 + skillD/8 + int32(rng.IntN(4))
	}
	return res
}

func clamp32(v, lo, hi int32) int32 {
	return max(lo, min(v, hi))
}
