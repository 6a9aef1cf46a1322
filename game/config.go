package game

import (
	"errors"
	"fmt"
)

// Limits that bound the world and every decoder.
const (
	// MaxRegionTiles bounds a region's side in tiles.
	MaxRegionTiles = 256
	// MaxRegions bounds the number of regions in a world (W*H).
	MaxRegions = 64 * 64
	// MaxHealth and MaxHunger are the top of the player bars.
	MaxHealth = 100
	MaxHunger = 100
	// MaxSkill caps a player's skill.
	MaxSkill = 100
	// MaxNameLen bounds a player's display name in bytes.
	MaxNameLen = 32
	// MaxPlayerIDLen bounds a player ID in bytes (a libp2p peer ID string is ~52).
	MaxPlayerIDLen = 128
)

// Config fixes a world's shape and rules. Two worlds with equal configs and
// equal inputs evolve identically.
type Config struct {
	// Seed determines the terrain, object placement and spawn points.
	Seed uint64
	// RegionsX and RegionsY are the world's size in regions.
	RegionsX, RegionsY int
	// RegionTiles is a region's side in tiles.
	RegionTiles int
	// TickRate is the number of simulation steps per second.
	TickRate int
	// MaxSpeed is the top speed in units per tick. It must stay below one
	// tile per tick so that a move can never skip over a wall.
	MaxSpeed int32
	// PlayerRadius is the half side of a player's square collision box.
	PlayerRadius int32
	// FoodPerRegion and HealthPacksPerRegion are the mutable objects each
	// region holds.
	FoodPerRegion, HealthPacksPerRegion int
	// FoodRegrowTicks is how long an eaten-up food object takes to regrow;
	// HealthPackRespawnTicks the same for a taken health pack.
	FoodRegrowTicks, HealthPackRespawnTicks uint64
	// HungerTicks is the interval at which hunger rises by one; a starving
	// player (hunger at MaxHunger) loses one health per interval.
	HungerTicks uint64
	// RespawnTicks is how long a dead player waits before respawning.
	RespawnTicks uint64
	// ReachUnits is how close a player must be to an object to eat or take it.
	ReachUnits int32
	// FightRangeUnits is how close two players must be to fight.
	FightRangeUnits int32
	// ActionCooldownTicks is the minimum gap between two eats (or two
	// attacks) of one player.
	ActionCooldownTicks uint64
}

// DefaultConfig returns the standard world: 8×8 regions of 32×32 tiles at
// 30 Hz, players walking four tiles per second.
func DefaultConfig() Config {
	return Config{
		Seed:                   1,
		RegionsX:               8,
		RegionsY:               8,
		RegionTiles:            32,
		TickRate:               30,
		MaxSpeed:               4 * TileUnits / 30,
		PlayerRadius:           TileUnits * 3 / 10,
		FoodPerRegion:          6,
		HealthPacksPerRegion:   2,
		FoodRegrowTicks:        30 * 60,
		HealthPackRespawnTicks: 30 * 30,
		HungerTicks:            30 * 2,
		RespawnTicks:           30 * 3,
		ReachUnits:             TileUnits * 3 / 2,
		FightRangeUnits:        TileUnits * 2,
		ActionCooldownTicks:    15,
	}
}

// Validate reports the first contradiction or out-of-range value in c.
func (c Config) Validate() error {
	var errs []error
	if c.RegionsX < 1 || c.RegionsY < 1 || c.RegionsX*c.RegionsY > MaxRegions {
		errs = append(errs, fmt.Errorf("world of %d×%d regions: need at least 1×1 and at most %d regions", c.RegionsX, c.RegionsY, MaxRegions))
	}
	if c.RegionTiles < 12 || c.RegionTiles > MaxRegionTiles {
		errs = append(errs, fmt.Errorf("region of %d tiles: need 12..%d", c.RegionTiles, MaxRegionTiles))
	}
	if c.TickRate < 1 || c.TickRate > 1000 {
		errs = append(errs, fmt.Errorf("tick rate %d: need 1..1000", c.TickRate))
	}
	if c.MaxSpeed < 1 || c.MaxSpeed >= TileUnits {
		errs = append(errs, fmt.Errorf("max speed %d units/tick: need 1..%d (below one tile per tick)", c.MaxSpeed, TileUnits-1))
	}
	if c.PlayerRadius < 1 || c.PlayerRadius >= TileUnits/2 {
		errs = append(errs, fmt.Errorf("player radius %d: need 1..%d so a player fits a one-tile corridor", c.PlayerRadius, TileUnits/2-1))
	}
	if c.FoodPerRegion < 0 || c.HealthPacksPerRegion < 0 || c.FoodPerRegion+c.HealthPacksPerRegion > c.RegionTiles {
		errs = append(errs, fmt.Errorf("%d food and %d health packs per region: need non-negative counts summing to at most %d", c.FoodPerRegion, c.HealthPacksPerRegion, c.RegionTiles))
	}
	if c.HungerTicks < 1 {
		errs = append(errs, errors.New("hunger interval must be at least one tick"))
	}
	if c.ReachUnits < 1 || c.FightRangeUnits < 1 {
		errs = append(errs, fmt.Errorf("reach %d and fight range %d: need positive distances", c.ReachUnits, c.FightRangeUnits))
	}
	return errors.Join(errs...)
}

// RegionUnits is a region's side in position units.
func (c Config) RegionUnits() int32 { return int32(c.RegionTiles) * TileUnits }

// WorldUnits returns the world's width and height in position units.
func (c Config) WorldUnits() (w, h int32) {
	return int32(c.RegionsX) * c.RegionUnits(), int32(c.RegionsY) * c.RegionUnits()
}
