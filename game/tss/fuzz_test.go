package tss

import (
	"slices"
	"testing"
	"time"
)

// FuzzStep feeds random deliveries (future, late, duplicate, any key),
// ticks and delay changes to a synchronizer: it must not panic, must keep
// its pending commands within MaxPending and its bookkeeping consistent,
// and its last state must stay the in-order run of what it accepted.
func FuzzStep(f *testing.F) {
	f.Add([]byte{0, 10, 5, 1, 1, 3, 1, 200, 0, 40, 2, 3, 0, 1, 1, 9, 1, 250})
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{2, 1, 3, 0, 5, 1, 0, 0, 2, 255, 4, 1, 1, 1, 200, 2, 2, 1, 9, 0, 7, 3})
	f.Add([]byte{0, 255, 255, 255, 255, 255, 255, 1, 255, 0, 128, 128, 128, 128, 128, 128, 2, 0, 0})
	f.Fuzz(runFuzzStep)
}

func runFuzzStep(t *testing.T, data []byte) {
	const maxPending = 16
	cfg := Config{
		TickPeriod: 10 * time.Millisecond,
		Delays:     []time.Duration{0, 30 * time.Millisecond, 70 * time.Millisecond},
		MaxPending: maxPending,
		MaxSkew:    5 * time.Millisecond,
		History:    300 * time.Millisecond,
	}
	s, err := newFxSync(cfg, Options[fxCmd]{})
	if err != nil {
		t.Fatal(err)
	}
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	now := int64(0)
	var accepted []fxCmd
	var checkpoints []Checkpoint
	collect := func(r Ready) { checkpoints = append(checkpoints, r.Checkpoints...) }
	for len(data) > 0 {
		switch next() % 4 {
		case 0, 1: // deliver
			c := fxCmd{
				Stamp:  now + (int64(next())-200)*int64(time.Millisecond),
				Mirror: uint32(next() % 3),
				Seq:    uint64(next() % 8),
				Player: next() % fxPlayers,
				Op:     fxOp(1 + next()%3),
				Arg:    int64(int8(next())),
			}
			if s.Deliver(c, now) == Accepted {
				accepted = append(accepted, c)
			}
		case 2: // time passes
			now += int64(next()) * int64(time.Millisecond)
			collect(s.Tick(now))
		case 3: // new delays: one to four states, increasing, within History
			n := 1 + int(next()%4)
			d := []time.Duration{time.Duration(next()%20) * time.Millisecond}
			for len(d) < n {
				d = append(d, d[len(d)-1]+time.Duration(1+next()%90)*time.Millisecond)
			}
			err := s.SetDelays(now, d)
			if (err == nil) != (d[len(d)-1] <= cfg.History) {
				t.Fatalf("SetDelays(%v) = %v", d, err)
			}
		}
		checkSyncInvariants(t, s, maxPending)
	}
	collect(s.Tick(now + int64(time.Second)))
	checkSyncInvariants(t, s, maxPending)
	ref := fxReference(cfg, accepted, s.Last().Tick())
	for _, cp := range checkpoints {
		if cp.Hash != ref[cp.Tick] {
			t.Fatalf("last state differs from the in-order run at tick %d", cp.Tick)
		}
	}
}

func checkSyncInvariants(t *testing.T, s *fxSync, maxPending int) {
	t.Helper()
	if s.Pending() > maxPending {
		t.Fatalf("%d pending, bound %d", s.Pending(), maxPending)
	}
	if len(s.retired) > maxPending || len(s.retiredSet) > maxPending {
		t.Fatalf("%d retired keys remembered (%d in the set), bound %d", len(s.retired), len(s.retiredSet), maxPending)
	}
	last := s.lanes[len(s.lanes)-1]
	if len(s.all) != len(s.keys) || len(last.late) != 0 {
		t.Fatalf("%d commands listed, %d keys, %d late for the last state", len(s.all), len(s.keys), len(last.late))
	}
	if !slices.IsSortedFunc(s.all, compareEntries[fxCmd]) {
		t.Fatal("shared list not in canonical order")
	}
	for _, e := range s.all {
		if e.tick <= last.state.Tick() {
			t.Fatalf("the last state passed tick %d of a listed command (%d)", e.tick, last.state.Tick())
		}
	}
	for i, l := range s.lanes {
		if !slices.IsSortedFunc(l.late, compareEntries[fxCmd]) {
			t.Fatalf("state %d: late commands not in canonical order", i)
		}
		for _, e := range l.late {
			if e.tick > l.state.Tick() {
				t.Fatalf("state %d at tick %d holds a command of tick %d as late", i, l.state.Tick(), e.tick)
			}
		}
		if i > 0 && l.state.Tick() > s.lanes[i-1].state.Tick() {
			t.Fatalf("state %d at tick %d is ahead of state %d at %d", i, l.state.Tick(), i-1, s.lanes[i-1].state.Tick())
		}
	}
}
