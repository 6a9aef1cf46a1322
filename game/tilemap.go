package game

import "fmt"

// Tile is one cell of a region's terrain. The terrain is immutable: it is a
// pure function of the world seed and the region's coordinates.
type Tile uint8

const (
	TileFloor Tile = iota // open ground (dirt)
	TileGrass             // open ground (grass), only looks different
	TileWall              // blocks movement
	TileWater             // blocks movement
	tileKinds
)

// Blocks reports whether the tile stops a player.
func (t Tile) Blocks() bool { return t == TileWall || t == TileWater }

// Rune is the tile's one-character form, used by the browser client and tests.
func (t Tile) Rune() byte {
	switch t {
	case TileGrass:
		return ','
	case TileWall:
		return '#'
	case TileWater:
		return '~'
	}
	return '.'
}

// RegionCoord names a region by its column and row in the world grid.
type RegionCoord struct {
	X, Y int
}

func (r RegionCoord) String() string { return fmt.Sprintf("%d,%d", r.X, r.Y) }

// RegionMap is a region's terrain: Size×Size tiles, row-major.
type RegionMap struct {
	Coord RegionCoord
	Size  int
	Tiles []Tile
}

// At returns the tile at local tile coordinates (x, y); outside the region
// it reports a wall.
func (m *RegionMap) At(x, y int) Tile {
	if x < 0 || y < 0 || x >= m.Size || y >= m.Size {
		return TileWall
	}
	return m.Tiles[y*m.Size+x]
}

// String renders the map as Size lines of Tile.Rune characters.
func (m *RegionMap) String() string {
	b := make([]byte, 0, (m.Size+1)*m.Size)
	for y := 0; y < m.Size; y++ {
		for x := 0; x < m.Size; x++ {
			b = append(b, m.At(x, y).Rune())
		}
		b = append(b, '\n')
	}
	return string(b)
}

// GenerateRegionMap builds the terrain of region rc of a world with the given
// config. The result depends only on cfg.Seed, cfg's world shape and rc.
//
// Layout rules, which keep the world walkable:
//   - regions on the world's edge get a wall along that edge;
//   - a band two tiles wide just inside each region's border stays open, so
//     every region connects to each neighbour along the whole border;
//   - obstacles (wall segments, ruins, ponds) go inside the band;
//   - any open tile the band cannot reach is filled with wall, so every open
//     tile is reachable from every other.
func GenerateRegionMap(cfg Config, rc RegionCoord) *RegionMap {
	n := cfg.RegionTiles
	m := &RegionMap{Coord: rc, Size: n, Tiles: make([]Tile, n*n)}
	rng := NewRand(derive("overworld/map", cfg.Seed, uint64(rc.X), uint64(rc.Y)))
	set := func(x, y int, t Tile) {
		if x >= 0 && y >= 0 && x < n && y < n {
			m.Tiles[y*n+x] = t
		}
	}
	// Obstacles stay within [lo, hi] so the border band stays open.
	lo, hi := 3, n-4
	inner := func(x, y int) bool { return x >= lo && y >= lo && x <= hi && y <= hi }

	// Grass patches: cosmetic, anywhere.
	for i := 0; i < n/6+1; i++ {
		cx, cy, r := rng.IntN(n), rng.IntN(n), rng.Range(2, n/5+2)
		for y := cy - r; y <= cy+r; y++ {
			for x := cx - r; x <= cx+r; x++ {
				if (x-cx)*(x-cx)+(y-cy)*(y-cy) <= r*r {
					set(x, y, TileGrass)
				}
			}
		}
	}
	// Ponds.
	for i := rng.IntN(3); i > 0; i-- {
		cx, cy := rng.Range(lo+2, hi-2), rng.Range(lo+2, hi-2)
		rx, ry := rng.Range(1, 3), rng.Range(1, 3)
		for y := cy - ry; y <= cy+ry; y++ {
			for x := cx - rx; x <= cx+rx; x++ {
				dx, dy := (x-cx)*ry, (y-cy)*rx
				if inner(x, y) && dx*dx+dy*dy <= rx*rx*ry*ry {
					set(x, y, TileWater)
				}
			}
		}
	}
	// A ruin: a walled rectangle with a doorway on each side.
	if rng.IntN(2) == 0 {
		w, h := rng.Range(5, n/3), rng.Range(5, n/3)
		x0, y0 := rng.Range(lo, hi-w), rng.Range(lo, hi-h)
		for x := x0; x <= x0+w; x++ {
			set(x, y0, TileWall)
			set(x, y0+h, TileWall)
		}
		for y := y0; y <= y0+h; y++ {
			set(x0, y, TileWall)
			set(x0+w, y, TileWall)
		}
		set(x0+w/2, y0, TileFloor)
		set(x0+w/2, y0+h, TileFloor)
		set(x0, y0+h/2, TileFloor)
		set(x0+w, y0+h/2, TileFloor)
	}
	// Wall segments, some with a bend.
	for i := n * n / 80; i > 0; i-- {
		x, y := rng.Range(lo, hi), rng.Range(lo, hi)
		length := rng.Range(2, n/4)
		dx, dy := 1, 0
		if rng.IntN(2) == 0 {
			dx, dy = 0, 1
		}
		for j := 0; j < length && inner(x, y); j++ {
			set(x, y, TileWall)
			if j == length/2 && rng.IntN(3) == 0 {
				dx, dy = dy, dx
			}
			x, y = x+dx, y+dy
		}
	}
	// The band just inside the border is always open.
	for y := 0; y < n; y++ {
		for x := 0; x < n; x++ {
			if !inner(x, y) && m.At(x, y).Blocks() {
				set(x, y, TileFloor)
			}
		}
	}
	// The world's outer edge is a wall.
	for i := 0; i < n; i++ {
		if rc.X == 0 {
			set(0, i, TileWall)
		}
		if rc.X == cfg.RegionsX-1 {
			set(n-1, i, TileWall)
		}
		if rc.Y == 0 {
			set(i, 0, TileWall)
		}
		if rc.Y == cfg.RegionsY-1 {
			set(i, n-1, TileWall)
		}
	}
	fillUnreachable(m, 2, 2)
	return m
}

// fillUnreachable walls in every open tile not reachable from (sx, sy) by
// 4-neighbour steps, so no spawn point or object ends up in a closed pocket.
func fillUnreachable(m *RegionMap, sx, sy int) {
	n := m.Size
	seen := make([]bool, n*n)
	stack := []int{sy*n + sx}
	seen[sy*n+sx] = true
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		x, y := i%n, i/n
		for _, d := range [4][2]int{{1, 0}, {-1, 0}, {0, 1}, {0, -1}} {
			nx, ny := x+d[0], y+d[1]
			if nx < 0 || ny < 0 || nx >= n || ny >= n {
				continue
			}
			j := ny*n + nx
			if !seen[j] && !m.Tiles[j].Blocks() {
				seen[j] = true
				stack = append(stack, j)
			}
		}
	}
	for i, t := range m.Tiles {
		if !seen[i] && !t.Blocks() {
			m.Tiles[i] = TileWall
		}
	}
}
