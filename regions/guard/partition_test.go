package guard

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/leases/leasetest"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
)

// TestLeaseHandOver is the partition test of issue 6: four region peers
// hold their region leases from a real account server, each over its own
// HTTP link, while two of them keep writing to a region. The region's
// coordinator is cut off from the account server (and, in the second case,
// from the other peers too). It must stop committing within its lease; a
// peer that then gains the lease takes the region over and serves it. From
// the server's lease log and every peer's log of commits with lease IDs,
// no two coordinators ever commit for the region at the same time.
func TestLeaseHandOver(t *testing.T) {
	for _, tc := range []struct {
		name    string
		isolate bool
	}{
		{"cut from the account server", false},
		{"cut from the account server and the peers", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vnettest.Run(t, func(t *testing.T) { testHandOver(t, tc.isolate) })
		})
	}
}

func testHandOver(t *testing.T, isolate bool) {
	as := newAccountServer(t, time.Second)
	cl := newCluster(t, as)
	for i := range 4 {
		cl.add(t, fmt.Sprintf("peer%d", i), true)
	}
	region := regions.Coord{X: 1, Y: 2}
	lease := LeaseName(world, region)
	cl.settle(t, region)
	coordID, replicaID := regions.Placement(regions.Key(world, region), cl.ids())
	a := cl.byID(coordID)
	var users []*member
	for _, m := range cl.members {
		if m.id() != coordID && m.id() != replicaID {
			users = append(users, m)
		}
	}

	// Continuous load: each user writes its own objects, one at a time,
	// each write retried by the client until it commits.
	var served struct {
		sync.Mutex
		at []time.Time
	}
	ctx, stopLoad := context.WithCancel(context.Background())
	var load sync.WaitGroup
	defer func() { stopLoad(); load.Wait() }()
	for i, u := range users {
		load.Go(func() {
			for k := 0; ctx.Err() == nil; k++ {
				octx, cancel := context.WithTimeout(ctx, 30*time.Second)
				_, err := u.svc.Client().Initialize(octx, region, fmt.Sprintf("obj-%d-%d", i, k%8), []byte(fmt.Sprint(k)))
				cancel()
				switch {
				case err == nil:
					served.Lock()
					served.at = append(served.at, time.Now())
					served.Unlock()
				case ctx.Err() == nil:
					t.Errorf("user %s: write failed: %v", u.name, err)
					return
				}
			}
		})
	}
	// The coordinator's own player writes too, so that the coordinator
	// has work to commit while it is cut off. Isolated, its writes cannot
	// succeed; they only have to stop committing. Its writes do not cross
	// the network, so nothing in them waits: a player's pace between them
	// keeps the loop from holding the test's virtual clock still (time in
	// a synctest bubble moves only while every goroutine waits).
	load.Go(func() {
		for k := 0; ctx.Err() == nil; k++ {
			octx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, _ = a.svc.Client().Initialize(octx, region, fmt.Sprintf("own-%d", k%8), []byte(fmt.Sprint(k)))
			cancel()
			time.Sleep(5 * time.Millisecond)
		}
	})
	servedAfter := func(since time.Time) (n int, first time.Time) {
		served.Lock()
		defer served.Unlock()
		for _, at := range served.at {
			if at.After(since) {
				if n == 0 {
					first = at
				}
				n++
			}
		}
		return n, first
	}
	commitsBy := func(holder peer.ID, since time.Time) (n int) {
		for _, c := range as.rec.Commits() {
			if c.Region == lease && c.Holder == holder.String() && c.At.After(since) {
				n++
			}
		}
		return n
	}
	vnettest.EventuallyWithin(t, 30*time.Second, "the coordinator to commit under its lease", func() bool {
		return commitsBy(coordID, time.Time{}) >= 20
	})

	cut := time.Now()
	a.link.cut.Store(true)
	if isolate {
		for _, p := range append(cl.IDs(), cl.Boot.ID()) {
			if p != coordID {
				cl.Net.Cut(coordID, p)
			}
		}
	}
	// Another peer commits under a newer lease, and the users are served
	// again.
	var successor string
	vnettest.EventuallyWithin(t, 60*time.Second, "another peer to take the region over and serve it", func() bool {
		for _, c := range as.rec.Commits() {
			if c.Region == lease && c.Holder != coordID.String() && c.At.After(cut) {
				successor = c.Holder
				n, _ := servedAfter(c.At)
				return n >= 20
			}
		}
		return false
	})
	vnettest.EventuallyWithin(t, 10*time.Second, "the cut coordinator to give its lease up", func() bool {
		return len(a.guard.Gate.Holding()) == 0
	})

	var lastA, firstNew time.Time
	for _, c := range as.rec.Commits() {
		if c.Region != lease {
			continue
		}
		if c.Holder == coordID.String() && c.At.After(lastA) {
			lastA = c.At
		}
		if c.Holder == successor && c.At.After(cut) && firstNew.IsZero() {
			firstNew = c.At
		}
	}
	_, firstServed := servedAfter(firstNew)
	t.Logf("hand-over (%s): cut at 0; old coordinator's last commit at %v; new coordinator (replica: %v) first commits at %v; first write served after it at %v",
		map[bool]string{false: "account server link cut", true: "isolated"}[isolate],
		lastA.Sub(cut).Round(time.Millisecond), successor == replicaID.String(),
		firstNew.Sub(cut).Round(time.Millisecond), firstServed.Sub(cut).Round(time.Millisecond))

	if !isolate {
		// Heal: the region keeps being served (it may move back to the
		// closer peer once that can hold the lease again).
		healed := time.Now()
		a.link.cut.Store(false)
		vnettest.EventuallyWithin(t, 30*time.Second, "the region to be served after the heal", func() bool {
			n, _ := servedAfter(healed)
			return n >= 20
		})
	}
	stopLoad()
	load.Wait()

	if err := as.rec.Check(); err != nil {
		t.Fatal(err)
	}
	var ivs []leasetest.Interval
	for _, iv := range as.rec.Intervals() {
		if iv.Region == lease {
			ivs = append(ivs, iv)
		}
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].LeaseID < ivs[j].LeaseID })
	if len(ivs) < 2 || ivs[0].Holder != coordID.String() {
		t.Fatalf("lease intervals %+v: want the first coordinator's first, then another's", ivs)
	}
	var desc []string
	for _, iv := range ivs {
		desc = append(desc, fmt.Sprintf("%d:%s[%v,%v]", iv.LeaseID, cl.byID(peer.ID(mustDecode(t, iv.Holder))).name,
			iv.Start.Sub(cut).Round(time.Millisecond), iv.End.Sub(cut).Round(time.Millisecond)))
	}
	t.Logf("leases (times from the cut): %v; commits logged: %d", desc, len(as.rec.Commits()))
}

func mustDecode(t *testing.T, s string) peer.ID {
	t.Helper()
	id, err := peer.Decode(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
