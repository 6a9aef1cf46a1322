package regions

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"

	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// doubleFailures records the busy regions whose every up-to-date copy the
// churn test itself took away: it stopped a peer that held what the
// clients had seen acknowledged, and later the last live peer that did (a
// coordinator whose new replica had not got its snapshot yet, say). The
// package documents that such a region is rebuilt from the members'
// caches and may lose updates, so the test accepts a loss there, and only
// there, and says so. A last holder whose other copy the test did not
// take is not a double failure of the test's making: a loss there fails.
type doubleFailures struct {
	mu     sync.Mutex
	causes map[Coord]string // region -> the stops that took its copies
	// took: per region, the stops that took a peer holding its newest
	// state since it last had two holders.
	took map[Coord][]string
}

func newDoubleFailures() *doubleFailures {
	return &doubleFailures{causes: map[Coord]string{}, took: map[Coord][]string{}}
}

// before is called just before the test stops (or crashes) victim. For
// each busy region it lists the live peers holding every food object at
// the newest version the clients saw; if victim is the last of them and
// an earlier stop of the test took another since the region last had two,
// the region is marked. It returns what it marked, and the last holders
// it did not mark, for the test's log.
func (d *doubleFailures) before(cl *cluster, obs *observations, busy []Coord, victim peer.ID, how string) (marked, unmarked []string) {
	stop := fmt.Sprintf("%s %s", how, victim.ShortString())
	for _, c := range busy {
		newest := obs.newest(c.String() + "/")
		if len(newest) == 0 {
			continue
		}
		var holders []peer.ID
		for _, m := range cl.live() {
			if holdsAtLeast(m, c, newest) {
				holders = append(holders, m.id())
			}
		}
		d.mu.Lock()
		if len(holders) >= 2 {
			// Two copies again: what earlier stops took is made good.
			d.took[c] = nil
		}
		if !containsPeer(holders, victim) {
			d.mu.Unlock()
			continue
		}
		if len(holders) == 1 {
			if _, ok := d.causes[c]; !ok {
				if earlier := d.took[c]; len(earlier) > 0 {
					d.causes[c] = fmt.Sprintf("the test %s, the last live holder of %s's newest state, after it %s",
						stop, c, strings.Join(earlier, ", then "))
					marked = append(marked, d.causes[c])
				} else {
					unmarked = append(unmarked, fmt.Sprintf("the test %s, the only holder of %s's newest state, though it took no other", stop, c))
				}
			}
		}
		d.took[c] = append(d.took[c], stop)
		d.mu.Unlock()
	}
	return marked, unmarked
}

// cause says why region c may have lost updates ("" if it may not).
func (d *doubleFailures) cause(c Coord) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.causes[c]
}

// holdsAtLeast reports whether m holds a copy of region c (as coordinator
// or replica) with every object of newest at that version or later.
func holdsAtLeast(m *member, c Coord, newest map[string]uint64) bool {
	sl := m.svc.existingSlot(c)
	if sl == nil {
		return false
	}
	holds := true
	inspect(m.svc, func() {
		if sl.m.role != pb.Role_ROLE_COORDINATOR && sl.m.role != pb.Role_ROLE_REPLICA {
			holds = false
			return
		}
		for id, v := range newest {
			if o := sl.m.objects[id]; o == nil || o.Version < v {
				holds = false
				return
			}
		}
	})
	return holds
}

// newest returns, for each object whose name starts with prefix
// ("region/"), the highest version seen, keyed by the object's ID.
func (o *observations) newest(prefix string) map[string]uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := map[string]uint64{}
	for name, versions := range o.seen {
		id, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		for v := range versions {
			out[id] = max(out[id], v)
		}
	}
	return out
}

// forget drops what was seen of obj: after an accepted loss its versions
// start again, with other values.
func (o *observations) forget(obj string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.seen, obj)
}

// TestDoubleFailureLossAcceptedOnlyWhenTestMade checks the churn test's
// allowance for losses: the test stops a region's coordinator and then,
// before a new replica can hold anything, its replica, so the region comes
// back empty (nobody subscribed, no cache). The stop of the replica is
// marked as a double failure of the test's making, the client that had
// read the lost version takes the rejection as that loss, and one without
// the allowance still reports it as an inconsistency.
func TestDoubleFailureLossAcceptedOnlyWhenTestMade(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cl := newCluster(t, 8, linkLatency, testConfig(2, 2))
		cl.settle(t, 30*time.Second)
		c := Coord{1, 1}
		co, re := cl.truth(c)
		var client *member
		for _, m := range cl.live() {
			if m.id() != co && m.id() != re {
				client = m
				break
			}
		}
		obs := newObservations()
		doubles := newDoubleFailures()
		allowed := &incrementer{cl: client.cl, region: c, obj: "food-0", obs: obs, lossOK: func() string { return doubles.cause(c) }}
		strict := &incrementer{cl: client.cl, region: c, obj: "food-1", obs: obs}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, in := range []*incrementer{allowed, strict} {
			for in.acked < 3 && in.unknown == 0 {
				in.step(ctx, t)
			}
		}
		if len(obs.errs) > 0 {
			t.Fatalf("inconsistencies before any stop: %v", obs.errs)
		}
		marked, unmarked := doubles.before(cl, obs, []Coord{c}, co, "stopped")
		if len(marked)+len(unmarked) != 0 {
			t.Fatalf("stopping the coordinator of a region with a replica marked %v %v", marked, unmarked)
		}
		cl.byID(co).stop()
		marked, _ = doubles.before(cl, obs, []Coord{c}, re, "stopped")
		if len(marked) != 1 || doubles.cause(c) == "" {
			t.Fatalf("stopping the last holder after the coordinator marked %v", marked)
		}
		t.Logf("marked: %s", marked[0])
		cl.byID(re).stop()

		allowed.step(ctx, t)
		strict.step(ctx, t)
		if allowed.unknown+strict.unknown > 0 {
			t.Fatal("increments without an answer after the double failure")
		}
		if len(allowed.losses) != 1 || allowed.base != 0 || allowed.ackedSince != 0 {
			t.Fatalf("the allowed client took no loss: losses %v, base %d, acked since %d", allowed.losses, allowed.base, allowed.ackedSince)
		}
		t.Logf("accepted: %s", allowed.losses[0])
		if len(obs.errs) != 1 || !strings.Contains(obs.errs[0], "food-1: rejection carried version 0") {
			t.Fatalf("the strict client's loss: %v, want one inconsistency", obs.errs)
		}
		// The allowed client goes on from the rebuilt region.
		for allowed.ackedSince < 2 && allowed.unknown == 0 {
			allowed.step(ctx, t)
		}
		if allowed.version != 2 || allowed.value != 2 {
			t.Fatalf("after the loss: version %d value %d, want 2 and 2", allowed.version, allowed.value)
		}
	})
}
