package demo

import (
	"context"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game/play"
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
	deadline := time.Now().Add(90 * time.Second)
	for {
		batches, uplinked := uint64(0), 0
		for _, p := range all {
			st := p.PositionStats()
			batches += st.BatchesPublished
			if st.SentUplink > 0 {
				uplinked++
			}
		}
		seen := len(d.Player.Snapshot().Players)
		if batches > 0 && uplinked == len(all) && seen == len(d.Bots) {
			t.Logf("%d batches published, every player sent to a coordinator, the player sees %d bots", batches, seen)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 90s: %d batches, %d of %d players sent to a coordinator, the player sees %d of %d bots",
				batches, uplinked, len(all), seen, len(d.Bots))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
