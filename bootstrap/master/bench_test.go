package master

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/master/ratelimit"
)

// benchMaster is a master on SQLite with limits out of the way and no
// rounds of its own (the benchmarks run them).
func benchMaster(b *testing.B) (*Master, *Client) {
	b.Helper()
	store, err := OpenStore(context.Background(), "sqlite:"+b.TempDir()+"/m.db", "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { store.Close() })
	cfg := Config{OperatorTokens: []string{testToken}, Interval: time.Hour, Logger: quiet(), MaxGames: 100_000,
		ReadsPerSource: ratelimit.Rate{Every: time.Nanosecond, Burst: 1 << 30}, WritesPerSource: ratelimit.Rate{Every: time.Nanosecond, Burst: 1 << 30}}
	m, err := New(cfg, store)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler())
	b.Cleanup(srv.Close)
	c, err := NewClient(srv.URL, nil)
	if err != nil {
		b.Fatal(err)
	}
	return m, c
}

// BenchmarkRegisterRefresh is one push keep-alive: a known game
// registering again over HTTP, unchanged.
func BenchmarkRegisterRefresh(b *testing.B) {
	_, c := benchMaster(b)
	reg := pushRegistration(testGame("bench", 8))
	ctx := context.Background()
	if _, err := c.Register(ctx, testToken, reg); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := c.Register(ctx, testToken, reg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkKeepAliveRound polls 100 games over HTTP on 127.0.0.1 (every
// answer "unchanged") and settles the interval.
func BenchmarkKeepAliveRound(b *testing.B) {
	m, c := benchMaster(b)
	status := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := strings.TrimPrefix(r.URL.Path, "/")
		writeJSON(w, 200, StatusAnswer{GameID: id, Version: 1})
	}))
	b.Cleanup(status.Close)
	ctx := context.Background()
	const games = 100
	for i := range games {
		id := fmt.Sprintf("g%03d", i)
		reg := pushRegistration(testGame(id, 4))
		reg.StatusURL = status.URL + "/" + id
		if _, err := c.Register(ctx, testToken, reg); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		rep, err := m.round(ctx)
		if err != nil || rep.Answers != games {
			b.Fatalf("round: %+v %v", rep, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/games, "µs/game")
}

// BenchmarkListGames is one player's query: a page of 50 games of one
// world with space, out of 1,000, with their mirrors.
func BenchmarkListGames(b *testing.B) {
	m, c := benchMaster(b)
	ctx := context.Background()
	for i := range 1000 {
		g := testGame(fmt.Sprintf("g%04d", i), 4)
		g.World = []string{"meadow", "cave"}[i%2]
		g.Players = i % 17
		if _, err := m.store.Register(ctx, "bench", pushRegistration(g), time.Now(), 100_000); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		page, err := c.Games(ctx, Filter{World: "meadow", MinFree: 1, Limit: 50})
		if err != nil || len(page.Games) != 50 {
			b.Fatalf("page: %d games, %v", len(page.Games), err)
		}
	}
}
