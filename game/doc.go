// Package game is the overworld world and its rules: a grid of regions, each
// a tile map with walls, food and health packs; players who move, eat, pick
// up, fight, starve, die and respawn; and a fixed-step simulation that is
// deterministic bit for bit.
//
// Data flow: a caller (the local demo, a mirror under TSS, a P2P peer) owns a
// *World and calls Step once per tick with the Inputs gathered for that tick.
// Step returns the Events the tick produced (meals, hits, deaths, region
// changes), which the caller forwards to the network or the browser. Nothing
// inside reads a clock or an unseeded random source: the world seed and the
// inputs fully determine the state, which StateHash condenses for checks.
//
// All state is integer. Positions are fixed point with TileUnits units per
// tile; speeds are units per tick. The region of a position is a pure
// function (World.RegionOf), so crossing a border is just moving.
//
// Mutable objects (food, health packs) are versioned values, the form the
// region object store keeps: Object.MarshalBinary/UnmarshalObject give their
// bounded wire form, and the rule functions (Object.Eaten, Object.Taken)
// compute the value a read-write update proposes. ObjectTable applies such
// updates with version checks for the single-authority cases (local play,
// mirrors); in P2P mode the region coordinator does the same.
//
// Fights are computed by both participants with FightOutcome from a seed
// derived from both player IDs and a counter, so they agree without a third
// party. Bot generates the SimMud-style workload as Inputs; Extrapolate and
// Smoother dead-reckon remote players between position updates.
package game
