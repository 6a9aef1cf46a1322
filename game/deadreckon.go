package game

// Extrapolate dead-reckons a remote player: it moves pos along vel (units
// per tick) for elapsedMillis, at tickRate ticks per second. Extrapolation
// stops after maxMillis so that a silent player does not drift off forever,
// and a velocity above one tile per tick (which no legal player has) is
// clamped, so a hostile update cannot overflow the result.
func Extrapolate(pos, vel Vec, elapsedMillis int64, tickRate int, maxMillis int64) Vec {
	if elapsedMillis <= 0 || maxMillis <= 0 {
		return pos
	}
	vel = Vec{clamp32(vel.X, -TileUnits, TileUnits), clamp32(vel.Y, -TileUnits, TileUnits)}
	maxMillis = min(maxMillis, 10_000)
	tickRate = max(min(tickRate, 1000), 1)
	elapsedMillis = min(elapsedMillis, maxMillis)
	dx := int64(vel.X) * elapsedMillis * int64(tickRate) / 1000
	dy := int64(vel.Y) * elapsedMillis * int64(tickRate) / 1000
	return Vec{pos.X + int32(dx), pos.Y + int32(dy)}
}

// Smoother blends the shown position of a remote player toward its
// dead-reckoned position, so a correction from a new update glides instead
// of jumping; a correction larger than SnapUnits jumps at once (a teleport
// or respawn).
type Smoother struct {
	// Shown is the position currently displayed.
	Shown Vec
	// Num/Den is the fraction of the remaining gap closed per Update.
	Num, Den int32
	// SnapUnits is the gap beyond which Update jumps straight to the target.
	SnapUnits int32
	started   bool
}

// NewSmoother returns a smoother closing a quarter of the gap per frame and
// snapping beyond three tiles.
func NewSmoother() *Smoother {
	return &Smoother{Num: 1, Den: 4, SnapUnits: 3 * TileUnits}
}

// Update moves Shown toward target and returns the new Shown.
func (s *Smoother) Update(target Vec) Vec {
	gap := target.Sub(s.Shown)
	if !s.started || gap.LenSq() > int64(s.SnapUnits)*int64(s.SnapUnits) || s.Den <= 0 {
		s.Shown, s.started = target, true
		return s.Shown
	}
	step := Vec{gap.X * s.Num / s.Den, gap.Y * s.Num / s.Den}
	// Integer division can stall a tiny gap at zero; always make progress.
	if step.X == 0 {
		step.X = sign32(gap.X)
	}
	if step.Y == 0 {
		step.Y = sign32(gap.Y)
	}
	s.Shown = s.Shown.Add(step)
	return s.Shown
}
