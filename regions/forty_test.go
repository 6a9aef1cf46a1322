package regions

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

const (
	fortyPeers  = 40
	linkLatency = 2 * time.Millisecond
)

func counter(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func counterValue(t testing.TB, b []byte) uint64 {
	if len(b) != 8 {
		t.Fatalf("counter value of %d bytes", len(b))
	}
	return binary.BigEndian.Uint64(b)
}

// observations records every (object, version) -> value pair any client
// saw acknowledged or in a rejection: a second value at one version would
// be a forked object.
type observations struct {
	mu   sync.Mutex
	seen map[string]map[uint64]uint64
	errs []string
}

func newObservations() *observations { return &observations{seen: map[string]map[uint64]uint64{}} }

func (o *observations) see(obj string, version, value uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m := o.seen[obj]
	if m == nil {
		m = map[uint64]uint64{}
		o.seen[obj] = m
	}
	if prev, ok := m[version]; ok && prev != value {
		o.errs = append(o.errs, fmt.Sprintf("object %s version %d has two values: %d and %d", obj, version, prev, value))
	}
	m[version] = value
}

// incrementer adds one to a counter object with read-write updates,
// starting from what it last saw and learning the current value from
// rejections. It returns how many increments were acknowledged.
type incrementer struct {
	cl      *Client
	region  Coord
	obj     string
	version uint64
	value   uint64
	obs     *observations
	acked   int
	reject  int
	unknown int
	// lossOK, if set, says why the region may have lost updates (""
	// if it may not): a rejection older than the read is then taken as
	// that loss, logged in losses, instead of an inconsistency.
	lossOK func() string
	losses []string
	// base is the value the counter restarted from at the last accepted
	// loss, ackedSince the increments acknowledged after it: the value
	// the object must hold.
	base       uint64
	ackedSince int
}

func (in *incrementer) step(ctx context.Context, t testing.TB) {
	o, err := in.cl.ReadWrite(ctx, in.region, in.obj, in.version, counter(in.value+1))
	var ce *ConflictError
	switch {
	case err == nil:
		in.acked++
		in.ackedSince++
		if o.Version != in.version+1 {
			in.obs.mu.Lock()
			in.obs.errs = append(in.obs.errs, fmt.Sprintf("%s: ack of version %d after reading %d", in.obj, o.Version, in.version))
			in.obs.mu.Unlock()
		}
		in.version, in.value = o.Version, in.value+1
		in.obs.see(in.region.String()+"/"+in.obj, in.version, in.value)
	case errors.As(err, &ce):
		in.reject++
		name := in.region.String() + "/" + in.obj
		lost := ce.Current.Version <= in.version && in.version != 0
		cause := ""
		if lost && in.lossOK != nil {
			cause = in.lossOK()
		}
		if lost && cause != "" {
			in.losses = append(in.losses, fmt.Sprintf("%s: rejection carried version %d after the read %d, accepted as a loss: %s", name, ce.Current.Version, in.version, cause))
			in.obs.forget(name)
		} else if lost {
			in.obs.mu.Lock()
			in.obs.errs = append(in.obs.errs, fmt.Sprintf("%s: rejection carried version %d, not newer than the read %d", in.obj, ce.Current.Version, in.version))
			in.obs.mu.Unlock()
		}
		in.version = ce.Current.Version
		in.value = 0
		if len(ce.Current.Value) == 8 {
			in.value = counterValue(t, ce.Current.Value)
		} else if ce.Current.Version != 0 {
			in.obs.mu.Lock()
			in.obs.errs = append(in.obs.errs, fmt.Sprintf("%s: rejection at version %d without the current value", in.obj, ce.Current.Version))
			in.obs.mu.Unlock()
		}
		if lost && cause != "" {
			in.base, in.ackedSince = in.value, 0
		}
		if in.version > 0 {
			in.obs.see(name, in.version, in.value)
		}
	default:
		in.unknown++
		t.Logf("increment of %s/%s failed: %v", in.region, in.obj, err)
	}
}

// TestFortyPeers runs the region protocol on 40 hosts of libp2p's
// in-memory network (2 ms links) and a bootstrap node, in a world of 16
// regions. The scenarios share the cluster to keep the test lean.
func TestFortyPeers(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cl := newCluster(t, fortyPeers, linkLatency, testConfig(4, 4))
		// Steps, not subtests: a subtest cannot run in a bubble. A failed
		// step ends the test.
		t.Log("step: placement agreement")
		testPlacementAgreement(t, cl)
		t.Log("step: conflicting increments")
		testConflictingIncrements(t, cl)
		t.Log("step: churn under load")
		testChurnUnderLoad(t, cl)
	})
}

func testPlacementAgreement(t *testing.T, cl *cluster) {
	// First without help: no lookup of the test's until the peers agree.
	unaided := cl.agreeUnaided(t, 45*time.Second)
	t.Logf("all %d peers agree on coordinator and replica of all 16 regions after %s without lookups", fortyPeers, unaided)
	took := cl.settle(t, 45*time.Second)
	t.Logf("all %d peers agree on coordinator and replica of all 16 regions after %s", fortyPeers, took)

	// Touch every region from a random peer: the true coordinator ends up
	// holding it with the true replica.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	live := cl.live()
	var wg sync.WaitGroup
	for i, c := range cl.regions() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := live[(i*7)%len(live)].cl.Initialize(ctx, c, "marker", []byte(c.String())); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, c := range cl.regions() {
		wantC, wantR := cl.truth(c)
		waitUntil(t, 30*time.Second, fmt.Sprintf("region %s held by its true coordinator and replica", c), func() bool {
			return cl.role(wantC, c) == pb.Role_ROLE_COORDINATOR && cl.replicaOf(wantC, c) == wantR && cl.role(wantR, c) == pb.Role_ROLE_REPLICA
		})
	}
}

func (cl *cluster) role(p peer.ID, c Coord) pb.Role {
	m := cl.byID(p)
	if m == nil {
		return pb.Role_ROLE_NONE
	}
	sl := m.svc.slot(c)
	var role pb.Role
	inspect(m.svc, func() { role = sl.m.role })
	return role
}

func (cl *cluster) replicaOf(p peer.ID, c Coord) peer.ID {
	m := cl.byID(p)
	if m == nil {
		return ""
	}
	sl := m.svc.slot(c)
	var replica peer.ID
	inspect(m.svc, func() { replica = sl.m.replica })
	return replica
}

func testConflictingIncrements(t *testing.T, cl *cluster) {
	cl.settle(t, 45*time.Second)
	const (
		clients    = 20
		increments = 5 // acknowledged, per client and object
	)
	objects := []struct {
		region Coord
		id     string
	}{{Coord{0, 1}, "food-a"}, {Coord{2, 3}, "food-b"}}
	obs := newObservations()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	live := cl.live()
	var wg sync.WaitGroup
	results := make([][]*incrementer, clients)
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := live[i*2%len(live)]
			for _, o := range objects {
				results[i] = append(results[i], &incrementer{cl: m.cl, region: o.region, obj: o.id, obs: obs})
			}
			for _, in := range results[i] {
				for in.acked < increments && in.unknown == 0 && ctx.Err() == nil {
					in.step(ctx, t)
				}
			}
		}()
	}
	wg.Wait()
	if len(obs.errs) > 0 {
		t.Fatalf("inconsistencies:\n%v", obs.errs)
	}
	for j, o := range objects {
		acked, rejected := 0, 0
		for i := range results {
			acked += results[i][j].acked
			rejected += results[i][j].reject
			if results[i][j].unknown > 0 {
				t.Errorf("client %d: %d increments of %s without an answer", i, results[i][j].unknown, o.id)
			}
		}
		st, err := live[5].cl.Get(ctx, o.region)
		if err != nil {
			t.Fatal(err)
		}
		got := findObject(st.Objects, o.id)
		if got == nil {
			t.Fatalf("object %s missing", o.id)
		}
		v := counterValue(t, got.Value)
		t.Logf("%s/%s: %d acknowledged increments, %d rejections, final value %d version %d", o.region, o.id, acked, rejected, v, got.Version)
		if v != uint64(acked) || got.Version != uint64(acked) {
			t.Errorf("%s: value %d version %d, want both %d (acknowledged increments)", o.id, v, got.Version, acked)
		}
	}
}

func findObject(objs []Object, id string) *Object {
	for i := range objs {
		if objs[i].ID == id {
			return &objs[i]
		}
	}
	return nil
}

// closerKey makes an identity closer to the region's key than every live
// peer, so that it takes the region over when it joins.
func closerKey(t testing.TB, key string, than peer.ID) crypto.PrivKey {
	for i := 0; i < 100000; i++ {
		k, _, err := crypto.GenerateEd25519Key(nil)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(k)
		if isCloser(key, id, than) {
			return k
		}
	}
	t.Fatal("no closer key found")
	return nil
}

// isCloser reports whether a is closer than b to key.
func isCloser(key string, a, b peer.ID) bool {
	c, _ := Placement(key, []peer.ID{a, b})
	return c == a
}

func testChurnUnderLoad(t *testing.T, cl *cluster) {
	cl.settle(t, 45*time.Second)
	busy := []Coord{{0, 0}, {1, 2}, {3, 1}, {2, 2}}
	rng := rand.New(rand.NewPCG(7, 11))

	// The peers to stop: the coordinator and the replica of each busy
	// region, and random others, a quarter of the peers in all. The
	// clients and the observer run on peers that stay.
	var victims []peer.ID
	pick := func(p peer.ID) {
		if !containsPeer(victims, p) && len(victims) < fortyPeers/4 {
			victims = append(victims, p)
		}
	}
	for _, c := range busy {
		co, re := cl.truth(c)
		pick(co)
		pick(re)
	}
	live := cl.live()
	for len(victims) < fortyPeers/4 {
		pick(live[rng.IntN(len(live))].id())
	}
	var stayers []*member
	for _, m := range live {
		if !containsPeer(victims, m.id()) {
			stayers = append(stayers, m)
		}
	}

	obs := newObservations()
	doubles := newDoubleFailures()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	var all []*incrementer
	var stopLoad atomic.Bool
	for i, c := range busy {
		for j := 0; j < 2; j++ {
			in := &incrementer{cl: stayers[(2*i+j)%len(stayers)].cl, region: c, obj: fmt.Sprintf("food-%d", j), obs: obs,
				lossOK: func() string { return doubles.cause(c) }}
			all = append(all, in)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !stopLoad.Load() {
					opCtx, opCancel := context.WithTimeout(ctx, 40*time.Second)
					in.step(opCtx, t)
					opCancel()
				}
			}()
		}
	}
	observer := stayers[len(stayers)-1]
	var worst time.Duration
	reach := func(event string) {
		for _, c := range busy {
			start := time.Now()
			gctx, gcancel := context.WithTimeout(ctx, 40*time.Second)
			_, err := observer.cl.Get(gctx, c)
			gcancel()
			if err != nil {
				t.Fatalf("region %s unreachable after %s: %v", c, event, err)
			}
			worst = max(worst, time.Since(start))
		}
	}
	time.Sleep(200 * time.Millisecond) // some load before the churn
	joined := 0
	for i, v := range victims {
		m := cl.byID(v)
		role := "other"
		for _, c := range busy {
			co, re := cl.truth(c)
			if co == v {
				role = "coordinator of " + c.String()
			} else if re == v && role == "other" {
				role = "replica of " + c.String()
			}
		}
		time.Sleep(100 * time.Millisecond) // load between the changes
		how := "stopped"
		if i%2 == 1 {
			how = "crashed"
		}
		marked, unmarked := doubles.before(cl, obs, busy, v, how)
		for _, cause := range marked {
			t.Logf("a double failure by the test's own hand: %s", cause)
		}
		for _, what := range unmarked {
			t.Logf("not a double failure of the test's making (a loss here fails the test): %s", what)
		}
		if i%2 == 0 {
			m.stop()
		} else {
			cl.crash(t, m) // no Close: links cut, no answers
		}
		t.Logf("%s peer %d/%d (%s)", how, i+1, len(victims), role)
		reach(how + " " + role)
		if i%2 == 1 {
			continue
		}
		// A new peer after every other stop; most of them closer to a
		// busy region than its coordinator, so that they take it over.
		var key crypto.PrivKey
		if i%4 != 2 {
			c := busy[(i/2)%len(busy)]
			co, _ := cl.truth(c)
			key = closerKey(t, Key(cl.cfg.World, c), co)
		}
		cl.add(t, key)
		joined++
		reach("a peer joining")
	}
	time.Sleep(300 * time.Millisecond)
	stopLoad.Store(true)
	wg.Wait()
	if len(obs.errs) > 0 {
		t.Fatalf("inconsistencies:\n%v", obs.errs)
	}
	// What each object must hold: the increments acknowledged since the
	// counter last restarted (from 0, or from what a loss left).
	want := map[string]*incrementer{}
	for _, in := range all {
		want[in.region.String()+"/"+in.obj] = in
	}
	final := map[string]uint64{}
	var losses []string
	for _, c := range busy {
		st, err := observer.cl.Get(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range st.Objects {
			if !strings.HasPrefix(o.ID, "food-") {
				continue
			}
			name := c.String() + "/" + o.ID
			v := counterValue(t, o.Value)
			final[name] = v
			if in := want[name]; in != nil && v < in.base+uint64(in.ackedSince) && doubles.cause(c) != "" {
				// Lost after the client's last step: its versions
				// start again too.
				losses = append(losses, fmt.Sprintf("%s: final value %d below the %d the client was acknowledged, accepted as a loss: %s",
					name, v, in.base+uint64(in.ackedSince), doubles.cause(c)))
				obs.forget(name)
				in.base, in.ackedSince = v, 0
			}
			obs.see(name, o.Version, v)
			if o.Version != v {
				t.Errorf("%s: version %d but value %d", name, o.Version, v)
			}
		}
	}
	total := 0
	for _, in := range all {
		name := in.region.String() + "/" + in.obj
		total += in.acked
		losses = append(losses, in.losses...)
		if in.unknown > 0 {
			t.Errorf("%s: %d increments without an answer", name, in.unknown)
		}
		if final[name] != in.base+uint64(in.ackedSince) {
			t.Errorf("%s: final value %d, want %d (acknowledged increments %d, %d of them since a loss the test caused)",
				name, final[name], in.base+uint64(in.ackedSince), in.acked, in.ackedSince)
		}
	}
	if len(obs.errs) > 0 {
		t.Fatalf("inconsistencies:\n%v", obs.errs)
	}
	names := make([]string, 0, len(final))
	for k := range final {
		names = append(names, k)
	}
	sort.Strings(names)
	sort.Strings(losses)
	for _, l := range losses {
		t.Logf("double failure caused by the test's own stops: %s", l)
	}
	lost := "none lost"
	if len(losses) > 0 {
		lost = fmt.Sprintf("%d losses, each after the test stopped the last live holder of its region", len(losses))
	}
	t.Logf("churn: %d peers stopped, %d joined; %d acknowledged increments on %d objects, %s; worst time for a region to answer after a change: %s",
		len(victims), joined, total, len(names), lost, worst)
}

func TestDoubleFailureRebuildsFromCaches(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cl := newCluster(t, 12, linkLatency, testConfig(2, 2))
		cl.settle(t, 30*time.Second)
		c := Coord{1, 0}
		co, re := cl.truth(c)
		var members []*member
		for _, m := range cl.live() {
			if m.id() != co && m.id() != re && len(members) < 4 {
				members = append(members, m)
			}
		}
		var subs []*Subscription
		for _, m := range members {
			sub, err := m.svc.Subscribe(c)
			if err != nil {
				t.Fatal(err)
			}
			subs = append(subs, sub)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Let the topic mesh form so that the members see the updates.
		waitUntil(t, 10*time.Second, "members to meet on the event topic", func() bool {
			for _, m := range members {
				m.svc.mu.Lock()
				rt := m.svc.topics[c]
				n := 0
				if rt != nil {
					n = len(rt.m.ListPeers())
				}
				m.svc.mu.Unlock()
				if n < len(members)-1 {
					return false
				}
			}
			return true
		})
		want := map[string]string{}
		for i := 0; i < 5; i++ {
			id := fmt.Sprintf("obj-%d", i)
			for v := 0; v <= i; v++ {
				val := fmt.Sprintf("%s@%d", id, v)
				if _, err := members[v%len(members)].cl.Initialize(ctx, c, id, []byte(val)); err != nil {
					t.Fatal(err)
				}
				want[id] = val
			}
		}
		select {
		case up := <-subs[0].C:
			if up.Region != c || len(up.Objects) == 0 {
				t.Fatalf("odd update %+v", up)
			}
		case <-ctx.Done():
			t.Fatal("no update delivered to a subscriber")
		}
		for _, m := range members {
			waitUntil(t, 10*time.Second, "member caches to hold every update", func() bool {
				got := map[string]string{}
				for _, o := range m.svc.Cached(c) {
					got[o.ID] = string(o.Value)
				}
				return fmt.Sprint(got) == fmt.Sprint(want)
			})
		}
		// Coordinator and replica die together.
		cl.byID(co).stop()
		cl.byID(re).stop()
		start := time.Now()
		st, err := members[0].cl.Get(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("region back from members' caches after %s", time.Since(start))
		got := map[string]string{}
		for _, o := range st.Objects {
			got[o.ID] = string(o.Value)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("rebuilt region holds %v, want %v", got, want)
		}
		// And it takes updates again, with versions above the cached ones.
		o, err := members[1].cl.ReadWrite(ctx, c, "obj-4", 5, []byte("after"))
		if err != nil || o.Version != 6 {
			t.Fatalf("update after rebuild: %v %+v", err, o)
		}
	})
}
