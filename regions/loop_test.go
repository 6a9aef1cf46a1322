package regions

import (
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/regions/memnet"
)

// TestServiceLoopSteps: machine steps handed to the Service's loop run
// there one at a time, in the order each caller handed them; after Close
// none runs and onLoop says so at once instead of waiting.
func TestServiceLoopSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New()
		defer net.Close()
		mp, err := net.Add(scenarioKey(100))
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{World: "loop", Width: 2, Height: 2, RequestTimeout: time.Second,
			ProbeTimeout: 500 * time.Millisecond, MaintainEvery: 100 * time.Millisecond,
			Logger: testLogger(), Registerer: prometheus.NewRegistry()}
		svc, err := NewWithTransport(mp, cfg)
		if err != nil {
			t.Fatal(err)
		}
		const callers, steps = 4, 50
		var running, overlaps int // touched only by steps, one at a time if serialized
		seen := make([][]int, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				for j := range steps {
					ok := svc.onLoop(func() {
						running++
						if running > 1 {
							overlaps++
						}
						seen[i] = append(seen[i], j)
						running--
					})
					if !ok {
						t.Errorf("caller %d: step %d did not run", i, j)
					}
				}
			})
		}
		wg.Wait()
		if overlaps != 0 {
			t.Errorf("%d steps overlapped", overlaps)
		}
		for i, got := range seen {
			for j, n := range got {
				if n != j {
					t.Fatalf("caller %d: steps ran in order %v", i, got)
				}
			}
			if len(got) != steps {
				t.Fatalf("caller %d: %d of %d steps ran", i, len(got), steps)
			}
		}
		svc.Close()
		if svc.onLoop(func() { t.Error("a step ran after Close") }) {
			t.Fatal("onLoop reported a step run after Close")
		}
	})
}

// inspect runs f on s's loop, which owns the regions' slots: a test's look
// at a machine. Once s closed, its loop has stopped (Close waits for it)
// and f runs here.
func inspect(s *Service, f func()) {
	if !s.onLoop(f) {
		s.Close()
		f()
	}
}
