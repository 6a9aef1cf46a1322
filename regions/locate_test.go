package regions

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/regions/memnet"
)

// hangingDials is a memnet peer that finds no one connected and whose
// dials hang until their deadline, as to peers behind a starved machine;
// it counts how many dials are under way at once.
type hangingDials struct {
	*memnet.Peer
	mu         sync.Mutex
	open, most int
}

func (h *hangingDials) Connected(peer.ID) bool { return false }

func (h *hangingDials) Connect(ctx context.Context, _ peer.ID) error {
	h.mu.Lock()
	h.open++
	h.most = max(h.most, h.open)
	h.mu.Unlock()
	<-ctx.Done()
	h.mu.Lock()
	h.open--
	h.mu.Unlock()
	return ctx.Err()
}

// TestLocateDialsAtOnce: Locate dials the peers its lookup found all at
// once, so that peers slow to answer cost one ProbeTimeout, not one each.
func TestLocateDialsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New()
		t.Cleanup(net.Close)
		var self *hangingDials
		for i := range 5 {
			mp, err := net.Add(scenarioKey(320 + i))
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				self = &hangingDials{Peer: mp}
			}
		}
		cfg := Config{World: "dials", Width: 4, Height: 4, Logger: testLogger(), Registerer: prometheus.NewRegistry()}
		svc, err := NewWithTransport(self, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close() })
		if _, _, err := svc.Locate(context.Background(), Coord{X: 1, Y: 1}); err != nil {
			t.Fatal(err)
		}
		if self.most != 4 {
			t.Fatalf("at most %d dials under way at once, want the 4 other peers'", self.most)
		}
	})
}
