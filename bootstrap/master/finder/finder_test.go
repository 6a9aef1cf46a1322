package finder

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/master"
	"github.com/overworld-p2p/overworld/bootstrap/master/probe"
	"github.com/overworld-p2p/overworld/bootstrap/master/probe/probetest"
	"github.com/overworld-p2p/overworld/bootstrap/master/ratelimit"
)

const token = "operator-token-for-finder-tests"

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startMaster serves a master on 127.0.0.1 whose games stay listed for
// the test (an hour-long keep-alive interval).
func startMaster(t *testing.T) *master.Client {
	t.Helper()
	store, err := master.OpenStore(context.Background(), "sqlite:"+t.TempDir()+"/m.db", "")
	if err != nil {
		t.Fatal(err)
	}
	m, err := master.New(master.Config{OperatorTokens: []string{token}, Interval: time.Hour, Logger: quiet()}, store)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		<-done
		store.Close()
	})
	c, err := master.NewClient("http://"+ln.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// mirror is a probe responder on 127.0.0.1, behind a relay that adds
// delay (none if delay is 0).
func startMirror(t *testing.T, game string, id uint32, delay time.Duration, load uint32) string {
	t.Helper()
	// Limits out of the way: a hundred finds in a row come from one address.
	r, err := probe.NewResponder(probe.ResponderConfig{GameID: game, MirrorID: id, Load: func() uint32 { return load }, Logger: quiet(),
		PerSource: ratelimit.Rate{Every: time.Millisecond, Burst: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Serve(ctx, conn)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		conn.Close()
	})
	addr := conn.LocalAddr().String()
	if delay == 0 {
		return addr
	}
	relay, err := probetest.NewRelay(addr, delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	return relay.Addr()
}

func register(t *testing.T, c *master.Client, g master.GameInfo) {
	t.Helper()
	if _, err := c.Register(context.Background(), token, master.Registration{Game: g, Version: 1, Instance: "test"}); err != nil {
		t.Fatal(err)
	}
}

func game(id string, mirrors ...master.Mirror) master.GameInfo {
	return master.GameInfo{ID: id, World: "meadow", Mode: "ffa", Players: 1, Capacity: 8, Mirrors: mirrors}
}

func mirror(id uint32, probeAddr string) master.Mirror {
	return master.Mirror{ID: id, ProbeAddr: probeAddr, ClientAddr: fmt.Sprintf("127.0.0.1:%d", 7000+id)}
}

// TestFindPicksTheNearestMirror: mirrors at 10, 40 and 80 ms; the finder
// must pick the 10 ms one in at least 99 runs of 100.
func TestFindPicksTheNearestMirror(t *testing.T) {
	c := startMaster(t)
	delays := map[uint32]time.Duration{1: 80 * time.Millisecond, 2: 10 * time.Millisecond, 3: 40 * time.Millisecond}
	// Listed in an order that is neither by ID nor by delay.
	register(t, c, game("race", mirror(3, startMirror(t, "race", 3, delays[3], 0)),
		mirror(1, startMirror(t, "race", 1, delays[1], 0)), mirror(2, startMirror(t, "race", 2, delays[2], 0))))

	const runs = 100
	picked := map[uint32]int{} // 0: no mirror answered in time
	var worst time.Duration
	for range runs {
		res, err := Find(context.Background(), c, Query{World: "meadow"}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		worst = max(worst, res.Took)
		best, ok := res.Best()
		if !ok {
			// A machine too busy to run the relays' timers within the
			// silence: a run that picks nothing, which the bound allows
			// once.
			t.Logf("a run where no mirror answered within %v", res.Took)
		}
		picked[best.MirrorID]++
		if ok && len(res.Ranked)+len(res.Silent) != 3 {
			t.Fatalf("listed %d mirrors of 3: %+v", len(res.Ranked)+len(res.Silent), res)
		}
	}
	if picked[2] < 99 {
		t.Fatalf("picked the 10 ms mirror in %d runs of %d (picks by mirror, 0 none: %v)", picked[2], runs, picked)
	}
	t.Logf("picks by mirror (2 is 10 ms, 0 none): %v; slowest run %v", picked, worst)
}

func TestDeadMirrorCostsAtMostOneSilence(t *testing.T) {
	c := startMaster(t)
	sink, err := probetest.NewSink()
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	register(t, c, game("with-a-dead-one", mirror(1, sink.Addr()), mirror(2, startMirror(t, "with-a-dead-one", 2, 10*time.Millisecond, 0))))
	// The live mirror must answer within the silence: 3 s rides out a
	// machine stalled for a second or two (1 s left no room for that).
	const silence = 3 * time.Second
	start := time.Now()
	res, err := Find(context.Background(), c, Query{GameID: "with-a-dead-one"}, Options{Probe: probe.Options{Silence: silence}})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if best, ok := res.Best(); !ok || best.MirrorID != 2 || len(res.Ranked) != 1 {
		t.Fatalf("ranked %+v", res.Ranked)
	}
	if len(res.Silent) != 1 || res.Silent[0].MirrorID != 1 || res.Silent[0].Pongs != 0 {
		t.Fatalf("silent %+v", res.Silent)
	}
	// One silence for the whole search, not one per ping (5) or mirror.
	if took >= 2*silence {
		t.Fatalf("a dead mirror cost %v with a silence of %v", took, silence)
	}
	t.Logf("find with a dead mirror took %v (probing %v; silence %v)", took, res.Took, silence)
}

func TestFindAcrossGamesAndFilters(t *testing.T) {
	c := startMaster(t)
	register(t, c, game("near", mirror(1, startMirror(t, "near", 1, 0, 0))))
	g := game("full", mirror(1, startMirror(t, "full", 1, 0, 0)))
	g.Players = g.Capacity
	register(t, c, g)
	cave := game("far", mirror(5, startMirror(t, "far", 5, 20*time.Millisecond, 0)))
	cave.World = "cave"
	register(t, c, cave)

	// Every mirror is alive: a long silence costs nothing and rides out
	// a stalled machine.
	alive := Options{Probe: probe.Options{Silence: 20 * time.Second}}
	res, err := Find(context.Background(), c, Query{}, alive)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Ranked) != 3 || res.Ranked[2].GameID != "far" {
		t.Fatalf("all games: %+v", res.Ranked)
	}
	res, err = Find(context.Background(), c, Query{World: "meadow", MinFree: 1}, alive)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Ranked) != 1 || res.Ranked[0].GameID != "near" {
		t.Fatalf("meadow with space: %+v", res.Ranked)
	}
	if _, err := Find(context.Background(), c, Query{World: "nowhere"}, Options{}); !errors.Is(err, ErrNoGames) {
		t.Fatalf("no match: %v", err)
	}
	if _, err := Find(context.Background(), c, Query{GameID: "missing"}, Options{}); !errors.Is(err, ErrNoGames) {
		t.Fatalf("unknown game: %v", err)
	}

	var table, js bytes.Buffer
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "RANK") || !strings.Contains(table.String(), "best: game near mirror 1") {
		t.Fatalf("table:\n%s", table.String())
	}
	if err := res.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(js.Bytes(), &rep); err != nil || rep.Best == nil || rep.Best.GameID != "near" || rep.Best.Pongs != 5 || len(rep.Best.RTTsMS) != 5 {
		t.Fatalf("json %s: %+v %v", js.String(), rep, err)
	}
}

func TestRankIsDeterministic(t *testing.T) {
	ms := time.Millisecond
	cands := []Candidate{
		{GameID: "a", MirrorID: 4, Median: 10*ms + 900*time.Microsecond, Load: 500}, // ties with the 10.2 ms ones
		{GameID: "a", MirrorID: 3, Median: 10*ms + 200*time.Microsecond, Load: 100},
		{GameID: "b", MirrorID: 3, Median: 10*ms + 100*time.Microsecond, Load: 100}, // same step, load and mirror ID: game ID decides
		{GameID: "a", MirrorID: 2, Median: 12 * ms, Load: 0},
		{GameID: "a", MirrorID: 1, Median: 9 * ms, Load: 900},
	}
	want := []string{"a/1", "a/3", "b/3", "a/4", "a/2"}
	key := func(cs []Candidate) []string {
		var out []string
		for _, c := range cs {
			out = append(out, fmt.Sprintf("%s/%d", c.GameID, c.MirrorID))
		}
		return out
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		shuffled := append([]Candidate(nil), cands...)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if got := key(Rank(shuffled, ms)); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("rank of %v: %v, want %v", key(shuffled), got, want)
		}
	}
	// With exact RTTs (no steps) the fastest wins whatever the load.
	if got := key(Rank(cands, 0)); got[0] != "a/1" || got[1] != "b/3" {
		t.Fatalf("exact ranking %v", got)
	}
}

// Two mirrors behind equal delays, one loaded: the load breaks the tie
// when their medians fall in the same step; with a step wider than the
// jitter they always do.
func TestLoadBreaksTiesOverUDP(t *testing.T) {
	c := startMaster(t)
	register(t, c, game("twins", mirror(1, startMirror(t, "twins", 1, 15*time.Millisecond, 800)),
		mirror(2, startMirror(t, "twins", 2, 15*time.Millisecond, 100))))
	for range 5 {
		res, err := Find(context.Background(), c, Query{GameID: "twins"}, Options{TieWithin: time.Second, Probe: probe.Options{Silence: 20 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		if best, _ := res.Best(); best.MirrorID != 2 || best.Load != 100 {
			t.Fatalf("tie went to %+v, want the less loaded mirror 2", best)
		}
	}
}
