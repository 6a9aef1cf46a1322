package regions

import (
	"fmt"
	"strings"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

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
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.m.role != pb.Role_ROLE_COORDINATOR && sl.m.role != pb.Role_ROLE_REPLICA {
		return false
	}
	for id, v := range newest {
		o := sl.m.objects[id]
		if o == nil || o.Version < v {
			return false
		}
	}
	return true
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
