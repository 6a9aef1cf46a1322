package accounts

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// postgresEnv names the DSN of a PostgreSQL database the tests may use
// (.ci/postgres.sh starts one and sets it).
const postgresEnv = "OVERWORLD_TEST_POSTGRES"

// forEachStore runs f against a fresh SQLite store and, if postgresEnv is
// set, a fresh PostgreSQL schema.
func forEachStore(t *testing.T, f func(t *testing.T, open func() *Store)) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		f(t, func() *Store {
			s, err := OpenStore(context.Background(), "sqlite:"+dir+"/accounts.db", "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := postgresDSN(t)
		f(t, func() *Store {
			s, err := OpenStore(context.Background(), dsn, "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

// postgresDSN creates a schema of its own for the test and returns a DSN
// whose search_path points there; the schema is dropped afterwards.
func postgresDSN(t testing.TB) string {
	t.Helper()
	base := os.Getenv(postgresEnv)
	if base == "" {
		t.Skipf("PostgreSQL store not tested: set %s to a postgres:// DSN (.ci/postgres.sh starts a local server and sets it)", postgresEnv)
	}
	b := make([]byte, 6)
	rand.Read(b)
	schema := "t_" + hex.EncodeToString(b)
	admin, err := sql.Open("pgx", base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		admin.Close()
		t.Fatalf("create schema on %s: %v", redactDSN(base), err)
	}
	t.Cleanup(func() {
		admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		admin.Close()
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

// fakeClock is the server's clock in tests that need to move time.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const testAdminToken = "admin-token-for-tests-0123456789"

// testHash is cheap so that tests stay fast; production uses
// DefaultHashParams.
var testHash = HashParams{Memory: 256, Time: 1, Threads: 1}

type testEnv struct {
	srv    *Server
	http   *httptest.Server
	store  *Store
	clock  *fakeClock
	client *Client
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// newTestServer builds a Server on store with test settings and no
// listener.
func newTestServer(t testing.TB, store *Store) *Server {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := New(Config{Key: key, AdminToken: testAdminToken, Hash: testHash, Logger: quietLogger(),
		LoginPerSource: RateLimit{Every: time.Millisecond, Burst: 10000}}, store)
	if err != nil {
		t.Fatal(err)
	}
	return srv
}

// newTestEnv serves a Server on store over loopback HTTP.
func newTestEnv(t testing.TB, store *Store, adjust func(*Config)) *testEnv {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock()
	cfg := Config{
		Key:        key,
		AdminToken: testAdminToken,
		Hash:       testHash,
		Now:        clock.Now,
		Logger:     quietLogger(),
		// Generous limits: tests of the limits set their own.
		LoginPerSource: RateLimit{Every: time.Millisecond, Burst: 10000},
	}
	if adjust != nil {
		adjust(&cfg)
	}
	srv, err := New(cfg, store)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &testEnv{srv: srv, http: hs, store: store, clock: clock, client: newClient(t, hs.URL)}
}

func newClient(t testing.TB, url string) *Client {
	t.Helper()
	c, err := NewClient(url)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newPeerID(t testing.TB) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// registerAndLogin makes an account and a logged-in client for it.
func (e *testEnv) registerAndLogin(t testing.TB, name string) (*Client, peer.ID) {
	t.Helper()
	ctx := context.Background()
	c := newClient(t, e.http.URL)
	if _, err := c.Register(ctx, name, "password-"+name); err != nil {
		t.Fatal(err)
	}
	id := newPeerID(t)
	if _, err := c.Login(ctx, name, "password-"+name, id); err != nil {
		t.Fatal(err)
	}
	return c, id
}

// counts returns the number of rows in each table, to show that refused
// requests changed nothing.
func (s *Store) counts(t *testing.T) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, table := range []string{"accounts", "sessions", "characters", "inventory", "leases"} {
		var n int
		if err := s.db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[table] = n
	}
	return out
}
