package tss

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Engine is what the benchmark drives: the Synchronizer and the TimeWarp
// baseline both are one.
type Engine[C Command] interface {
	Deliver(c C, now int64) Verdict
	Tick(now int64) Ready
	Metrics() *Metrics
}

// TimeWarp is the classic optimistic synchronizer [Jefferson 1985; Cronin
// et al. 2001, §3.4.2] on the same State interface, as the benchmark's
// baseline: one state executing commands at the leading delay, a snapshot
// (a state copy) before every tick that executes commands, and on a
// straggler — a command for a tick already executed — a restore of the
// latest snapshot at or before that tick and re-execution up to where the
// state was. Anti-messages are moot: mirrors generate no commands from
// commands.
//
// It takes the same Config as the Synchronizer: Delays[0] is its execution
// delay and the last delay its window — a command is too late exactly when
// it would be too late for a synchronizer with those delays, so both
// accept the same commands. Snapshots older than the window are dropped
// (fossil collection), except the one a straggler at the window's edge
// would need. Metrics: Copies counts snapshots, Rollbacks restores (each
// one more copy), RollbackTime the time of both.
type TimeWarp[S State[S, C, R], C Command, R Record[R]] struct {
	cfg     Config
	alloc   func() S
	state   S
	pool    []S
	pending []*entry[C]
	log     []warpTick[S, C]
	metrics *Metrics
	clock   func() time.Duration
	intake[C]

	now     int64
	started bool
	batch   []C
	out     Ready
}

// warpTick is an executed tick that had commands: the state before it (a
// snapshot) and the commands it ran.
type warpTick[S any, C Command] struct {
	tick uint64
	snap S
	cmds []*entry[C]
}

// NewTimeWarp returns a Time Warp synchronizer starting from a copy of
// initial. Only Delays[0] and the last delay of cfg matter (see TimeWarp).
func NewTimeWarp[S State[S, C, R], C Command, R Record[R]](cfg Config, initial S, alloc func() S, opts Options[C]) (*TimeWarp[S, C, R], error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("time warp config: %w", err)
	}
	if alloc == nil {
		return nil, errors.New("time warp: alloc is nil")
	}
	w := &TimeWarp[S, C, R]{cfg: cfg, alloc: alloc, metrics: opts.Metrics, clock: opts.CostClock}
	if w.metrics == nil {
		w.metrics = &Metrics{}
	}
	w.intake = newIntake[C](&w.cfg, w.metrics)
	w.state = alloc()
	w.state.CopyFrom(initial)
	// The base snapshot: the state before its first tick.
	base := alloc()
	base.CopyFrom(initial)
	w.log = append(w.log, warpTick[S, C]{tick: initial.Tick() + 1, snap: base})
	return w, nil
}

// State is the (only) state.
func (w *TimeWarp[S, C, R]) State() S { return w.state }

// Metrics returns the counters.
func (w *TimeWarp[S, C, R]) Metrics() *Metrics { return w.metrics }

// Pending is the number of accepted commands that are not final yet (not
// executed, or executed after a snapshot a straggler may still restore).
func (w *TimeWarp[S, C, R]) Pending() int { return len(w.keys) }

// Snapshots is the number of snapshots held.
func (w *TimeWarp[S, C, R]) Snapshots() int { return len(w.log) }

func (w *TimeWarp[S, C, R]) delay() time.Duration  { return w.cfg.Delays[0] }
func (w *TimeWarp[S, C, R]) window() time.Duration { return w.cfg.Delays[len(w.cfg.Delays)-1] }

// final is the last tick a synchronizer whose last delay is the window
// would have executed by now: commands of it or earlier are too late.
func (w *TimeWarp[S, C, R]) final(now int64, inclusive bool) uint64 {
	return ticksDue(w.cfg, now, w.window(), inclusive)
}

// ticksDue is the last tick whose boundary for delay d is before now (at
// or before, when inclusive); 0 if none.
func ticksDue(cfg Config, now int64, d time.Duration, inclusive bool) uint64 {
	x := now - cfg.Epoch - int64(d)
	if x < 0 || (!inclusive && x == 0) {
		return 0
	}
	p := int64(cfg.TickPeriod)
	t := x / p
	if !inclusive && x%p == 0 {
		t--
	}
	return uint64(t)
}

func (w *TimeWarp[S, C, R]) clampNow(now int64) int64 {
	if w.started && now < w.now {
		now = w.now
	}
	w.now, w.started = now, true
	return now
}

// Deliver files a command arriving at now; a straggler rolls the state
// back at once.
func (w *TimeWarp[S, C, R]) Deliver(c C, now int64) Verdict {
	now = w.clampNow(now)
	w.advance(now, false)
	e, v := w.admit(c, now, w.final(now, false))
	if v != Accepted {
		return v
	}
	if e.tick > w.state.Tick() {
		w.pending = insertEntry(w.pending, e)
		return Accepted
	}
	w.metrics.outOfOrder[0].Add(1)
	w.rollback(e, now)
	return Accepted
}

// Tick executes every tick due at or before now.
func (w *TimeWarp[S, C, R]) Tick(now int64) Ready {
	now = w.clampNow(now)
	w.advance(now, true)
	out := w.out
	w.out = Ready{}
	out.Leading, out.Confirmed = w.state.Tick(), w.final(now, true)
	return out
}

func (w *TimeWarp[S, C, R]) advance(now int64, inclusive bool) {
	target := ticksDue(w.cfg, now, w.delay(), inclusive)
	for w.state.Tick() < target {
		w.step()
	}
	w.collect(w.final(now, inclusive))
}

// step executes the next tick, snapshotting first if it has commands.
func (w *TimeWarp[S, C, R]) step() {
	t := w.state.Tick() + 1
	n := 0
	for n < len(w.pending) && w.pending[n].tick <= t {
		n++
	}
	if n > 0 {
		last := &w.log[len(w.log)-1]
		if last.tick == t {
			// The snapshot a restore started from is still the state
			// before this tick.
			last.cmds = slices.Clone(w.pending[:n])
		} else {
			snap := w.snapshot()
			w.log = append(w.log, warpTick[S, C]{tick: t, snap: snap, cmds: slices.Clone(w.pending[:n])})
		}
	}
	w.batch = w.batch[:0]
	for _, e := range w.pending[:n] {
		w.batch = append(w.batch, e.cmd)
	}
	clear(w.pending[:n])
	w.pending = w.pending[n:]
	start := w.cost()
	w.state.Advance(w.batch)
	w.metrics.execNanos.Add(int64(w.cost() - start))
	clear(w.batch)
	w.metrics.Ticks.Add(1)
	w.metrics.Executed.Add(uint64(n))
	w.out.Executed++
}

func (w *TimeWarp[S, C, R]) snapshot() S {
	var snap S
	if k := len(w.pool); k > 0 {
		snap, w.pool = w.pool[k-1], w.pool[:k-1]
	} else {
		snap = w.alloc()
	}
	start := w.cost()
	snap.CopyFrom(w.state)
	w.metrics.rollbackNanos.Add(int64(w.cost() - start))
	w.metrics.Copies.Add(1)
	return snap
}

// rollback restores the latest snapshot at or before e's tick, puts every
// command executed since back into pending with e, and re-executes up to
// the tick the state had reached.
func (w *TimeWarp[S, C, R]) rollback(e *entry[C], now int64) {
	target := w.state.Tick()
	i := len(w.log) - 1
	for i > 0 && w.log[i].tick > e.tick {
		i--
	}
	from := w.log[i]
	start := w.cost()
	w.state.CopyFrom(from.snap)
	w.metrics.rollbackNanos.Add(int64(w.cost() - start))
	again := []*entry[C]{e}
	for j := i; j < len(w.log); j++ {
		again = append(again, w.log[j].cmds...)
		if j > i {
			w.pool = append(w.pool, w.log[j].snap)
		}
	}
	w.log[i].cmds = nil
	clear(w.log[i+1:])
	w.log = w.log[:i+1]
	for _, p := range again {
		w.pending = insertEntry(w.pending, p)
	}
	depth := target + 1 - min(target+1, from.tick)
	w.metrics.observeRollback(0, depth)
	if len(w.out.Rollbacks) < maxReadyItems {
		w.out.Rollbacks = append(w.out.Rollbacks, Rollback{State: 0, Tick: from.tick - 1, Depth: depth, At: now, Why: "straggler"})
	} else {
		w.out.Dropped++
	}
	before := w.metrics.Executed.Load()
	for w.state.Tick() < target {
		w.step()
	}
	w.metrics.Reexecuted.Add(w.metrics.Executed.Load() - before)
}

// collect drops the snapshots no straggler can need any more: those
// before the newest one at or before the first tick still open (final+1),
// and makes their commands final.
func (w *TimeWarp[S, C, R]) collect(final uint64) {
	keep := 0
	for keep+1 < len(w.log) && w.log[keep+1].tick <= final+1 {
		keep++
	}
	for _, lt := range w.log[:keep] {
		w.retire(lt.cmds)
		w.pool = append(w.pool, lt.snap)
	}
	if keep > 0 {
		w.log = slices.Delete(w.log, 0, keep)
	}
}

func (w *TimeWarp[S, C, R]) cost() time.Duration {
	if w.clock == nil {
		return 0
	}
	return w.clock()
}
