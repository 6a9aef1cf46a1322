package tss

import (
	"testing"
	"time"
)

// TestPendingCommandsTransfer: a synchronizer started from another's last
// state plus its pending commands ends where the original ends.
func TestPendingCommandsTransfer(t *testing.T) {
	cfg := Config{TickPeriod: 10 * time.Millisecond, Delays: []time.Duration{0, 20 * time.Millisecond, 60 * time.Millisecond}}
	a, err := New(cfg, newFx(), newFx, Options[fxCmd]{})
	if err != nil {
		t.Fatal(err)
	}
	ms := int64(time.Millisecond)
	for i := range 50 {
		a.Deliver(fxCmd{Stamp: int64(i) * 7 * ms, Mirror: 1, Seq: uint64(i + 1), Player: uint8(i % fxPlayers), Op: fxMove, Arg: int64(i)}, int64(i)*7*ms+3*ms)
	}
	now := int64(50*7)*ms + 3*ms
	a.Tick(now)
	pending := a.PendingCommands()
	if len(pending) == 0 || len(pending) != a.Pending() {
		t.Fatalf("%d pending commands listed, Pending() says %d", len(pending), a.Pending())
	}
	for i := 1; i < len(pending); i++ {
		if compareFx(pending[i], pending[i-1]) < 0 {
			t.Fatalf("pending commands out of order at %d", i)
		}
	}
	c := cfg
	initial := newFx()
	initial.CopyFrom(a.Last())
	b, err := New(c, initial, newFx, Options[fxCmd]{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pending {
		if v := b.Deliver(p, now); v != Accepted {
			t.Fatalf("pending %+v: %s", p, v)
		}
	}
	end := now + int64(200*time.Millisecond)
	a.Tick(end)
	b.Tick(end)
	for i := range a.States() {
		if a.State(i).Hash() != b.State(i).Hash() {
			t.Fatalf("state %d differs after the transfer", i)
		}
	}
}
