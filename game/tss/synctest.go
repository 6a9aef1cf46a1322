package tss

import (
	"errors"
	"fmt"
)

// SyncTest finds nondeterminism the way GGRS's SyncTestSession does: every
// tick it restores the state of Back ticks ago from a snapshot and
// re-simulates those ticks with the same commands, comparing each re-run
// tick's hash and record with the first run. A State that reads anything
// but its own contents and its commands (map iteration order, a clock, a
// global counter, a field CopyFrom forgets) sooner or later gives a
// different hash on the re-run; the first such tick is reported.
type SyncTest[S State[S, C, R], C Command, R Record[R]] struct {
	back    int
	state   S
	scratch S
	// ring of the last back ticks: the state before the tick, its
	// commands, and the hash and record after it.
	before []S
	cmds   [][]C
	hashes [][32]byte
	recs   []R
	ticks  []uint64
	n      int // ticks recorded so far (saturates at back)
	report SyncReport
}

// SyncReport is what a SyncTest found.
type SyncReport struct {
	// Ticks is how many ticks were simulated; Resimulated how many were
	// simulated again from a snapshot.
	Ticks, Resimulated uint64
	// Mismatches counts the ticks at which a re-simulation first differed
	// from the original run (one per re-simulation that differed).
	Mismatches int
	// First is the earliest tick that differed, Why the difference (empty
	// if none).
	First uint64
	Why   string
}

// NewSyncTest starts a sync test on a copy of initial, re-simulating back
// ticks every tick.
func NewSyncTest[S State[S, C, R], C Command, R Record[R]](initial S, alloc func() S, back int) (*SyncTest[S, C, R], error) {
	if back < 1 || back > 1024 {
		return nil, fmt.Errorf("sync test: back %d outside [1, 1024]", back)
	}
	if alloc == nil {
		return nil, errors.New("sync test: alloc is nil")
	}
	st := &SyncTest[S, C, R]{
		back:    back,
		state:   alloc(),
		scratch: alloc(),
		cmds:    make([][]C, back),
		hashes:  make([][32]byte, back),
		recs:    make([]R, back),
		ticks:   make([]uint64, back),
	}
	st.state.CopyFrom(initial)
	for range back {
		st.before = append(st.before, alloc())
	}
	return st, nil
}

// State is the state under test (after the last tick).
func (st *SyncTest[S, C, R]) State() S { return st.state }

// Report returns what was found so far.
func (st *SyncTest[S, C, R]) Report() SyncReport { return st.report }

// Advance executes one tick with cmds (canonical order), then re-simulates
// the last back ticks from the snapshot taken before the oldest of them.
// It returns the tick's record from the original run.
func (st *SyncTest[S, C, R]) Advance(cmds []C) R {
	t := st.state.Tick() + 1
	i := int(t % uint64(st.back))
	st.before[i].CopyFrom(st.state)
	st.cmds[i] = append(st.cmds[i][:0], cmds...)
	rec := st.state.Advance(st.cmds[i])
	st.hashes[i], st.recs[i], st.ticks[i] = st.state.Hash(), rec, t
	st.n = min(st.n+1, st.back)
	st.report.Ticks++

	first := t + 1 - uint64(st.n)
	st.scratch.CopyFrom(st.before[int(first%uint64(st.back))])
	for u := first; u <= t; u++ {
		j := int(u % uint64(st.back))
		r := st.scratch.Advance(st.cmds[j])
		st.report.Resimulated++
		why, bad := "", false
		switch {
		case st.scratch.Tick() != u:
			why, bad = fmt.Sprintf("re-simulation reached tick %d instead of %d", st.scratch.Tick(), u), true
		case st.scratch.Hash() != st.hashes[j]:
			why, bad = fmt.Sprintf("tick %d: state hash differs on re-simulation", u), true
			if w, d := r.Diverges(st.recs[j], 0); d {
				why += " (" + w + ")"
			}
		default:
			why, bad = r.Diverges(st.recs[j], 0)
		}
		if bad {
			st.report.Mismatches++
			if st.report.Why == "" || u < st.report.First {
				st.report.First, st.report.Why = u, why
			}
			break
		}
	}
	return rec
}

// RunSyncTest runs a sync test for ticks ticks on a copy of initial; next
// gives each tick's commands from the state before it (bots observing the
// world) and must return them in canonical order.
func RunSyncTest[S State[S, C, R], C Command, R Record[R]](initial S, alloc func() S, back, ticks int, next func(s S) []C) (SyncReport, error) {
	st, err := NewSyncTest[S, C, R](initial, alloc, back)
	if err != nil {
		return SyncReport{}, err
	}
	for range ticks {
		st.Advance(next(st.state))
	}
	return st.Report(), nil
}
