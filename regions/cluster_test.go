package regions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
)

// cluster is a set of region peers on a virtual network (vnettest), plus
// one bootstrap node that does not run the region protocol (as in
// production). Tests run it inside a synctest bubble (vnettest.Run), where
// its latencies, timeouts and waits are simulated time.
type cluster struct {
	t       *testing.T
	vc      *vnettest.Cluster
	cfg     Config
	mu      sync.Mutex
	members []*member
	hashes  hashCache
	// hostiles counts the hostile peers, for their addresses.
	hostiles int
	// keys draws the identities of the peers added without one: seeded,
	// so a run is reproducible (vnettest's own sequence is not used: it
	// refuses identities that would overflow a routing-table bucket,
	// which forty peers cannot avoid at the widest one).
	keys *rand.ChaCha8
	// adjust, if set, changes a new member's config (gates, hooks).
	adjust func(cfg *Config, self peer.ID)
}

type member struct {
	p   *vnettest.Peer
	n   *node.Node
	svc *Service
	cl  *Client
	up  bool
	reg *prometheus.Registry // the service's metrics
}

func (m *member) id() peer.ID { return m.n.ID() }

func testLogger() *slog.Logger {
	if os.Getenv("REGIONS_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

func newCluster(t testing.TB, peers int, latency time.Duration, cfg Config) *cluster {
	t.Helper()
	tt, _ := t.(*testing.T)
	if latency == 0 {
		// vnettest reads 0 as its default of 1 ms; a benchmark asking
		// for no latency gets next to none.
		latency = time.Nanosecond
	}
	cl := &cluster{t: tt, cfg: cfg, keys: rand.NewChaCha8([32]byte([]byte("overworld regions cluster tests!"))),
		vc: vnettest.New(t, 0, vnettest.Options{Latency: latency, Logger: testLogger()})}
	for i := 0; i < peers; i++ {
		cl.add(t, nil)
	}
	return cl
}

// add starts a region peer, with the given identity if key is not nil
// (else the next of the cluster's seeded identities).
func (cl *cluster) add(t testing.TB, key crypto.PrivKey) *member {
	t.Helper()
	if key == nil {
		var err error
		cl.mu.Lock()
		key, _, err = crypto.GenerateEd25519Key(cl.keys)
		cl.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	p := cl.vc.AddKey(key)
	n := p.Node
	cfg := cl.cfg
	cfg.Logger = testLogger().With("peer", n.ID().ShortString())
	cfg.Registerer = prometheus.NewRegistry()
	if cl.adjust != nil {
		cl.adjust(&cfg, n.ID())
	}
	svc, err := New(n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The service stops before its node when the cluster closes.
	p.OnClose(func() { svc.Close() })
	m := &member{p: p, n: n, svc: svc, cl: svc.Client(), up: true, reg: cfg.Registerer.(*prometheus.Registry)}
	cl.mu.Lock()
	cl.members = append(cl.members, m)
	cl.mu.Unlock()
	return m
}

// stop stops m cleanly: its service, then its node (peers hear it leave).
func (m *member) stop() {
	m.up = false
	m.svc.Close()
	m.n.Close()
}

// crash kills m as a crash does, not as a clean stop: its region service
// stops at once (a crashed process runs nothing more), its links to every
// peer are cut and its streams and connections dropped (vnettest's
// Crash), and its node is not closed, so no peer hears a goodbye. The
// cluster closes it when the test ends.
func (cl *cluster) crash(t testing.TB, m *member) {
	cl.mu.Lock()
	m.up = false
	cl.mu.Unlock()
	m.svc.Close()
	cl.vc.Crash(m.p)
}

// close ends the cluster before the test does.
func (cl *cluster) close() { cl.vc.Close() }

func (cl *cluster) live() []*member {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var out []*member
	for _, m := range cl.members {
		if m.up {
			out = append(out, m)
		}
	}
	return out
}

func (cl *cluster) byID(p peer.ID) *member {
	for _, m := range cl.live() {
		if m.id() == p {
			return m
		}
	}
	return nil
}

// truth is the placement over every live region peer.
func (cl *cluster) truth(c Coord) (peer.ID, peer.ID) {
	var ids []peer.ID
	for _, m := range cl.live() {
		ids = append(ids, m.id())
	}
	order := cl.hashes.sortByDistance(Key(cl.cfg.World, c), ids)
	return order[0], order[1]
}

func (cl *cluster) regions() []Coord {
	var out []Coord
	for y := 0; y < cl.cfg.Height; y++ {
		for x := 0; x < cl.cfg.Width; x++ {
			out = append(out, Coord{x, y})
		}
	}
	return out
}

// settle waits until every live peer names the true coordinator and
// replica of every region. A peer that disagrees about a region looks the
// region up on the DHT (as acquiring a region does), which fills its view.
// Its checks keep their cadence (200 ms apart at first, to give the DHT's
// own refreshes a chance); inside a bubble they cost no wall time.
func (cl *cluster) settle(t testing.TB, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		var wrong []string
		todo := map[*member]Coord{}
		truth := map[Coord][2]peer.ID{}
		for _, c := range cl.regions() {
			co, re := cl.truth(c)
			truth[c] = [2]peer.ID{co, re}
		}
		for _, m := range cl.live() {
			for _, c := range cl.regions() {
				wantC, wantR := truth[c][0], truth[c][1]
				gotC, gotR := m.svc.Coordinator(c)
				if gotC == wantC && gotR == wantR {
					continue
				}
				wrong = append(wrong, fmt.Sprintf("peer %s: region %s placement %s/%s, want %s/%s",
					m.id().ShortString(), c, gotC.ShortString(), gotR.ShortString(), wantC.ShortString(), wantR.ShortString()))
				if _, ok := todo[m]; !ok {
					todo[m] = c
				}
			}
		}
		if len(wrong) == 0 {
			return time.Since(start)
		}
		if os.Getenv("REGIONS_SETTLE_DEBUG") != "" {
			t.Logf("%s: %d disagreements over %d peers, e.g. %s", time.Since(start).Round(time.Millisecond), len(wrong), len(todo), wrong[0])
		}
		if time.Since(start) > within {
			t.Fatalf("placement not agreed after %s (%d disagreements), first: %s", within, len(wrong), wrong[0])
		}
		if time.Since(start) < 3*time.Second {
			// Give the DHT's own refreshes a chance first.
			time.Sleep(200 * time.Millisecond)
			continue
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for m, c := range todo {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, _, _ = m.svc.Locate(ctx, c)
			}()
		}
		wg.Wait()
		time.Sleep(50 * time.Millisecond)
	}
}

// waitUntil polls cond until it holds; within bounds the wait (simulated
// time inside a bubble).
func waitUntil(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	vnettest.EventuallyWithin(t, within, what, cond)
}

func testConfig(w, h int) Config {
	return Config{World: "test", Width: w, Height: h, RequestTimeout: 3 * time.Second, ProbeTimeout: time.Second,
		MaintainEvery: 200 * time.Millisecond}
}

func TestSmallClusterBasics(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cfg := testConfig(2, 2)
		var rolesMu sync.Mutex
		roles := map[Role]int{}
		cfg.OnRoleChange = func(c Coord, r Role) {
			if c == (Coord{1, 1}) {
				rolesMu.Lock()
				roles[r]++
				rolesMu.Unlock()
			}
		}
		cl := newCluster(t, 6, time.Millisecond, cfg)
		d := cl.settle(t, 30*time.Second)
		t.Logf("placement settled in %s", d)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c := Coord{1, 1}
		a, b := cl.members[0], cl.members[3]
		o, err := a.cl.Initialize(ctx, c, "apple", []byte("5"))
		if err != nil {
			t.Fatal(err)
		}
		if o.Version != 1 {
			t.Fatalf("version %d after initialize", o.Version)
		}
		o, err = b.cl.ReadWrite(ctx, c, "apple", 1, []byte("4"))
		if err != nil || o.Version != 2 {
			t.Fatalf("read-write: %v %+v", err, o)
		}
		_, err = a.cl.ReadWrite(ctx, c, "apple", 1, []byte("3"))
		var ce *ConflictError
		if !asConflict(err, &ce) || ce.Current.Version != 2 || string(ce.Current.Value) != "4" {
			t.Fatalf("stale read-write: %v", err)
		}
		st, err := b.cl.Get(ctx, c)
		if err != nil || len(st.Objects) != 1 || string(st.Objects[0].Value) != "4" {
			t.Fatalf("get: %v %+v", err, st)
		}
		// The coordinator counted what it answered, conflicts apart.
		coord, _ := cl.truth(c)
		reg := cl.byID(coord).reg
		for _, want := range []struct {
			op, status string
			min        float64
		}{{"initialize", "ok", 1}, {"read_write", "ok", 1}, {"read_write", "conflict", 1}} {
			if got := metricValue(t, reg, "overworld_region_requests_total", map[string]string{"op": want.op, "status": want.status}); got < want.min {
				t.Errorf("coordinator counted %v %s requests answered %s, want >= %v", got, want.op, want.status, want.min)
			}
		}
		if got := metricValue(t, reg, "overworld_regions_held", map[string]string{"role": "coordinator"}); got < 1 {
			t.Errorf("coordinator reports %v regions held as coordinator", got)
		}
		// Kill the coordinator: the replica takes over with the object.
		cl.byID(coord).stop()
		var user *member
		for _, m := range cl.live() {
			user = m
		}
		start := time.Now()
		st, err = user.cl.Get(ctx, c)
		if err != nil || len(st.Objects) != 1 || string(st.Objects[0].Value) != "4" || st.Objects[0].Version != 2 {
			t.Fatalf("get after fail-over: %v %+v", err, st)
		}
		t.Logf("fail-over took %s", time.Since(start))
		// The replica that took over and its new replica say so through
		// OnRoleChange.
		waitUntil(t, 10*time.Second, "role changes reported", func() bool {
			rolesMu.Lock()
			defer rolesMu.Unlock()
			return roles[RoleCoordinator] >= 1 && roles[RoleReplica] >= 1
		})
		var takeovers float64
		for _, m := range cl.live() {
			takeovers += metricValue(t, m.reg, "overworld_region_takeovers_total", map[string]string{"how": "own_copy"})
		}
		if takeovers < 1 {
			t.Errorf("no live peer counted taking region %s over with its own copy", c)
		}
	})
}

// metricValue sums the samples of the named counter or gauge in reg whose
// labels include want.
func metricValue(t testing.TB, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if labels[k] != v {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

func TestSortByDistanceMatchesTheDHT(t *testing.T) {
	var h hashCache
	var ids []peer.ID
	for i := 0; i < 50; i++ {
		k, _, _ := crypto.GenerateEd25519Key(nil)
		id, _ := peer.IDFromPrivateKey(k)
		ids = append(ids, id)
	}
	for i := 0; i < 20; i++ {
		key := Key("w", Coord{i, i * 3})
		want := node.SortByDistance(key, append([]peer.ID(nil), ids...))
		got := h.sortByDistance(key, append([]peer.ID(nil), ids...))
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("key %s: order differs from the DHT's", key)
		}
		if !h.closer(key, want[0], want[1]) || h.closer(key, want[1], want[0]) {
			t.Fatalf("closer disagrees with the order")
		}
	}
}

func asConflict(err error, target **ConflictError) bool { return errors.As(err, target) }
