package tss

import (
	"errors"
	"fmt"
	"time"
)

// Limits on a configuration; every decoder of a trace header checks them too.
const (
	// MaxStates bounds the number of states (leading plus trailing).
	MaxStates = 16
	// MaxPendingLimit bounds Config.MaxPending.
	MaxPendingLimit = 1 << 24
	// maxEpoch keeps boundary arithmetic far from overflow (year 2116).
	maxEpoch = 1 << 62
)

// Config is the synchronizer's configuration. Zero fields take the values of
// DefaultConfig through New; Validate rejects contradictions and names the
// values involved.
type Config struct {
	// Epoch is the wall clock (Unix nanoseconds) at which tick 0 ends: a
	// command stamped s runs in tick ceil((s-Epoch)/TickPeriod), so one
	// stamped exactly on a boundary runs in that tick. Every mirror of a game
	// uses the same epoch (it travels with the state transfer).
	Epoch int64
	// TickPeriod is the length of one simulation tick.
	TickPeriod time.Duration
	// Delays are the synchronization delays d0 < d1 < ... < dk of the
	// leading state (index 0) and the trailing states: state i executes the
	// tick ending at wall time w once the clock reads w + Delays[i].
	Delays []time.Duration
	// WeakMargin is how far weakly consistent values (positions) of two
	// states may differ without a rollback, in the state's own units; 0
	// demands equality. It is passed to Record.Diverges. It has no default:
	// mirror mode sets it to game.TileUnits/4.
	WeakMargin int64
	// CheckHash also compares the state hashes of every tick (GGRS style):
	// any difference at all triggers a rollback. It costs a Hash per state
	// per tick.
	CheckHash bool
	// MaxSkew is how far in the future a stamp may be (clock skew between
	// mirrors); commands stamped later than now+MaxSkew are refused.
	MaxSkew time.Duration
	// MaxPending bounds the commands accepted and not yet executed by the
	// last state; commands beyond it are refused.
	MaxPending int
	// History is CRIMP's history length when commands arrive over CRIMP
	// (0: not checked). The last delay must not exceed it: CRIMP never
	// delivers a packet older than its history, so a longer delay would only
	// wait for commands that cannot come.
	History time.Duration
	// CheckpointTicks is how often, in ticks of the last state, a checkpoint
	// (tick, hash of the last state) is emitted for the trace and for the
	// mirrors' hash exchange. Default: one second's worth of ticks.
	CheckpointTicks uint64
}

// DefaultConfig returns a configuration for the 30 Hz world with the delays
// MIRROR_MODE.md uses for two mirrors on a LAN (0, 50 ms, 150 ms).
func DefaultConfig() Config {
	return Config{
		TickPeriod: time.Second / 30,
		Delays:     []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond},
		MaxSkew:    5 * time.Millisecond,
		MaxPending: 1 << 16,
	}
}

// WithDefaults fills the zero fields of c from DefaultConfig. Delays are
// taken only when none are given; CheckpointTicks follows the tick period.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	if c.TickPeriod == 0 {
		c.TickPeriod = d.TickPeriod
	}
	if len(c.Delays) == 0 {
		c.Delays = d.Delays
	}
	c.Delays = append([]time.Duration(nil), c.Delays...)
	if c.MaxSkew == 0 {
		c.MaxSkew = d.MaxSkew
	}
	if c.MaxPending == 0 {
		c.MaxPending = d.MaxPending
	}
	if c.CheckpointTicks == 0 && c.TickPeriod > 0 {
		c.CheckpointTicks = uint64(max((time.Second+c.TickPeriod/2)/c.TickPeriod, 1))
	}
	return c
}

// Validate reports every inconsistency in c (after defaults).
func (c Config) Validate() error {
	var errs []error
	if c.Epoch < 0 || c.Epoch > maxEpoch {
		errs = append(errs, fmt.Errorf("Epoch %d outside [0, %d]", c.Epoch, int64(maxEpoch)))
	}
	if c.TickPeriod <= 0 || c.TickPeriod > time.Minute {
		errs = append(errs, fmt.Errorf("TickPeriod %v outside (0, 1m]", c.TickPeriod))
	}
	switch {
	case len(c.Delays) == 0:
		errs = append(errs, errors.New("no Delays: at least the leading state's is needed"))
	case len(c.Delays) > MaxStates:
		errs = append(errs, fmt.Errorf("%d Delays, at most %d states", len(c.Delays), MaxStates))
	default:
		if c.Delays[0] < 0 {
			errs = append(errs, fmt.Errorf("leading delay Delays[0] %v is negative", c.Delays[0]))
		}
		for i := 1; i < len(c.Delays); i++ {
			if c.Delays[i] <= c.Delays[i-1] {
				errs = append(errs, fmt.Errorf("Delays[%d] %v not above Delays[%d] %v: delays must increase", i, c.Delays[i], i-1, c.Delays[i-1]))
			}
		}
		last := c.Delays[len(c.Delays)-1]
		if c.History > 0 && last > c.History {
			errs = append(errs, fmt.Errorf("last delay %v longer than CRIMP's History %v, which never delivers a command that old", last, c.History))
		}
		if last > time.Hour {
			errs = append(errs, fmt.Errorf("last delay %v over an hour", last))
		}
	}
	if c.History < 0 {
		errs = append(errs, fmt.Errorf("History %v is negative", c.History))
	}
	if c.WeakMargin < 0 {
		errs = append(errs, fmt.Errorf("WeakMargin %d is negative", c.WeakMargin))
	}
	if c.MaxSkew < 0 || c.MaxSkew > time.Minute {
		errs = append(errs, fmt.Errorf("MaxSkew %v outside [0, 1m]", c.MaxSkew))
	}
	if c.MaxPending < 1 || c.MaxPending > MaxPendingLimit {
		errs = append(errs, fmt.Errorf("MaxPending %d outside [1, %d]", c.MaxPending, MaxPendingLimit))
	}
	if c.CheckpointTicks < 1 {
		errs = append(errs, fmt.Errorf("CheckpointTicks %d below 1", c.CheckpointTicks))
	}
	return errors.Join(errs...)
}

// TickOf is the tick a command stamped stamp runs in: ceil((stamp-Epoch) /
// TickPeriod), and 0 for stamps at or before the epoch (every state has
// passed tick 0).
func (c Config) TickOf(stamp int64) uint64 {
	if stamp <= c.Epoch {
		return 0
	}
	d, p := uint64(stamp)-uint64(c.Epoch), uint64(c.TickPeriod)
	t := d / p
	if d%p != 0 {
		t++
	}
	return t
}

// boundary is the wall time at which a state with the given delay executes
// tick t: Epoch + t·TickPeriod + delay, saturating at the largest int64.
func (c Config) boundary(t uint64, delay time.Duration) int64 {
	const maxT = int64(^uint64(0) >> 1)
	p := int64(c.TickPeriod)
	if t > uint64((maxT-c.Epoch-int64(delay))/p) {
		return maxT
	}
	return c.Epoch + int64(t)*p + int64(delay)
}
