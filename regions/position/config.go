package position

import (
	"errors"
	"fmt"
	"time"
)

// TileUnits is the number of fixed-point units along one tile side.
const TileUnits = 256

// Config is the position protocol's configuration. DefaultConfig fills
// every field; validate checks them against each other.
type Config struct {
	// World names the world; it is part of every topic name.
	World string
	// Width and Height are the world's size in regions.
	Width, Height int
	// RegionUnits is a region's side in fixed-point units.
	RegionUnits int32
	// Interval is the time between two updates of one player.
	Interval time.Duration
	// Radius is how many regions around its own a player listens to
	// (Chebyshev distance): 1 means the 8 adjacent regions.
	Radius int
	// Prefetch is the distance in units from a region border at which a
	// player already subscribes to the regions it will see after crossing.
	Prefetch int32
	// Linger keeps a region's subscription this long after the player no
	// longer needs it, so a player walking back and forth along a border
	// does not churn the mesh.
	Linger time.Duration
	// MaxSpeed is the game's speed limit in units per second.
	MaxSpeed int32
	// SpeedTolerance is added to the allowed distance of every move, for
	// rounding and the game's own tick granularity.
	SpeedTolerance int32
	// MaxClockSkew bounds how far a sender's timestamp may run ahead of the
	// receiver's clock (rejected beyond: from_future), and MaxDelay how far
	// it may lag behind it (dropped without blame beyond: stale). The
	// speed limit is checked against the time between the sender's
	// timestamps (arrival times bunch up under network delay variation),
	// which the two bound by the receiver's clock: a sender lying about
	// time walks at most MaxDelay+MaxClockSkew further than the limit
	// allows, once, not per update.
	MaxClockSkew time.Duration
	MaxDelay     time.Duration
	// MinRelocationInterval is the least time between two relocations
	// (moves the game makes without walking, such as a respawn) that
	// receivers accept from one player; set it to the game's respawn time.
	MinRelocationInterval time.Duration
	// ReorderWindow is how far behind the newest sequence number an update
	// may be and still count as network reordering (ignored, no penalty).
	// Anything older is a replay and is rejected.
	ReorderWindow uint64
	// MaxExtrapolation bounds dead reckoning: a player silent for longer is
	// shown where it was last extrapolated to.
	MaxExtrapolation time.Duration
	// Expire removes a player from the view after this long without an
	// update.
	Expire time.Duration
	// Aggregate selects aggregated mode: updates go to the region
	// coordinator, which publishes one batch per interval.
	Aggregate bool
	// FallbackAfter is, in aggregated mode, how many of its updates a
	// player lets its coordinator leave unanswered (not heard back in one
	// of the coordinator's batches) before it publishes them on the topic
	// itself; it goes back to the coordinator alone as soon as its own
	// update comes back in a batch again. With no coordinator known, or
	// the stream to it broken, the player publishes directly at once. When
	// a coordinator fails, receivers therefore miss at most FallbackAfter
	// of a player's updates (see failover.go).
	FallbackAfter int
	// Summaries, in aggregated mode, has each coordinator publish
	// vector-field-consistency summaries of its region for the players of
	// the regions around it, who then take full-rate updates only of
	// their own region (summary.go). Off by default; every peer of a
	// world must use the same.
	Summaries SummaryConfig
	// Rendezvous is how often a player re-registers with the coordinators of
	// the regions it subscribes to and connects to the members they name.
	Rendezvous time.Duration
	// CoordinatorTTL is how long a computed coordinator is trusted before
	// placement is computed again.
	CoordinatorTTL time.Duration
	// MaxMembers bounds the member list a coordinator returns.
	MaxMembers int
	// Now is the clock; tests and the simulator may replace it.
	Now func() time.Time
}

// DefaultConfig is a 4x4 world of 32-tile regions, 150 ms updates, radius 1,
// a speed limit of 4 tiles per second and direct (not aggregated) mode.
func DefaultConfig() Config {
	return Config{
		World:            "default",
		Width:            4,
		Height:           4,
		RegionUnits:      32 * TileUnits,
		Interval:         150 * time.Millisecond,
		Radius:           1,
		Prefetch:         2 * TileUnits,
		Linger:           2 * time.Second,
		MaxSpeed:         4 * TileUnits,
		SpeedTolerance:   TileUnits / 4,
		MaxClockSkew:     time.Second,
		MaxDelay:         2 * time.Second,
		ReorderWindow:    64,
		MaxExtrapolation: time.Second,
		Expire:           3 * time.Second,
		Rendezvous:       5 * time.Second,
		CoordinatorTTL:   10 * time.Second,
		MaxMembers:       MaxMembers,
		FallbackAfter:    2,
		Now:              time.Now,

		MinRelocationInterval: 3 * time.Second,
	}
}

// Size bounds of the wire format.
const (
	// MaxUpdateBytes bounds an encoded Envelope carrying one Update.
	MaxUpdateBytes = 128
	// MaxBatchUpdates bounds the entries of one Batch.
	MaxBatchUpdates = 1024
	// MaxBatchBytes bounds an encoded Envelope carrying a Batch.
	MaxBatchBytes = 96 + MaxBatchUpdates*MaxUpdateBytes
	// MaxMembers bounds the member list of one rendezvous answer.
	MaxMembers = 1024
	// maxPeerIDBytes bounds a peer ID on the wire (identity-hashed ed25519
	// keys are 38 bytes, SHA-256-hashed RSA keys 34).
	maxPeerIDBytes = 64
	// maxStreamMessageBytes bounds one message on the coordinator stream.
	maxStreamMessageBytes = 1 << 10
	// maxMembersBytes bounds a rendezvous answer.
	maxMembersBytes = 64 + MaxMembers*(maxPeerIDBytes+4*64)
	// maxWorldUnits bounds positions: a world of at most 1<<20 tiles a side.
	maxWorldUnits = 1 << 28
)

func (c Config) validate() error {
	var errs []error
	if c.World == "" {
		errs = append(errs, errors.New("world name is empty"))
	}
	if c.Width < 1 || c.Height < 1 || c.Width > 4096 || c.Height > 4096 {
		errs = append(errs, fmt.Errorf("world of %dx%d regions: want 1..4096 each", c.Width, c.Height))
	}
	if c.RegionUnits < TileUnits || int64(c.RegionUnits)*int64(max(c.Width, c.Height)) > maxWorldUnits {
		errs = append(errs, fmt.Errorf("region of %d units in a %dx%d world: want >= %d and a world side <= %d units", c.RegionUnits, c.Width, c.Height, TileUnits, maxWorldUnits))
	}
	if c.Interval < time.Millisecond {
		errs = append(errs, fmt.Errorf("interval %s: want >= 1ms", c.Interval))
	}
	if c.Radius < 0 || c.Radius > 8 {
		errs = append(errs, fmt.Errorf("radius %d: want 0..8", c.Radius))
	}
	if c.Prefetch < 0 || c.Prefetch >= c.RegionUnits/2 {
		errs = append(errs, fmt.Errorf("prefetch %d units with regions of %d: want 0 <= prefetch < half a region", c.Prefetch, c.RegionUnits))
	}
	if c.Linger < 0 {
		errs = append(errs, fmt.Errorf("linger %s: want >= 0", c.Linger))
	}
	if c.MaxSpeed <= 0 || c.SpeedTolerance < 0 {
		errs = append(errs, fmt.Errorf("speed limit %d, tolerance %d: want limit > 0, tolerance >= 0", c.MaxSpeed, c.SpeedTolerance))
	}
	if c.MaxClockSkew < 0 {
		errs = append(errs, fmt.Errorf("max clock skew %s: want >= 0", c.MaxClockSkew))
	}
	if c.MaxDelay < c.Interval || c.MaxDelay > time.Minute {
		errs = append(errs, fmt.Errorf("max delay %s with interval %s: want interval <= max delay <= 1m", c.MaxDelay, c.Interval))
	}
	if c.MinRelocationInterval < 0 {
		errs = append(errs, fmt.Errorf("min relocation interval %s: want >= 0", c.MinRelocationInterval))
	}
	if c.ReorderWindow < 1 {
		errs = append(errs, fmt.Errorf("reorder window %d: want >= 1", c.ReorderWindow))
	}
	if c.MaxExtrapolation < 0 || c.Expire <= c.Interval {
		errs = append(errs, fmt.Errorf("extrapolation %s, expiry %s with interval %s: want extrapolation >= 0 and expiry > interval", c.MaxExtrapolation, c.Expire, c.Interval))
	}
	if c.Rendezvous < c.Interval {
		errs = append(errs, fmt.Errorf("rendezvous every %s with interval %s: want rendezvous >= interval", c.Rendezvous, c.Interval))
	}
	if c.CoordinatorTTL <= 0 {
		errs = append(errs, fmt.Errorf("coordinator TTL %s: want > 0", c.CoordinatorTTL))
	}
	if c.FallbackAfter < 1 || c.FallbackAfter > 64 {
		errs = append(errs, fmt.Errorf("fallback after %d unanswered updates: want 1..64", c.FallbackAfter))
	}
	if c.MaxMembers < 1 || c.MaxMembers > MaxMembers {
		errs = append(errs, fmt.Errorf("max members %d: want 1..%d", c.MaxMembers, MaxMembers))
	}
	if c.Now == nil {
		errs = append(errs, errors.New("clock is nil"))
	}
	if err := c.Summaries.validate(c); err != nil {
		errs = append(errs, fmt.Errorf("summaries: %w", err))
	}
	return errors.Join(errs...)
}
