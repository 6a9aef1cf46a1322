package tss

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// Command is what the synchronizer orders and replays.
type Command interface {
	// At is the ingress mirror's wall-clock stamp, Unix nanoseconds.
	At() int64
	// Key breaks ties between equal stamps: the ingress mirror and its
	// sequence number. Canonical order is (At, mirror, seq), ascending.
	Key() (mirror uint32, seq uint64)
}

// Record is what one state's execution of one tick produced (its events).
type Record[R any] interface {
	// Diverges compares the records two states produced for the same tick:
	// strictly consistent events must be identical, weakly consistent values
	// may differ by at most weakMargin (in the state's own units; 0 = exact).
	// It names the first difference.
	Diverges(other R, weakMargin int64) (why string, diverged bool)
}

// State is a deterministic simulation stepped one tick at a time.
type State[S any, C Command, R Record[R]] interface {
	Tick() uint64 // ticks executed so far
	// Advance executes one tick with these commands, already in canonical
	// order. It must not keep cmds.
	Advance(cmds []C) R
	CopyFrom(src S) // become an exact copy of src (the trailing-to-leading copy)
	Hash() [32]byte // digest of the whole state; equal hashes = equal states
}

// Verdict is what Deliver did with a command.
type Verdict uint8

// Verdicts.
const (
	// Accepted: filed in every state (executed out of order by the states
	// that had already passed its tick).
	Accepted Verdict = iota + 1
	// Duplicate: a command with the same (mirror, seq) was already accepted.
	Duplicate
	// TooLate: even the last state had passed its tick; dropped and counted.
	TooLate
	// Future: stamped beyond now + MaxSkew; refused.
	Future
	// Overflow: MaxPending commands are already waiting; refused.
	Overflow
)

func (v Verdict) String() string {
	return [...]string{"invalid", "accepted", "duplicate", "too-late", "future", "overflow"}[min(int(v), 5)]
}

// Rollback reports one rollback: state State was overwritten with a copy
// of state By (the next trailing state) at tick Tick and re-executed Depth
// ticks to get back to where it was.
type Rollback struct {
	State int
	By    int
	Tick  uint64
	Depth uint64
	// At is the wall time (the boundary being executed) when it happened.
	At int64
	// Why names the first difference between the two records (or the
	// hashes, with CheckHash).
	Why string
}

// Checkpoint is the hash of the last state after one of its ticks.
type Checkpoint struct {
	Tick uint64
	Hash [32]byte
}

// maxReadyItems bounds the rollbacks and checkpoints a Ready collects when
// its owner does not call Tick (a Deliver-only caller); the rest are only
// counted.
const maxReadyItems = 4096

// Ready is what happened since the previous Tick (Deliver catches the
// states up to its time too, and what that did is reported here).
type Ready struct {
	// Leading and Confirmed are the ticks the leading and the last state
	// have executed.
	Leading, Confirmed uint64
	// Executed counts tick executions by all states (re-executions
	// included).
	Executed int
	// Rollbacks in the order they happened, cascades included.
	Rollbacks []Rollback
	// Checkpoints of the last state, in tick order.
	Checkpoints []Checkpoint
	// Dropped counts rollbacks and checkpoints not listed because more than
	// maxReadyItems piled up between two Ticks.
	Dropped int
}

// Tracer sees every call that changes a synchronizer, in order, so that a
// run can be replayed exactly (TraceWriter writes them to a file). Deliver
// and Tick are reported before they take effect, checkpoints as they are
// made.
type Tracer[C Command] interface {
	Deliver(now int64, c C)
	Tick(now int64)
	SetDelays(now int64, delays []time.Duration)
	Checkpoint(cp Checkpoint)
}

// Options are the synchronizer's optional hooks.
type Options[C Command] struct {
	// Tracer records the run (nil: none).
	Tracer Tracer[C]
	// CostClock measures execution and rollback cost for the metrics (a
	// monotonic reading, e.g. time.Since(start)). It never influences what
	// the synchronizer does. nil: costs are not measured.
	CostClock func() time.Duration
	// Metrics receives the counters (nil: a fresh one, see Metrics()).
	Metrics *Metrics
}

// slot is one tick's record of a state, kept for the comparison by the
// next trailing state.
type slot[R any] struct {
	tick uint64
	ok   bool
	rec  R
	hash [32]byte
}

// lane is one state of the chain with its delay, its recent records and
// the commands that arrived after it had passed their tick (canonical
// order; it runs them in its next tick). The commands it has not executed
// are those late ones plus every command of the shared list after its
// tick.
type lane[S any, C Command, R any] struct {
	state S
	delay time.Duration
	late  []*entry[C]
	ring  []slot[R]
}

func (l *lane[S, C, R]) record(t uint64) (*slot[R], bool) {
	if len(l.ring) == 0 {
		return nil, false
	}
	s := &l.ring[t%uint64(len(l.ring))]
	return s, s.ok && s.tick == t
}

// Synchronizer is trailing state synchronization [Cronin et al. 2001,
// §3.5] as a pure state machine: a leading state and trailing states, each
// executing the same commands a fixed delay behind the wall clock; a
// trailing state that produces a different record for a tick than the
// state ahead of it copies itself onto that state, which re-executes.
//
// It has no goroutine and reads no clock: Deliver files a command at the
// caller's time, Tick advances the states to the caller's time, and both
// take that time as Unix nanoseconds. Deliver first executes every tick due
// strictly before its time, so the outcome depends only on the deliveries
// and their times, not on how often Tick is called. Not safe for
// concurrent use.
type Synchronizer[S State[S, C, R], C Command, R Record[R]] struct {
	cfg     Config
	alloc   func() S
	lanes   []*lane[S, C, R]
	metrics *Metrics
	tracer  Tracer[C]
	clock   func() time.Duration

	// intake's pending commands are those the last state has not
	// executed; they become final when it does. all holds them in
	// canonical order, shared by every state (see lane).
	intake[C]
	all []*entry[C]

	now       int64
	started   bool
	replaying int
	batch     []C
	out       Ready
}

// New returns a synchronizer whose states all start as copies of initial.
// alloc returns a new state (any contents; it is overwritten by CopyFrom):
// New uses it for every state, SetDelays for states it adds.
func New[S State[S, C, R], C Command, R Record[R]](cfg Config, initial S, alloc func() S, opts Options[C]) (*Synchronizer[S, C, R], error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("tss config: %w", err)
	}
	if alloc == nil {
		return nil, errors.New("tss: New needs an alloc function")
	}
	s := &Synchronizer[S, C, R]{
		cfg:     cfg,
		alloc:   alloc,
		metrics: opts.Metrics,
		tracer:  opts.Tracer,
		clock:   opts.CostClock,
	}
	if s.metrics == nil {
		s.metrics = &Metrics{}
	}
	s.intake = newIntake[C](&s.cfg, s.metrics)
	for range cfg.Delays {
		st := alloc()
		st.CopyFrom(initial)
		s.lanes = append(s.lanes, &lane[S, C, R]{state: st})
	}
	s.applyDelays(cfg.Delays)
	return s, nil
}

// Config returns the configuration in force (delays as last set).
func (s *Synchronizer[S, C, R]) Config() Config {
	c := s.cfg
	c.Delays = slices.Clone(c.Delays)
	return c
}

// Metrics returns the counters (safe to read concurrently).
func (s *Synchronizer[S, C, R]) Metrics() *Metrics { return s.metrics }

// Leading is the state that feeds clients (index 0).
func (s *Synchronizer[S, C, R]) Leading() S { return s.lanes[0].state }

// Last is the last trailing state: the confirmed one, which every mirror
// agrees on and which character saves read.
func (s *Synchronizer[S, C, R]) Last() S { return s.lanes[len(s.lanes)-1].state }

// State returns state i (0 = leading).
func (s *Synchronizer[S, C, R]) State(i int) S { return s.lanes[i].state }

// States is the number of states (leading plus trailing).
func (s *Synchronizer[S, C, R]) States() int { return len(s.lanes) }

// Pending is the number of commands accepted and not yet executed by the
// last state.
func (s *Synchronizer[S, C, R]) Pending() int { return len(s.keys) }

// pendingOf is how many commands state i has not executed.
func (s *Synchronizer[S, C, R]) pendingOf(i int) int {
	l := s.lanes[i]
	t := l.state.Tick()
	n, _ := slices.BinarySearchFunc(s.all, t+1, func(e *entry[C], t uint64) int { return cmp.Compare(e.tick, t) })
	return len(l.late) + len(s.all) - n
}

// Now is the latest time the synchronizer was given.
func (s *Synchronizer[S, C, R]) Now() int64 { return s.now }

// Deliver files a command that arrived at now (Unix nanoseconds). Ticks due
// strictly before now are executed first, so a command arriving exactly on
// a state's tick boundary is in time for that tick.
func (s *Synchronizer[S, C, R]) Deliver(c C, now int64) Verdict {
	now = s.clampNow(now)
	if s.tracer != nil {
		s.tracer.Deliver(now, c)
	}
	s.advance(now, false)
	e, v := s.admit(c, now, s.Last().Tick())
	if v != Accepted {
		return v
	}
	s.all = insertEntry(s.all, e)
	for i, l := range s.lanes {
		if e.tick <= l.state.Tick() {
			l.late = insertEntry(l.late, e)
			s.metrics.outOfOrder[i].Add(1)
		}
	}
	return Accepted
}

// Tick executes every tick due at or before now and returns what happened
// since the previous Tick.
func (s *Synchronizer[S, C, R]) Tick(now int64) Ready {
	now = s.clampNow(now)
	if s.tracer != nil {
		s.tracer.Tick(now)
	}
	s.advance(now, true)
	out := s.out
	s.out = Ready{}
	out.Leading, out.Confirmed = s.Leading().Tick(), s.Last().Tick()
	return out
}

// clampNow keeps time from running backwards.
func (s *Synchronizer[S, C, R]) clampNow(now int64) int64 {
	if s.started && now < s.now {
		now = s.now
	}
	s.now, s.started = now, true
	return now
}

// advance executes, in wall-time order, every tick whose boundary is before
// now (or at now, when inclusive). Ties go to the state with the shorter
// delay, so a state's leader has always produced the record it is compared
// with.
func (s *Synchronizer[S, C, R]) advance(now int64, inclusive bool) {
	for {
		best, bestAt := -1, int64(0)
		for i, l := range s.lanes {
			b := s.cfg.boundary(l.state.Tick()+1, l.delay)
			if b > now || (!inclusive && b == now) || b == math.MaxInt64 {
				continue
			}
			if best < 0 || b < bestAt {
				best, bestAt = i, b
			}
		}
		if best < 0 {
			return
		}
		s.step(best, bestAt)
	}
}

// step executes the next tick of state i at wall time at, compares its
// record with the state ahead and rolls that one back on a difference.
func (s *Synchronizer[S, C, R]) step(i int, at int64) {
	l := s.lanes[i]
	t := l.state.Tick() + 1
	// The late commands (all of earlier ticks, so earlier in canonical
	// order), then the tick's own.
	s.batch = s.batch[:0]
	for _, e := range l.late {
		s.batch = append(s.batch, e.cmd)
	}
	first, _ := slices.BinarySearchFunc(s.all, t, func(e *entry[C], t uint64) int { return cmp.Compare(e.tick, t) })
	end := first
	for end < len(s.all) && s.all[end].tick == t {
		s.batch = append(s.batch, s.all[end].cmd)
		end++
	}
	n := len(s.batch)
	clear(l.late)
	l.late = l.late[:0]

	start := s.cost()
	rec := l.state.Advance(s.batch)
	s.metrics.execNanos.Add(int64(s.cost() - start))
	if got := l.state.Tick(); got != t {
		panic(fmt.Sprintf("tss: state %d's Advance moved from tick %d to %d; a State must execute exactly one tick", i, t-1, got))
	}
	s.metrics.Ticks.Add(1)
	s.metrics.Executed.Add(uint64(n))
	if s.replaying > 0 {
		s.metrics.Reexecuted.Add(uint64(n))
	}
	s.out.Executed++
	clear(s.batch)

	last := i == len(s.lanes)-1
	if last {
		// The last state is never late: every command up to t is final.
		s.retire(s.all[:end])
		clear(s.all[:end])
		s.all = s.all[end:]
		if t%s.cfg.CheckpointTicks == 0 {
			cp := Checkpoint{Tick: t, Hash: l.state.Hash()}
			s.metrics.Checkpoints.Add(1)
			if len(s.out.Checkpoints) < maxReadyItems {
				s.out.Checkpoints = append(s.out.Checkpoints, cp)
			} else {
				s.out.Dropped++
			}
			if s.tracer != nil {
				s.tracer.Checkpoint(cp)
			}
		}
	}

	var hash [32]byte
	if s.cfg.CheckHash {
		hash = l.state.Hash()
	}
	if !last {
		sl := &l.ring[t%uint64(len(l.ring))]
		*sl = slot[R]{tick: t, ok: true, rec: rec, hash: hash}
	}
	if i == 0 {
		return
	}
	ahead, ok := s.lanes[i-1].record(t)
	if !ok {
		s.metrics.Unchecked.Add(1)
		return
	}
	why, diverged := rec.Diverges(ahead.rec, s.cfg.WeakMargin)
	if !diverged && s.cfg.CheckHash && hash != ahead.hash {
		why, diverged = fmt.Sprintf("tick %d: state hashes differ", t), true
	}
	if diverged {
		s.rollback(i-1, i, t, at, why)
	}
}

// rollback copies state from onto state to (its leader), which has just
// been found to disagree at tick t, hands it from's late commands (its own
// commands after t are pending again by the shared list, since its tick is
// now t) and re-executes it up to the tick it had reached. The re-execution is checked against the state ahead
// of to, so rollbacks cascade to the leading state; and since to now agrees
// with from on every command up to the present, this one rollback at t
// cancels any other difference in (t, now].
func (s *Synchronizer[S, C, R]) rollback(to, from int, t uint64, at int64, why string) {
	dst, src := s.lanes[to], s.lanes[from]
	target := dst.state.Tick()
	start := s.cost()
	dst.state.CopyFrom(src.state)
	// src has just run its tick, so its late list is empty: the requeue
	// the paper pays for (commands after t pending again) costs nothing,
	// since dst's tick is now t and the shared list holds them.
	clear(dst.late)
	dst.late = append(dst.late[:0], src.late...)
	// dst's history up to t is now src's: take src's records of the ticks
	// a later rollback of src could re-execute and compare, those after the
	// tick of the state behind src (none if src is the last).
	if from+1 < len(s.lanes) {
		for u := s.lanes[from+1].state.Tick() + 1; u <= t; u++ {
			if sl, ok := src.record(u); ok {
				dst.ring[u%uint64(len(dst.ring))] = *sl
			}
		}
	}
	s.metrics.rollbackNanos.Add(int64(s.cost() - start))
	depth := target - min(target, t)
	s.metrics.observeRollback(from, depth)
	if len(s.out.Rollbacks) < maxReadyItems {
		s.out.Rollbacks = append(s.out.Rollbacks, Rollback{State: to, By: from, Tick: t, Depth: depth, At: at, Why: why})
	} else {
		s.out.Dropped++
	}
	s.replaying++
	for dst.state.Tick() < target {
		s.step(to, at)
	}
	s.replaying--
}

func (s *Synchronizer[S, C, R]) cost() time.Duration {
	if s.clock == nil {
		return 0
	}
	return s.clock()
}

// applyDelays sets each lane's delay and sizes its record ring so that
// every later state can find the records it compares with: a state rolled
// back by a state further behind re-executes from that state's tick, so
// state i needs its records back to the last state's tick, (dk-di)/P
// ticks, plus how far it is already ahead of the last state, plus two.
func (s *Synchronizer[S, C, R]) applyDelays(delays []time.Duration) {
	p := s.cfg.TickPeriod
	k := len(s.lanes) - 1
	for i, l := range s.lanes {
		l.delay = delays[i]
		if i == k {
			l.ring = nil
			continue
		}
		span := (delays[k] - delays[i] + p - 1) / p
		lead := int64(l.state.Tick()) - int64(s.lanes[k].state.Tick())
		size := int(max(int64(span), lead, 0)) + 2
		if len(l.ring) == size {
			continue
		}
		ring := make([]slot[R], size)
		for _, sl := range l.ring {
			if sl.ok && sl.tick+uint64(size) > l.state.Tick() {
				ring[sl.tick%uint64(size)] = sl
			}
		}
		l.ring = ring
	}
}

// SetDelays changes the delays (and possibly the number of states) at wall
// time now. It is safe at any time because no state ever moves back in
// simulation time and every new state starts as an exact copy of an
// existing one with its pending commands and records:
//
//   - The last state stays the last state: it has only ever executed
//     commands in order, and so stays equal to the in-order run. With a
//     shorter last delay it catches up at once (commands become too late
//     sooner); with a longer one it pauses until the clock has caught up.
//   - Any other new state j starts from the existing state with the
//     smallest delay at or above the new delay (at or behind its new
//     target, it catches up by executing, checked as usual), or from the
//     last state if there is none.
//   - Existing states are reused where one maps to one; any other state
//     needs a copy (counted in Copies).
//   - Record rings are resized to cover the new gaps and keep the records
//     they hold, so comparisons go on across the change; a tick whose
//     leader record is missing is skipped and counted as Unchecked.
//
// Mirrors of one game should change the last delay together: a command
// that is too late on one mirror and in time on another makes their last
// states differ.
func (s *Synchronizer[S, C, R]) SetDelays(now int64, delays []time.Duration) error {
	cfg := s.cfg
	cfg.Delays = slices.Clone(delays)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("tss set delays: %w", err)
	}
	now = s.clampNow(now)
	if s.tracer != nil {
		s.tracer.SetDelays(now, cfg.Delays)
	}
	s.advance(now, false)
	old := s.lanes
	src := make([]int, len(delays))
	for j, d := range delays {
		src[j] = len(old) - 1
		if j == len(delays)-1 {
			break
		}
		for i, l := range old {
			if l.delay >= d {
				src[j] = i
				break
			}
		}
	}
	// The last new state mapping to an old one takes it over; the others
	// get copies, made before anything executes.
	owner := map[int]int{}
	for j, i := range src {
		owner[i] = j
	}
	lanes := make([]*lane[S, C, R], len(delays))
	for j, i := range src {
		if owner[i] == j {
			continue
		}
		from := old[i]
		st := s.alloc()
		start := s.cost()
		st.CopyFrom(from.state)
		s.metrics.rollbackNanos.Add(int64(s.cost() - start))
		s.metrics.Copies.Add(1)
		lanes[j] = &lane[S, C, R]{state: st, late: slices.Clone(from.late), ring: slices.Clone(from.ring)}
	}
	for i, j := range owner {
		lanes[j] = old[i]
	}
	s.lanes = lanes
	s.cfg = cfg
	s.applyDelays(cfg.Delays)
	s.metrics.Reconfigured.Add(1)
	return nil
}

// Reset makes every state a copy of state (a resync from the authority)
// and files again, in every state, each known command stamped after the
// state's tick: the pending ones and those the last state had already
// executed. It fails if state is older than the commands still retained
// (MaxPending of them). Record rings are cleared. A trace does not cover a
// reset: start a new one after it.
func (s *Synchronizer[S, C, R]) Reset(state S) error {
	t := state.Tick()
	if s.evicted > t {
		return fmt.Errorf("tss reset: state at tick %d is older than the retained commands (a command of tick %d is forgotten)", t, s.evicted)
	}
	known := s.all
	again := slices.DeleteFunc(slices.Clone(known), func(e *entry[C]) bool { return e.tick <= t })
	back := s.unretire(t)
	again = append(again, back...)
	known = append(known, back...)
	slices.SortFunc(again, compareEntries[C])
	for _, l := range s.lanes {
		l.state.CopyFrom(state)
		s.metrics.Copies.Add(1)
		clear(l.late)
		l.late = l.late[:0]
		clear(l.ring)
	}
	s.all = again
	s.rekey(again, known)
	s.metrics.Resets.Add(1)
	return nil
}
