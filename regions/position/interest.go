package position

import (
	"sort"

	"github.com/overworld-p2p/overworld/regions"
)

// Vec is a position (units) or velocity (units per second).
type Vec struct {
	X, Y int32
}

// Grid is the world's region layout: what the interest functions need of
// the Config.
type Grid struct {
	Width, Height int
	RegionUnits   int32
}

// Grid returns the config's layout.
func (c Config) Grid() Grid {
	return Grid{Width: c.Width, Height: c.Height, RegionUnits: c.RegionUnits}
}

// RegionOf is the region containing p; positions outside the world count as
// the nearest border region.
func (g Grid) RegionOf(p Vec) regions.Coord {
	clamp := func(v int32, n int) int {
		i := int(floorDiv(v, g.RegionUnits))
		return min(max(i, 0), n-1)
	}
	return regions.Coord{X: clamp(p.X, g.Width), Y: clamp(p.Y, g.Height)}
}

// Contains reports whether c is a region of the world.
func (g Grid) Contains(c regions.Coord) bool {
	return c.X >= 0 && c.Y >= 0 && c.X < g.Width && c.Y < g.Height
}

// Neighbourhood lists the regions within Chebyshev distance radius of c that
// exist, in row-major order.
func (g Grid) Neighbourhood(c regions.Coord, radius int) []regions.Coord {
	var out []regions.Coord
	for y := c.Y - radius; y <= c.Y+radius; y++ {
		for x := c.X - radius; x <= c.X+radius; x++ {
			if r := (regions.Coord{X: x, Y: y}); g.Contains(r) {
				out = append(out, r)
			}
		}
	}
	return out
}

// Within reports whether b is within Chebyshev distance radius of a.
func Within(a, b regions.Coord, radius int) bool {
	return abs(a.X-b.X) <= radius && abs(a.Y-b.Y) <= radius
}

// Subscriptions lists the regions a player at p subscribes to: the
// neighbourhood of its own region, plus, within prefetch units of a border,
// the neighbourhoods of the regions across it (so a crossing finds the mesh
// already built). Sorted row-major, no duplicates.
func (g Grid) Subscriptions(p Vec, radius int, prefetch int32) []regions.Coord {
	seen := map[regions.Coord]bool{}
	for _, dy := range []int32{-prefetch, 0, prefetch} {
		for _, dx := range []int32{-prefetch, 0, prefetch} {
			for _, c := range g.Neighbourhood(g.RegionOf(Vec{sat(p.X, dx), sat(p.Y, dy)}), radius) {
				seen[c] = true
			}
		}
	}
	out := make([]regions.Coord, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sortCoords(out)
	return out
}

func sortCoords(cs []regions.Coord) {
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].Y != cs[j].Y {
			return cs[i].Y < cs[j].Y
		}
		return cs[i].X < cs[j].X
	})
}

func floorDiv(a, b int32) int32 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// sat adds without int32 overflow.
func sat(a, b int32) int32 {
	s := int64(a) + int64(b)
	return int32(min(max(s, -1<<31), 1<<31-1))
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// Topic is the name of the region's position topic.
func Topic(world string, c regions.Coord) string {
	return regions.TopicPrefix(world, c) + "/pos"
}
