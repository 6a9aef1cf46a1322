package sim

import (
	"math/rand/v2"
	"time"

	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// Walker is a seeded random-walk mover, SimMud style: it wanders between
// random points inside its region and, on average every RegionChange, heads
// for a point in a random adjacent region. All arithmetic is integer, and
// the same seed gives the same walk.
type Walker struct {
	grid   position.Grid
	speed  int32 // units per second
	change time.Duration
	rng    *rand.Rand

	pos, target position.Vec
	vel         position.Vec
	untilChange time.Duration
}

// NewWalker places a walker at a random point of region start.
func NewWalker(grid position.Grid, start regions.Coord, speed int32, regionChange time.Duration, seed uint64) *Walker {
	w := &Walker{grid: grid, speed: speed, change: regionChange, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	w.pos = w.pointIn(start)
	w.target = w.pointIn(start)
	w.untilChange = w.nextChange()
	return w
}

// Position and Velocity are the walker's state after the last Step.
func (w *Walker) Position() position.Vec { return w.pos }

// Velocity is in units per second.
func (w *Walker) Velocity() position.Vec { return w.vel }

// Step advances the walker by dt.
func (w *Walker) Step(dt time.Duration) {
	w.untilChange -= dt
	if w.untilChange <= 0 {
		w.untilChange = w.nextChange()
		here := w.grid.RegionOf(w.pos)
		next := w.grid.Neighbourhood(here, 1)
		// Neighbourhood includes here; pick among the others.
		var others []regions.Coord
		for _, c := range next {
			if c != here {
				others = append(others, c)
			}
		}
		if len(others) > 0 {
			w.target = w.pointIn(others[w.rng.IntN(len(others))])
		}
	}
	step := int64(w.speed) * dt.Microseconds() / 1e6
	dx, dy := int64(w.target.X)-int64(w.pos.X), int64(w.target.Y)-int64(w.pos.Y)
	dist := isqrt(dx*dx + dy*dy)
	if dist <= step {
		w.pos, w.vel = w.target, position.Vec{}
		w.target = w.pointIn(w.grid.RegionOf(w.pos))
		return
	}
	w.pos = position.Vec{X: w.pos.X + int32(dx*step/dist), Y: w.pos.Y + int32(dy*step/dist)}
	w.vel = position.Vec{X: int32(dx * int64(w.speed) / dist), Y: int32(dy * int64(w.speed) / dist)}
}

func (w *Walker) nextChange() time.Duration {
	// Exponential with the configured mean, in whole milliseconds.
	return time.Duration(w.rng.ExpFloat64()*float64(w.change.Milliseconds())) * time.Millisecond
}

// pointIn is a random point of region c, a tile away from its borders.
func (w *Walker) pointIn(c regions.Coord) position.Vec {
	u := w.grid.RegionUnits
	margin := int32(position.TileUnits)
	return position.Vec{
		X: int32(c.X)*u + margin + w.rng.Int32N(u-2*margin),
		Y: int32(c.Y)*u + margin + w.rng.Int32N(u-2*margin),
	}
}

func isqrt(n int64) int64 {
	if n < 2 {
		return n
	}
	x := n
	y := (x + 1) / 2
	for y < x {
		x = y
		y = (x + n/x) / 2
	}
	return x
}
