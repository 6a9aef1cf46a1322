package regions

import (
	"fmt"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
)

// disagreements lists where a live peer's placement of a region differs
// from the truth (the two live peers closest to the region's key).
func (cl *cluster) disagreements() []string {
	var wrong []string
	for _, c := range cl.regions() {
		wantC, wantR := cl.truth(c)
		for _, m := range cl.live() {
			if gotC, gotR := m.svc.Coordinator(c); gotC != wantC || gotR != wantR {
				wrong = append(wrong, fmt.Sprintf("peer %s: region %s placement %s/%s, want %s/%s",
					m.id().ShortString(), c, gotC.ShortString(), gotR.ShortString(), wantC.ShortString(), wantR.ShortString()))
			}
		}
	}
	return wrong
}

// agreeUnaided polls, up to within, until every live peer names the true
// coordinator and replica of every region, looking nothing up itself: the
// routing tables settle by the DHT's own bootstrap and refreshes and the
// peers' own traffic, as on a network nobody tends. It returns how long
// that took.
func (cl *cluster) agreeUnaided(t testing.TB, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	var wrong []string
	defer func() {
		if t.Failed() && len(wrong) > 0 {
			t.Logf("placement not agreed without lookups (%d disagreements), first: %s", len(wrong), wrong[0])
		}
	}()
	vnettest.EventuallyWithin(t, within, "placement agreed without lookups", func() bool {
		wrong = cl.disagreements()
		return len(wrong) == 0
	})
	return time.Since(start)
}
