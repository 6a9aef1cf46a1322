// Package game is the overworld world and its rules: a grid of regions, each
// a tile map with walls, food and health packs; players who move, eat, pick
// up, fight, starve, die and respawn; and a fixed-step simulation that is
// deterministic bit for bit.
//
// Data flow: a caller owns a *World and calls Advance once per tick with
// the Commands gathered for that tick. Commands are everything that changes
// a world from outside — a player's Input, a join (new, or restoring a
// saved Character), a leave, a request to respawn at home — stamped by the
// ingress mirror and applied in one canonical order (CompareCommands).
// Advance returns a TickRecord: the events of the tick (meals, hits,
// deaths, region changes, joins), which the caller forwards to the network
// or the browser, and every player's position. Under trailing state
// synchronization (game/tss) a mirror keeps several Worlds at different
// delays, compares their records (TickRecord.Diverges: strictly consistent
// events exactly, positions within a margin; EventKind.Strict says which
// is which) and on a mismatch copies a trailing world onto a leading one
// (CopyFrom) and re-executes. Callers without commands (local play, the
// P2P movement world) use Step, a thin wrapper that turns inputs into
// commands; there is one implementation of a tick. Nothing inside reads a
// clock or an unseeded random source: the world seed and the commands fully
// determine the state, which StateHash (Hash) condenses for checks.
//
// The state is laid out for cheap copies: players in one slice sorted by
// ID, objects in copy-on-write pages, one per region, and the terrain —
// every region's tile map and starting objects — built once per config,
// shared by every world of that config and read without locks. CopyFrom
// therefore costs the players plus one pointer per region, however many
// objects the world holds.
//
// One source of rules: the per-player rules (Metabolize, ApplyDamage,
// Kill, Reward, Revive, FeedPlayer, Heal, the eat and fight cooldowns,
// RestoreCharacter) are exported functions that Advance calls; a P2P peer's
// Avatar (game/play) and the simulator's bots (game/sim) run the same
// functions on their own copy of a player.
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
