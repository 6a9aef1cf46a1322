package regions

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/regions/memnet"
)

// TestServicesOverAutomaticMemnet runs five region services over the
// in-memory network in automatic mode with 2ms links, in virtual time:
// a write commits, the coordinator crashes, and the next write from the
// same player commits on top of the first at the replica, which took over.
func TestServicesOverAutomaticMemnet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		net := memnet.New()
		net.SetLatency(2 * time.Millisecond)
		cfg := Config{World: "auto", Width: 4, Height: 4, RequestTimeout: 2 * time.Second,
			ProbeTimeout: 500 * time.Millisecond, MaintainEvery: 500 * time.Millisecond}
		svcs := map[peer.ID]*Service{}
		var ids []peer.ID
		for _, svc := range memnetServices(t, net, cfg, 5, 100) {
			svcs[svc.h.ID()] = svc
			ids = append(ids, svc.h.ID())
		}
		c := Coord{X: 2, Y: 3}
		order := sortByDistance(Key(cfg.World, c), ids)
		player := svcs[order[4]].Client()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		o, err := player.ReadWrite(ctx, c, "x", 0, []byte("1"))
		if err != nil || o.Version != 1 {
			t.Fatalf("first write: %+v, %v", o, err)
		}
		if r := svcs[order[0]].Role(c); r != RoleCoordinator {
			t.Fatalf("closest peer is %s, want coordinator", r)
		}
		net.Crash(order[0])
		svcs[order[0]].Close()
		o, err = player.ReadWrite(ctx, c, "x", 1, []byte("2"))
		if err != nil || o.Version != 2 {
			t.Fatalf("write after the crash: %+v, %v", o, err)
		}
		if r := svcs[order[1]].Role(c); r != RoleCoordinator {
			t.Fatalf("the old replica is %s, want coordinator", r)
		}
	})
}

// memnetServices starts n Services with cfg on net, their keys
// scenarioKey(keyBase), scenarioKey(keyBase+1), ..., each with its own
// metrics registry; the test's cleanup closes them, then net.
func memnetServices(t *testing.T, net *memnet.Network, cfg Config, n, keyBase int) []*Service {
	t.Helper()
	t.Cleanup(net.Close) // after the Services: cleanups run last first
	var svcs []*Service
	for i := range n {
		mp, err := net.Add(scenarioKey(keyBase + i))
		if err != nil {
			t.Fatal(err)
		}
		c := cfg
		c.Logger = testLogger()
		c.Registerer = prometheus.NewRegistry()
		svc, err := NewWithTransport(mp, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close() })
		svcs = append(svcs, svc)
	}
	return svcs
}
