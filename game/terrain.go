package game

import (
	"fmt"
	"runtime"
	"sync"
	"weak"
)

// terrain is everything about a world that its config alone decides and
// that never changes: every region's tile map and every region's starting
// objects. It is built once per config and shared by every World of that
// config (clones, trailing states, the P2P movement world), and it is read
// without locks: after newTerrain returns nothing in it is written again.
type terrain struct {
	cfg Config
	// maps is indexed by regionIndex.
	maps []*RegionMap
	// initial holds each region's starting objects as shared pages (never
	// written in place), indexed by regionIndex: a new world starts by
	// pointing at them and copies a page only when it first changes it.
	initial []*objectPage
}

func (t *terrain) regionIndex(rc RegionCoord) int { return rc.Y*t.cfg.RegionsX + rc.X }

// terrainKey is the part of a config the terrain depends on.
type terrainKey struct {
	seed               uint64
	regionsX, regionsY int
	regionTiles        int
	food, healthPacks  int
}

func terrainKeyOf(cfg Config) terrainKey {
	return terrainKey{cfg.Seed, cfg.RegionsX, cfg.RegionsY, cfg.RegionTiles, cfg.FoodPerRegion, cfg.HealthPacksPerRegion}
}

// terrains caches built terrains by key. It holds them weakly: a terrain
// no world uses any more is collected, and its entry removed. The lock is
// taken only when a world is created, never on a read of the terrain.
var terrains = struct {
	sync.Mutex
	m map[terrainKey]weak.Pointer[terrain]
}{m: make(map[terrainKey]weak.Pointer[terrain])}

// terrainFor returns the shared terrain of cfg, building it on first use.
// cfg must be valid.
func terrainFor(cfg Config) (*terrain, error) {
	key := terrainKeyOf(cfg)
	terrains.Lock()
	defer terrains.Unlock()
	if wp, ok := terrains.m[key]; ok {
		if t := wp.Value(); t != nil {
			return t, nil
		}
	}
	t, err := newTerrain(cfg)
	if err != nil {
		return nil, err
	}
	wp := weak.Make(t)
	terrains.m[key] = wp
	runtime.AddCleanup(t, func(key terrainKey) {
		terrains.Lock()
		defer terrains.Unlock()
		if cur, ok := terrains.m[key]; ok && cur.Value() == nil {
			delete(terrains.m, key)
		}
	}, key)
	return t, nil
}

func newTerrain(cfg Config) (*terrain, error) {
	n := cfg.RegionsX * cfg.RegionsY
	t := &terrain{cfg: cfg, maps: make([]*RegionMap, n), initial: make([]*objectPage, n)}
	for y := 0; y < cfg.RegionsY; y++ {
		for x := 0; x < cfg.RegionsX; x++ {
			rc := RegionCoord{x, y}
			i := t.regionIndex(rc)
			t.maps[i] = GenerateRegionMap(cfg, rc)
			page := &objectPage{region: rc}
			for slot, o := range InitialObjects(cfg, t.maps[i]) {
				if err := o.validate(); err != nil {
					return nil, fmt.Errorf("region %s object %d: %w", rc, slot, err)
				}
				page.entries = append(page.entries, tableEntry{ObjectID{rc, uint16(slot)}, VersionedObject{Version: 1, Object: o}})
			}
			page.shared.Store(true)
			t.initial[i] = page
		}
	}
	return t, nil
}

// at returns the map of region rc, which must be in the world.
func (t *terrain) at(rc RegionCoord) *RegionMap { return t.maps[t.regionIndex(rc)] }
