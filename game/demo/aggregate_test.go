package demo

import (
	"context"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/node/await"
)

// TestAggregatedDemo starts the demo in aggregated mode: the players send
// their positions to their region's coordinator, which publishes them in
// batches, and the player sees the bots.
func TestAggregatedDemo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := Start(ctx, Config{Bots: 3, HTTP: "127.0.0.1:0", NoAccounts: true, Aggregate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	all := append([]*play.Peer{d.Player}, d.Bots...)
	var batches uint64
	var uplinked, seen int
	if err := await.UntilErr(90*time.Second, "batches published and every player seen", func() bool {
		batches, uplinked = 0, 0
		for _, p := range all {
			st := p.PositionStats()
			batches += st.BatchesPublished
			if st.SentUplink > 0 {
				uplinked++
			}
		}
		seen = len(d.Player.Snapshot().Players)
		return batches > 0 && uplinked == len(all) && seen == len(d.Bots)
	}); err != nil {
		t.Fatalf("%v: %d batches, %d of %d players sent to a coordinator, the player sees %d of %d bots",
			err, batches, uplinked, len(all), seen, len(d.Bots))
	}
	t.Logf("%d batches published, every player sent to a coordinator, the player sees %d bots", batches, seen)
}
