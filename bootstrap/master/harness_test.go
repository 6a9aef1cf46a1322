package master

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/overworld-p2p/overworld/node/await"
)

const (
	testToken  = "operator-one-token-0123456789"
	otherToken = "operator-two-token-0123456789"
)

// testPostgres names the PostgreSQL DSN the store tests use when set
// (.ci/postgres.sh starts a server and sets it).
const testPostgres = "OVERWORLD_TEST_POSTGRES"

// eachStore runs f once on SQLite and, if testPostgres is set, once on a
// private PostgreSQL schema. open returns the same database every call
// (a restarted master opens it again).
func eachStore(t *testing.T, f func(t *testing.T, open func() *Store)) {
	t.Run("sqlite", func(t *testing.T) {
		file := t.TempDir() + "/master.db"
		f(t, func() *Store { return mustOpen(t, "sqlite:"+file) })
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := privateSchema(t)
		f(t, func() *Store { return mustOpen(t, dsn) })
	})
}

func mustOpen(t testing.TB, db string) *Store {
	t.Helper()
	s, err := OpenStore(context.Background(), db, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// privateSchema makes a schema for this test alone in the test database
// and returns a DSN that works in it; the schema goes when the test ends.
func privateSchema(t testing.TB) string {
	t.Helper()
	base := os.Getenv(testPostgres)
	if base == "" {
		t.Skipf("%s not set: PostgreSQL store not tested (source .ci/postgres.sh to start one)", testPostgres)
	}
	suffix := make([]byte, 5)
	rand.Read(suffix)
	schema := "master_" + hex.EncodeToString(suffix)
	db, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE SCHEMA ` + schema); err != nil {
		db.Close()
		t.Fatalf("create schema %s: %v", schema, err)
	}
	t.Cleanup(func() {
		db.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
		db.Close()
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// roundLog records every keep-alive round of a master with the registry
// as it stood when the round ended (read inside the round hook, before
// the next round can start).
type roundLog struct {
	mu     sync.Mutex
	rounds []observedRound
	cond   *sync.Cond
}

type observedRound struct {
	RoundReport
	games map[string]Game
	err   error // reading the registry failed: games is unknown
}

func newRoundLog() *roundLog {
	l := &roundLog{}
	l.cond = sync.NewCond(&l.mu)
	return l
}

func (l *roundLog) hook(store *Store) func(RoundReport) {
	return func(rep RoundReport) {
		games, _, err := store.List(context.Background(), Filter{Limit: maxPageLimit})
		snap := map[string]Game{}
		for _, g := range games {
			snap[g.ID] = g
		}
		l.mu.Lock()
		l.rounds = append(l.rounds, observedRound{rep, snap, err})
		l.cond.Broadcast()
		l.mu.Unlock()
	}
}

// all returns the rounds seen so far.
func (l *roundLog) all() []observedRound {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.rounds)
}

// waitFor returns the first round at or after round from that satisfies
// ok, failing the test if none does within the deadline.
func (l *roundLog) waitFor(t *testing.T, from uint64, what string, ok func(observedRound) bool) observedRound {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	stop := time.AfterFunc(time.Until(deadline), func() {
		l.mu.Lock()
		l.cond.Broadcast()
		l.mu.Unlock()
	})
	defer stop.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; ; {
		for ; i < len(l.rounds); i++ {
			r := l.rounds[i]
			if r.err != nil {
				t.Fatalf("reading the registry after round %d: %v", r.Round, r.err)
			}
			if r.Round >= from && ok(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no keep-alive round from %d on where %s (%d rounds seen)", from, what, len(l.rounds))
		}
		l.cond.Wait()
	}
}

// testMaster is a master serving on 127.0.0.1.
type testMaster struct {
	*Master
	url    string
	addr   string
	rounds *roundLog
	stop   func() error
}

func testConfig() Config {
	return Config{
		OperatorTokens: []string{testToken, otherToken},
		Interval:       200 * time.Millisecond,
		Logger:         quiet(),
	}
}

// startMaster serves a master on store at addr ("" for a free port).
func startMaster(t *testing.T, store *Store, cfg Config, addr string) *testMaster {
	t.Helper()
	rounds := newRoundLog()
	cfg.OnRound = rounds.hook(store)
	m, err := New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	ln := listenRetry(t, addr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Serve(ctx, ln) }()
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			stopErr = <-done
		})
		return stopErr
	}
	t.Cleanup(func() { stop() })
	return &testMaster{Master: m, url: "http://" + ln.Addr().String(), addr: ln.Addr().String(), rounds: rounds, stop: stop}
}

// listenRetry listens on addr; a restarted master takes its old port
// again, which the kernel may hold a moment longer (and says nothing when
// it lets go, so the test tries again).
func listenRetry(t *testing.T, addr string) net.Listener {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var ln net.Listener
	var last error
	if err := await.UntilErr(10*time.Second, "listening on "+addr, func() bool {
		ln, last = net.Listen("tcp", addr)
		return last == nil
	}); err != nil {
		t.Fatalf("%v: %v", err, last)
	}
	return ln
}

// cuttable is an HTTP transport the test can cut, as if the host lost
// the network.
type cuttable struct {
	cut  atomic.Bool
	base http.RoundTripper
}

var errCut = errors.New("network cut by the test")

func (c *cuttable) RoundTrip(r *http.Request) (*http.Response, error) {
	if c.cut.Load() {
		return nil, errCut
	}
	return c.base.RoundTrip(r)
}

// testGame is a valid game with n mirrors on made-up addresses.
func testGame(id string, n int) GameInfo {
	g := GameInfo{ID: id, Name: "Game " + id, World: "meadow", Mode: "ffa", Players: 2, Capacity: 16}
	for i := 1; i <= n; i++ {
		g.Mirrors = append(g.Mirrors, Mirror{ID: uint32(i), ProbeAddr: fmt.Sprintf("127.0.0.1:%d", 40000+i), ClientAddr: fmt.Sprintf("127.0.0.1:%d", 41000+i)})
	}
	return g
}

// testRegistrar is a registrar running against a test master.
type testRegistrar struct {
	*Registrar
	net    *cuttable
	cancel context.CancelFunc
	done   chan struct{}
	// sends records every registration attempt, in order.
	mu    sync.Mutex
	sends []sendRecord
	sent  *sync.Cond
}

type sendRecord struct {
	version uint64
	err     error
}

// startRegistrar runs a registrar for game against masterURL; poll selects
// a status endpoint on 127.0.0.1, otherwise the game pushes.
func startRegistrar(t *testing.T, masterURL string, game GameInfo, poll bool) *testRegistrar {
	t.Helper()
	tn := &cuttable{base: &http.Transport{}}
	cfg := RegistrarConfig{Master: masterURL, Token: testToken, Game: game, Logger: quiet(),
		HTTPClient: &http.Client{Transport: tn, Timeout: 5 * time.Second}}
	if poll {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		cfg.StatusListener = ln
		cfg.StatusURL = "http://" + ln.Addr().String() + "/v1/status"
	}
	r, err := NewRegistrar(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tr := &testRegistrar{Registrar: r, net: tn, done: make(chan struct{})}
	tr.sent = sync.NewCond(&tr.mu)
	r.afterSend = func(v uint64, err error) {
		tr.mu.Lock()
		tr.sends = append(tr.sends, sendRecord{v, err})
		tr.sent.Broadcast()
		tr.mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr.cancel = cancel
	go func() {
		defer close(tr.done)
		r.Run(ctx)
	}()
	t.Cleanup(tr.kill)
	return tr
}

// kill stops the registrar as a crash would: the network goes first, so
// its deregistration never reaches the master.
func (tr *testRegistrar) kill() {
	tr.net.cut.Store(true)
	tr.cancel()
	<-tr.done
}

// waitSend waits for the first registration attempt after the first n
// that satisfies ok, and returns its index.
func (tr *testRegistrar) waitSend(t *testing.T, n int, ok func(sendRecord) bool) int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	stop := time.AfterFunc(time.Until(deadline), func() {
		tr.mu.Lock()
		tr.sent.Broadcast()
		tr.mu.Unlock()
	})
	defer stop.Stop()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for i := n; ; {
		for ; i < len(tr.sends); i++ {
			if ok(tr.sends[i]) {
				return i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no matching registration among %d attempts", len(tr.sends))
		}
		tr.sent.Wait()
	}
}

func (tr *testRegistrar) sendCount() int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return len(tr.sends)
}

func accepted(s sendRecord) bool { return s.err == nil }

// counterValue reads a counter or gauge.
func counterValue(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}
