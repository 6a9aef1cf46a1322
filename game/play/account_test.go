package play

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
)

// startAccounts runs an account server with a light password hash and
// returns its URL, served in memory through accountsHTTP: a server on a
// socket would keep a synctest bubble's clock from ever moving (a
// goroutine waiting on the network is not durably blocked).
func startAccounts(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	key, err := accounts.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	store, err := accounts.OpenStore(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	srv, err := accounts.New(accounts.Config{
		Key: key, Registry: prometheus.NewRegistry(), Logger: testLogger(),
		Hash: accounts.HashParams{Memory: 8 * 1024, Time: 1, Threads: 1},
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("accounts-%d.test", accountServers.Add(1))
	accountHandlers.Store(host, srv.Handler())
	t.Cleanup(func() { accountHandlers.Delete(host) })
	return "http://" + host
}

var (
	accountServers  atomic.Uint64
	accountHandlers sync.Map // host name -> http.Handler
	// accountsHTTP reaches the account servers of startAccounts.
	accountsHTTP = &http.Client{Timeout: 10 * time.Second, Transport: inMemoryAccounts{}}
)

// inMemoryAccounts serves a request by calling the handler of the account
// server its URL names, in the caller's goroutine, as from 127.0.0.1.
type inMemoryAccounts struct{}

func (inMemoryAccounts) RoundTrip(req *http.Request) (*http.Response, error) {
	h, ok := accountHandlers.Load(req.URL.Host)
	if !ok {
		return nil, fmt.Errorf("no account server at %s", req.URL.Host)
	}
	return vnettest.HandlerTransport{Handler: h.(http.Handler)}.RoundTrip(req)
}

// TestAccountLoginSaveRestore logs two players in, lets them use the
// region store with their tokens (each coordinator demands one), saves on
// exit and restores the character in a second session.
func TestAccountLoginSaveRestore(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		url := startAccounts(t)
		rc := game.RegionCoord{X: 0, Y: 1}
		password := []string{"first-password", "second-password"}
		account := func(i int, c *Config) {
			c.Name = ""
			c.Account = &Account{URL: url, User: []string{"alice", "bob"}[i], Password: password[i], Register: true}
		}
		var saved game.Player
		func() {
			tn := newTestNetWith(t, 2, rc, nil, account)
			a, b := tn.peers[0], tn.peers[1]
			if a.Name() != "alice" {
				t.Fatalf("name %q, want the account's", a.Name())
			}
			for _, p := range tn.peers {
				waitFor(t, 30*time.Second, p.Name()+" loading its region through token-checked requests", func() bool { return p.Loaded(rc) })
			}
			waitFor(t, 20*time.Second, "alice to see bob", func() bool { _, ok := sees(a, b.ID()); return ok })
			a.With(func(av *Avatar) {
				av.Feed(3)
				av.Damage(25, "")
				// Hungry enough not to heal, far from starving.
				av.p.Hunger = game.MaxHunger * 3 / 5
			})
			tn.stop() // Run saves the characters on the way out
			saved = a.Player()
		}()
		if saved.Score != 3 || saved.Health != game.MaxHealth-25 || saved.Hunger < game.MaxHunger*3/5 {
			t.Fatalf("set-up state %+v", saved)
		}

		tn := newTestNetWith(t, 1, game.RegionCoord{X: 1, Y: 1}, nil, account)
		got := tn.peers[0].Player()
		if got.Pos != saved.Pos || got.Score != saved.Score || got.Health != saved.Health || got.Hunger != saved.Hunger || got.Skill != saved.Skill {
			t.Fatalf("restored %+v, saved %+v", got, saved)
		}

		// A wrong password is refused, not papered over by registering.
		cfg := Config{Account: &Account{URL: url, User: "alice", Password: "not-the-password", Register: true, HTTPClient: accountsHTTP}}
		if err := cfg.fill(tn.nodes[0]); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := login(context.Background(), *cfg.Account, tn.nodes[0].Host().ID(), tn.peers[0].loop.av, testLogger()); !errors.Is(err, accounts.ErrUnauthorized) {
			t.Fatalf("login with a wrong password: %v", err)
		}
	})
}
