package play

import (
	"context"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	ping "github.com/libp2p/go-libp2p/p2p/protocol/ping"
)

// latencyProbe measures, every two seconds, the round trip to the
// coordinator of the player's region with libp2p ping, for the status
// line.
type latencyProbe struct {
	h     host.Host
	store ObjectStore
	loop  *gameLoop
	life  lifetime

	mu  sync.Mutex
	rtt time.Duration // zero: unknown, or this peer coordinates
}

func newLatencyProbe(h host.Host, store ObjectStore, loop *gameLoop) *latencyProbe {
	return &latencyProbe{h: h, store: store, loop: loop, life: newLifetime()}
}

func (l *latencyProbe) start() {
	l.life.spawn(func() {
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			l.measure()
			select {
			case <-l.life.ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

func (l *latencyProbe) stop() { l.life.end() }

func (l *latencyProbe) measure() {
	coord, _ := l.store.Coordinator(coordOf(l.loop.region()))
	var rtt time.Duration
	if coord != "" && coord != l.h.ID() {
		ctx, cancel := context.WithTimeout(l.life.ctx, 2*time.Second)
		select {
		case r := <-ping.Ping(ctx, l.h, coord):
			if r.Error == nil {
				rtt = r.RTT
			}
		case <-ctx.Done():
		}
		cancel()
	}
	l.mu.Lock()
	l.rtt = rtt
	l.mu.Unlock()
}

// latency is the last round trip measured.
func (l *latencyProbe) latency() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rtt
}
