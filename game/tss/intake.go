package tss

import (
	"cmp"
	"slices"
	"time"
)

// entry is one accepted command with what ordering needs, shared by every
// state's pending list.
type entry[C Command] struct {
	cmd    C
	at     int64
	mirror uint32
	seq    uint64
	tick   uint64
}

func compareEntries[C Command](a, b *entry[C]) int {
	if c := cmp.Compare(a.at, b.at); c != 0 {
		return c
	}
	if c := cmp.Compare(a.mirror, b.mirror); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

func (e *entry[C]) key() commandKey { return commandKey{e.mirror, e.seq} }

// insertEntry files e in canonical order.
func insertEntry[C Command](list []*entry[C], e *entry[C]) []*entry[C] {
	pos, _ := slices.BinarySearchFunc(list, e, compareEntries[C])
	return slices.Insert(list, pos, e)
}

type commandKey struct {
	mirror uint32
	seq    uint64
}

// intake is what the Synchronizer and TimeWarp share about commands
// before they run: the refusals (future stamps, duplicates, too late,
// overflow) and the memory of which commands are pending and which were
// recently executed for good. keys holds the commands accepted and not yet
// final; retired, a FIFO of at most MaxPending, the latest that became
// final, so that a late duplicate is still told apart from a late command
// and a resync can file again what its state does not contain. evicted is
// the highest tick of a command that left the FIFO.
type intake[C Command] struct {
	cfg        *Config
	metrics    *Metrics
	keys       map[commandKey]struct{}
	retired    []*entry[C]
	retiredAt  int
	retiredSet map[commandKey]struct{}
	evicted    uint64
}

func newIntake[C Command](cfg *Config, m *Metrics) intake[C] {
	return intake[C]{cfg: cfg, metrics: m, keys: map[commandKey]struct{}{}, retiredSet: map[commandKey]struct{}{}}
}

// admit checks c, arriving at now, against the refusals; final is the
// last tick already executed for good (a command of that tick or earlier
// is too late). An accepted command is counted pending.
func (in *intake[C]) admit(c C, now int64, final uint64) (*entry[C], Verdict) {
	at := c.At()
	mirror, seq := c.Key()
	key := commandKey{mirror, seq}
	if at > now && at-now > int64(in.cfg.MaxSkew) {
		in.metrics.Future.Add(1)
		return nil, Future
	}
	if _, dup := in.keys[key]; dup {
		in.metrics.Duplicates.Add(1)
		return nil, Duplicate
	}
	if _, dup := in.retiredSet[key]; dup {
		in.metrics.Duplicates.Add(1)
		return nil, Duplicate
	}
	tick := in.cfg.TickOf(at)
	if tick <= final {
		in.metrics.TooLate.Add(1)
		return nil, TooLate
	}
	if len(in.keys) >= in.cfg.MaxPending {
		in.metrics.Overflow.Add(1)
		return nil, Overflow
	}
	in.keys[key] = struct{}{}
	in.metrics.Accepted.Add(1)
	in.metrics.observeLatency(time.Duration(max(now-at, 0)))
	return &entry[C]{cmd: c, at: at, mirror: mirror, seq: seq, tick: tick}, Accepted
}

// retire marks commands final.
func (in *intake[C]) retire(done []*entry[C]) {
	for _, e := range done {
		delete(in.keys, e.key())
		in.remember(e)
	}
}

func (in *intake[C]) remember(e *entry[C]) {
	if len(in.retired) < in.cfg.MaxPending {
		in.retired = append(in.retired, e)
	} else {
		old := in.retired[in.retiredAt]
		delete(in.retiredSet, old.key())
		in.evicted = max(in.evicted, old.tick)
		in.retired[in.retiredAt] = e
		in.retiredAt = (in.retiredAt + 1) % len(in.retired)
	}
	in.retiredSet[e.key()] = struct{}{}
}

// rekey makes pending the set of pending commands after a change of the
// chain; every other command of known (the pending ones before it) is
// retired.
func (in *intake[C]) rekey(pending, known []*entry[C]) {
	keep := make(map[commandKey]struct{}, len(in.keys))
	for _, e := range pending {
		keep[e.key()] = struct{}{}
	}
	for _, e := range known {
		if _, ok := keep[e.key()]; !ok {
			in.remember(e)
		}
	}
	in.keys = keep
}

// unretire takes the retired commands of ticks after t out of the FIFO
// (they are pending again) and returns them.
func (in *intake[C]) unretire(t uint64) []*entry[C] {
	var again []*entry[C]
	kept := in.retired[:0]
	for _, e := range slices.Concat(in.retired[in.retiredAt:], in.retired[:in.retiredAt]) {
		if e.tick > t {
			again = append(again, e)
			delete(in.retiredSet, e.key())
			continue
		}
		kept = append(kept, e)
	}
	clear(in.retired[len(kept):])
	in.retired, in.retiredAt = kept, 0
	return again
}
