package game

import "testing"

func TestMapIsDeterministic(t *testing.T) {
	cfg := DefaultConfig()
	a := GenerateRegionMap(cfg, RegionCoord{3, 4})
	b := GenerateRegionMap(cfg, RegionCoord{3, 4})
	if a.String() != b.String() {
		t.Fatal("one region generated twice differs")
	}
	if a.String() == GenerateRegionMap(cfg, RegionCoord{4, 3}).String() {
		t.Fatal("two regions look the same")
	}
	cfg.Seed++
	if a.String() == GenerateRegionMap(cfg, RegionCoord{3, 4}).String() {
		t.Fatal("seed does not change the terrain")
	}
}

// TestWholeWorldIsConnected floods the whole world from one open tile and
// checks that every open tile of every region is reached, and that the
// world's outer edge is walled.
func TestWholeWorldIsConnected(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RegionsX, cfg.RegionsY = 4, 3
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nx, ny := int32(cfg.RegionsX*cfg.RegionTiles), int32(cfg.RegionsY*cfg.RegionTiles)
	seen := make([]bool, nx*ny)
	stack := [][2]int32{{2, 2}}
	seen[2*nx+2] = true
	for len(stack) > 0 {
		c := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, d := range [4][2]int32{{1, 0}, {-1, 0}, {0, 1}, {0, -1}} {
			x, y := c[0]+d[0], c[1]+d[1]
			if x < 0 || y < 0 || x >= nx || y >= ny || seen[y*nx+x] || w.tileAt(x, y).Blocks() {
				continue
			}
			seen[y*nx+x] = true
			stack = append(stack, [2]int32{x, y})
		}
	}
	open := 0
	for y := int32(0); y < ny; y++ {
		for x := int32(0); x < nx; x++ {
			edge := x == 0 || y == 0 || x == nx-1 || y == ny-1
			tile := w.tileAt(x, y)
			if edge && tile != TileWall {
				t.Fatalf("world edge tile (%d,%d) is %q, want wall", x, y, tile.Rune())
			}
			if !tile.Blocks() {
				open++
				if !seen[y*nx+x] {
					t.Fatalf("open tile (%d,%d) is unreachable", x, y)
				}
			}
		}
	}
	if open < int(nx*ny)/2 {
		t.Fatalf("only %d of %d tiles open", open, nx*ny)
	}
}

func TestObjectsStartOnOpenDistinctTiles(t *testing.T) {
	cfg := DefaultConfig()
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := cfg.RegionsX * cfg.RegionsY * (cfg.FoodPerRegion + cfg.HealthPacksPerRegion)
	if w.ObjectTable().Len() != want {
		t.Fatalf("%d objects, want %d", w.ObjectTable().Len(), want)
	}
	for y := 0; y < cfg.RegionsY; y++ {
		for x := 0; x < cfg.RegionsX; x++ {
			rc := RegionCoord{x, y}
			used := map[[2]uint16]bool{}
			for i, e := range w.Objects(rc) {
				o := e.Object
				if w.Map(rc).At(int(o.TileX), int(o.TileY)).Blocks() {
					t.Fatalf("%s on a blocking tile", e.ID)
				}
				if used[[2]uint16{o.TileX, o.TileY}] {
					t.Fatalf("%s shares a tile", e.ID)
				}
				used[[2]uint16{o.TileX, o.TileY}] = true
				wantKind := ObjectFood
				if i >= cfg.FoodPerRegion {
					wantKind = ObjectHealthPack
				}
				if o.Kind != wantKind || e.Version != 1 {
					t.Fatalf("%s is %+v v%d", e.ID, o, e.Version)
				}
			}
		}
	}
}
