package regions

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/regions/memnet"
)

// TestLivenessInputsReachTheLoop: what tells a Service that a peer lives or
// died -- a failed probe, a connection that opens, a message from the
// peer, the loop's own recheck of a dead peer still connected, DeadFor
// running out -- reaches the liveness table on the loop, and placement
// asked off the loop sees it once the input was taken.
func TestLivenessInputsReachTheLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New()
		const deadFor = 5 * time.Second
		cfg := Config{World: "live", Width: 2, Height: 2, RequestTimeout: time.Second,
			ProbeTimeout: 500 * time.Millisecond, MaintainEvery: 100 * time.Millisecond, DeadFor: deadFor}
		svcs := memnetServices(t, net, cfg, 2, 200)
		a, b := svcs[0], svcs[1]
		bID := b.h.ID()
		// onTable is whether b is alive in a's table, asked on a's loop.
		onTable := func() bool {
			var alive bool
			a.onLoop(func() { alive = a.live.alive(bID, time.Now()) })
			return alive
		}
		// check compares b's liveness in a's view and table with want;
		// the candidates too when the test did not move the network
		// since a last listed them (a background refresh does).
		check := func(step string, want bool, candidates bool) {
			t.Helper()
			if got := a.alive(bID); got != want {
				t.Fatalf("%s: b alive in a's view = %v, want %v", step, got, want)
			}
			if got := onTable(); got != want {
				t.Fatalf("%s: b alive in a's table = %v, want %v", step, got, want)
			}
			if got := containsPeer(a.candidates(), bID); candidates && got != want {
				t.Fatalf("%s: b among a's candidates = %v, want %v", step, got, want)
			}
		}
		synctest.Wait()
		check("at start", true, true)

		net.Partition([]peer.ID{a.h.ID()}, []peer.ID{bID})
		if a.probe(bID) {
			t.Fatal("a's probe of b crossed the partition")
		}
		check("after a failed probe", false, true)

		net.Heal() // a connection to b opens: a notification
		synctest.Wait()
		check("after the connection opened", true, false)

		a.markDead(bID)
		check("marked dead", false, false)
		if !b.ping(a.h.ID()) {
			t.Fatal("b's ping of a went unanswered")
		}
		check("after a message from b", true, false)

		// Marked dead while connected: the loop's recheck probes b, which
		// answers.
		a.markDead(bID)
		check("marked dead again", false, false)
		time.Sleep((recheckTicks + 1) * cfg.MaintainEvery)
		synctest.Wait()
		check("after the loop's recheck", true, false)

		// Dead and unreachable: alive again once DeadFor passed, and the
		// loop's periodic work forgets it.
		net.Partition([]peer.ID{a.h.ID()}, []peer.ID{bID})
		a.markDead(bID)
		time.Sleep(deadFor)
		synctest.Wait()
		check("DeadFor not yet passed", false, false)
		time.Sleep(2 * cfg.MaintainEvery)
		synctest.Wait()
		check("DeadFor passed", true, false)
		var held int
		a.onLoop(func() { held = len(a.live.dead.at) })
		if held != 0 {
			t.Fatalf("a's table still holds %d dead peers after DeadFor", held)
		}
	})
}
