package accounts

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/bootstrap/leases"
)

func TestRegisterLogin(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), nil)
		ctx := context.Background()
		c := e.client
		reg, err := c.Register(ctx, "Alice", "correct horse")
		if err != nil {
			t.Fatal(err)
		}
		if reg.Name != "Alice" || reg.AccountID == "" {
			t.Fatalf("register answer %+v", reg)
		}
		// Names are unique regardless of case.
		for _, name := range []string{"Alice", "alice", "ALICE"} {
			if _, err := c.Register(ctx, name, "another password"); !errors.Is(err, ErrNameTaken) {
				t.Errorf("duplicate %q: got %v, want ErrNameTaken", name, err)
			}
		}
		if _, err := c.Login(ctx, "alice", "wrong password", newPeerID(t)); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("wrong password: got %v", err)
		}
		if _, err := c.Login(ctx, "bob-nobody", "correct horse", newPeerID(t)); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("unknown name: got %v", err)
		}
		if _, err := c.Login(ctx, "alice", "correct horse", ""); !errors.Is(err, ErrBadRequest) {
			t.Errorf("no peer ID: got %v", err)
		}
		id := newPeerID(t)
		toks, err := c.Login(ctx, "alice", "correct horse", id)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := c.PublicKey(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !pub.Equal(e.srv.PublicKey()) {
			t.Fatal("published key differs from the server's")
		}
		claims, err := token.Verify(pub, toks.AccessToken, id, e.clock.Now())
		if err != nil {
			t.Fatalf("token does not verify offline: %v", err)
		}
		if claims.Account != reg.AccountID || claims.Player != "Alice" || claims.Peer != id {
			t.Fatalf("claims %+v", claims)
		}
		if got := claims.Expiry.Sub(claims.IssuedAt); got != 15*time.Minute {
			t.Fatalf("token lifetime %v, want the default 15m", got)
		}
	})
}

func TestTokenExpiryAndRefresh(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), func(c *Config) { c.TokenTTL = time.Minute })
		ctx := context.Background()
		c, id := e.registerAndLogin(t, "carol")
		old := c.Tokens()
		if _, err := c.LoadCharacter(ctx); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Minute + time.Second)
		// The expired token is refused by the server and offline.
		if err := c.do(ctx, http.MethodGet, "/v1/character", old.AccessToken, nil, nil); !errors.Is(err, ErrUnauthorized) || !strings.Contains(err.Error(), "expired") {
			t.Fatalf("expired token: got %v", err)
		}
		if _, err := token.Verify(e.srv.PublicKey(), old.AccessToken, id, e.clock.Now()); !errors.Is(err, token.ErrExpired) {
			t.Fatalf("offline check of expired token: %v", err)
		}
		fresh, err := c.Refresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fresh.RefreshToken == old.RefreshToken || fresh.AccessToken == old.AccessToken {
			t.Fatal("refresh returned the old tokens")
		}
		if _, err := token.Verify(e.srv.PublicKey(), fresh.AccessToken, id, e.clock.Now()); err != nil {
			t.Fatalf("refreshed token: %v", err)
		}
		// A refresh token works once; a second use means it was copied and
		// ends the session: the tokens the first use brought die too.
		if err := c.do(ctx, http.MethodPost, "/v1/refresh", "", RefreshRequest{RefreshToken: old.RefreshToken}, nil); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("reused refresh token: got %v", err)
		}
		if err := c.do(ctx, http.MethodGet, "/v1/character", fresh.AccessToken, nil, nil); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("token of a session ended by reuse: got %v", err)
		}
		// Logout ends the session: its tokens stop working on the server.
		if fresh, err = c.Login(ctx, "carol", "password-carol", id); err != nil {
			t.Fatal(err)
		}
		if err := c.Logout(ctx); err != nil {
			t.Fatal(err)
		}
		if err := c.do(ctx, http.MethodGet, "/v1/character", fresh.AccessToken, nil, nil); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("token after logout: got %v", err)
		}
		if err := c.do(ctx, http.MethodPost, "/v1/refresh", "", RefreshRequest{RefreshToken: fresh.RefreshToken}, nil); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("refresh after logout: got %v", err)
		}
	})
}

func TestTokenOfAnotherPeer(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), nil)
		ctx := context.Background()
		c, id := e.registerAndLogin(t, "dave")
		tok := c.Tokens().AccessToken
		thief := newPeerID(t)
		if _, err := token.Verify(e.srv.PublicKey(), tok, thief, e.clock.Now()); !errors.Is(err, token.ErrWrongPeer) {
			t.Fatalf("offline: token accepted for another peer: %v", err)
		}
		if _, err := c.VerifyOnline(ctx, tok, thief); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("online: token accepted for another peer: %v", err)
		}
		got, err := c.VerifyOnline(ctx, tok, id)
		if err != nil || got.PeerID != id.String() || got.Name != "dave" {
			t.Fatalf("online verify for the right peer: %+v %v", got, err)
		}
	})
}

func TestDisabledAccount(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), nil)
		ctx := context.Background()
		c, id := e.registerAndLogin(t, "erin")
		admin := e.client
		if _, err := admin.SetAccountDisabled(ctx, "not-the-admin-token", "erin", true); !errors.Is(err, ErrForbidden) {
			t.Fatalf("disable without admin credential: %v", err)
		}
		sessions, err := admin.ListSessions(ctx, testAdminToken, "erin")
		if err != nil || len(sessions) != 1 || sessions[0].PeerID != id.String() {
			t.Fatalf("sessions of erin: %+v %v", sessions, err)
		}
		info, err := admin.SetAccountDisabled(ctx, testAdminToken, "erin", true)
		if err != nil || !info.Disabled {
			t.Fatalf("disable: %+v %v", info, err)
		}
		if _, err := c.LoadCharacter(ctx); !errors.Is(err, ErrDisabled) {
			t.Fatalf("token of disabled account: %v", err)
		}
		if _, err := c.Refresh(ctx); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("refresh of disabled account's session: %v", err)
		}
		if _, err := c.Login(ctx, "erin", "password-erin", id); !errors.Is(err, ErrDisabled) {
			t.Fatalf("login to disabled account: %v", err)
		}
		if _, err := c.AcquireLease(ctx, "1,1"); err == nil {
			t.Fatal("disabled account got a lease")
		}
		if s, _ := admin.ListSessions(ctx, testAdminToken, "erin"); len(s) != 0 {
			t.Fatalf("disabled account still has sessions: %+v", s)
		}
		if _, err := admin.SetAccountDisabled(ctx, testAdminToken, "erin", false); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Login(ctx, "erin", "password-erin", id); err != nil {
			t.Fatalf("login after enabling: %v", err)
		}
		if _, err := admin.SetAccountDisabled(ctx, testAdminToken, "nobody-here", true); !errors.Is(err, ErrNotFound) {
			t.Fatalf("disable unknown account: %v", err)
		}
	})
}

// Many clients register one name at once: the database's unique index
// lets exactly one win.
func TestConcurrentRegistration(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), nil)
		const n = 12
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				name := []string{"frank", "Frank", "FRANK"}[i%3]
				_, errs[i] = newClient(t, e.http.URL).Register(context.Background(), name, fmt.Sprintf("password %d", i))
			})
		}
		wg.Wait()
		won := 0
		for i, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, ErrNameTaken):
				t.Errorf("registration %d: %v", i, err)
			}
		}
		if won != 1 {
			t.Fatalf("%d registrations of one name succeeded, want 1", won)
		}
		if got := e.store.counts(t)["accounts"]; got != 1 {
			t.Fatalf("%d accounts stored", got)
		}
	})
}

func TestCharacterRoundTrip(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), nil)
		ctx := context.Background()
		c, _ := e.registerAndLogin(t, "grace")
		fresh, err := c.LoadCharacter(ctx)
		if err != nil || fresh.Version != 0 {
			t.Fatalf("new account's character: %+v %v", fresh, err)
		}
		ch := Character{Region: "3,4", X: 12345, Y: 1 << 30, Health: 87, Hunger: 41, Score: 90, Experience: 15,
			Inventory: []Item{{"food.apple", 3}, {"health_pack", 1}}}
		v, err := c.SaveCharacter(ctx, ch)
		if err != nil || v != 1 {
			t.Fatalf("first save: %d %v", v, err)
		}
		// A later session on another peer restores it.
		c2 := newClient(t, e.http.URL)
		if _, err := c2.Login(ctx, "grace", "password-grace", newPeerID(t)); err != nil {
			t.Fatal(err)
		}
		got, err := c2.LoadCharacter(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := ch
		want.Version = 1
		got.SavedAt = time.Time{}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("restored %+v\nwant     %+v", got, want)
		}
		// Save on top of what was loaded: accepted.
		got.Score = 150
		got.Inventory = nil
		if v, err := c2.SaveCharacter(ctx, got); err != nil || v != 2 {
			t.Fatalf("save on loaded version: %d %v", v, err)
		}
		// The first session's copy is stale now: refused, nothing lost.
		ch.Version = 1
		if _, err := c.SaveCharacter(ctx, ch); !errors.Is(err, ErrConflict) {
			t.Fatalf("stale save: %v", err)
		}
		final, err := c.LoadCharacter(ctx)
		if err != nil || final.Score != 150 || len(final.Inventory) != 0 || final.Version != 2 {
			t.Fatalf("after stale save: %+v %v", final, err)
		}
		// Invalid characters are refused.
		bad := []Character{
			{Region: "x'; DROP TABLE characters;--"},
			{Health: -1},
			{Score: -1 << 63},
			{X: -5},
			{Inventory: []Item{{"b", 1}, {"a", 1}}},
			{Inventory: []Item{{"a", 0}}},
			{Inventory: []Item{{"A B", 1}}},
		}
		for _, b := range bad {
			if _, err := c2.SaveCharacter(ctx, b); !errors.Is(err, ErrBadRequest) {
				t.Errorf("invalid character %+v: %v", b, err)
			}
		}
	})
}

// A save that fails half-way (here: the database refuses an inventory row
// after the character row was already updated) leaves the previous
// character intact.
func TestSaveIsAtomic(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		s := open()
		ctx := context.Background()
		now := time.Now()
		if err := s.CreateAccount(ctx, Account{ID: "acc1", Name: "heidi", PasswordHash: "x", Created: now}); err != nil {
			t.Fatal(err)
		}
		before := Character{Region: "1,1", X: 5, Y: 6, Health: 100, Inventory: []Item{{"apple", 2}}}
		if _, err := s.SaveCharacter(ctx, "acc1", before, 0, now, nil); err != nil {
			t.Fatal(err)
		}
		broken := Character{Region: "9,9", X: 1, Health: 1, Inventory: []Item{{"apple", 5}, {"pear", 0}}}
		if _, err := s.SaveCharacter(ctx, "acc1", broken, 1, now, nil); err == nil {
			t.Fatal("save with a refused item succeeded")
		}
		got, err := s.LoadCharacter(ctx, "acc1")
		if err != nil {
			t.Fatal(err)
		}
		if got.Region != "1,1" || got.X != 5 || got.Version != 1 || !reflect.DeepEqual(got.Inventory, before.Inventory) {
			t.Fatalf("previous character damaged: %+v", got)
		}
	})
}

func TestChangePassword(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), nil)
		ctx := context.Background()
		c, _ := e.registerAndLogin(t, "ivan")
		other := newClient(t, e.http.URL)
		if _, err := other.Login(ctx, "ivan", "password-ivan", newPeerID(t)); err != nil {
			t.Fatal(err)
		}
		if err := c.ChangePassword(ctx, "wrong old password", "new password 1"); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("wrong old password: %v", err)
		}
		if err := c.ChangePassword(ctx, "password-ivan", "short"); !errors.Is(err, ErrBadRequest) {
			t.Fatalf("short new password: %v", err)
		}
		if err := c.ChangePassword(ctx, "password-ivan", "new password 1"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.LoadCharacter(ctx); err != nil {
			t.Fatalf("the changing session should survive: %v", err)
		}
		if _, err := other.LoadCharacter(ctx); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("other session after password change: %v", err)
		}
		if _, err := newClient(t, e.http.URL).Login(ctx, "ivan", "password-ivan", newPeerID(t)); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("old password still works: %v", err)
		}
		if _, err := newClient(t, e.http.URL).Login(ctx, "ivan", "new password 1", newPeerID(t)); err != nil {
			t.Fatalf("new password: %v", err)
		}
	})
}

func TestLoginRateLimits(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), func(c *Config) {
			c.Lockout = LockoutPolicy{SourceFree: 3, AccountFree: 100, FirstWait: 10 * time.Second,
				MaxSourceWait: 10 * time.Second, MaxAccountWait: 10 * time.Second, ResetAfter: time.Hour}
			c.LoginPerSource = RateLimit{Every: time.Hour, Burst: 9}
		})
		ctx := context.Background()
		c := e.client
		if _, err := c.Register(ctx, "judy", "password-judy"); err != nil {
			t.Fatal(err)
		}
		id := newPeerID(t)
		for i := range 4 {
			if _, err := c.Login(ctx, "judy", "guess", id); !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("guess %d: %v", i, err)
			}
		}
		// Past the free guesses this address waits, even with the right
		// password.
		if _, err := c.Login(ctx, "judy", "password-judy", id); !errors.Is(err, ErrRateLimited) {
			t.Fatalf("login after 4 failures: %v", err)
		}
		e.clock.Advance(10 * time.Second)
		if _, err := c.Login(ctx, "judy", "password-judy", id); err != nil {
			t.Fatalf("login after the wait: %v", err)
		}
		// 7 attempts (register included) used from this address so far; 2
		// more fit the burst.
		for i := range 2 {
			if _, err := c.Login(ctx, "other-name", "guess", id); !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("attempt %d: %v", i, err)
			}
		}
		if _, err := c.Login(ctx, "another-name", "guess", id); !errors.Is(err, ErrRateLimited) {
			t.Fatalf("attempt over the per-address burst: %v", err)
		}
		if _, err := c.Register(ctx, "newcomer", "password-x"); !errors.Is(err, ErrRateLimited) {
			t.Fatalf("register over the per-address burst: %v", err)
		}
	})
}

func TestLeaseAPI(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		store := open()
		e := newTestEnv(t, store, func(c *Config) { c.LeaseTTL = 5 * time.Second })
		ctx := context.Background()
		a, peerA := e.registerAndLogin(t, "kate")
		b, peerB := e.registerAndLogin(t, "liam")
		g, err := a.AcquireLease(ctx, "2,3")
		if err != nil || g.LeaseID != 1 || g.Holder != peerA.String() || g.TTL != 5*time.Second {
			t.Fatalf("acquire: %+v %v", g, err)
		}
		if _, err := b.AcquireLease(ctx, "2,3"); !errors.Is(err, leases.ErrHeld) {
			t.Fatalf("acquire of a held lease: %v", err)
		}
		if _, err := b.RenewLease(ctx, "2,3", 1); !errors.Is(err, leases.ErrLost) {
			t.Fatalf("renew of another's lease: %v", err)
		}
		e.clock.Advance(4 * time.Second)
		if g, err := a.RenewLease(ctx, "2,3", 1); err != nil || g.LeaseID != 1 {
			t.Fatalf("renew: %+v %v", g, err)
		}
		e.clock.Advance(4 * time.Second) // 8s after the grant, 4s after the renewal
		if _, err := b.AcquireLease(ctx, "2,3"); !errors.Is(err, leases.ErrHeld) {
			t.Fatalf("acquire after renewal: %v", err)
		}
		e.clock.Advance(time.Second)
		gb, err := b.AcquireLease(ctx, "2,3")
		if err != nil || gb.LeaseID != 2 || gb.Holder != peerB.String() {
			t.Fatalf("take over after expiry: %+v %v", gb, err)
		}
		if _, err := a.RenewLease(ctx, "2,3", 1); !errors.Is(err, leases.ErrLost) {
			t.Fatalf("renew of the expired lease: %v", err)
		}
		if err := b.ReleaseLease(ctx, "2,3", 2); err != nil {
			t.Fatal(err)
		}
		// A restarted server on the same store continues the IDs.
		e2 := newTestEnv(t, store, func(c *Config) { c.LeaseTTL = 5 * time.Second; c.Now = e.clock.Now })
		a2, _ := e2.registerAndLogin(t, "mike")
		g3, err := a2.AcquireLease(ctx, "2,3")
		if err != nil || g3.LeaseID != 3 {
			t.Fatalf("acquire after release and restart: %+v %v", g3, err)
		}
		list, err := e2.client.ListLeases(ctx, testAdminToken)
		if err != nil || len(list) != 1 || list[0].LeaseID != 3 || !list[0].Active {
			t.Fatalf("admin lease list: %+v %v", list, err)
		}
		if _, err := a.AcquireLease(ctx, "a/b"); !errors.Is(err, leases.ErrInvalid) {
			t.Fatalf("bad region: %v", err)
		}
	})
}

func TestHealthAndMetrics(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), nil)
		e.registerAndLogin(t, "nina")
		for path, want := range map[string]string{
			"/healthz": "ok",
			"/readyz":  "ok",
			"/metrics": `overworld_accounts_logins_total{result="ok"} 1`,
		} {
			resp, err := http.Get(e.http.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, resp)
			if resp.StatusCode != 200 || !strings.Contains(body, want) {
				t.Errorf("%s: %d, body lacks %q", path, resp.StatusCode, want)
			}
		}
	})
}

// The client replaces an access token that is about to expire before
// using it, so long-running peers need not think about refreshes.
func TestClientRefreshesByItself(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), nil)
		ctx := context.Background()
		c, id := e.registerAndLogin(t, "rita")
		first, err := c.AccessToken(ctx)
		if err != nil || first != c.Tokens().AccessToken {
			t.Fatalf("fresh token not reused: %v", err)
		}
		old := c.Tokens()
		// As if issued 15 minutes ago and now in its last minute.
		old.AccessIssuedAt = time.Now().Add(-15 * time.Minute)
		old.AccessExpiresAt = time.Now().Add(30 * time.Second)
		c.SetTokens(old)
		tok, err := c.AccessToken(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// (The access token itself may come out byte-identical when
		// issued within the same second; the rotated refresh token shows
		// the refresh happened.)
		if c.Tokens().RefreshToken == old.RefreshToken {
			t.Fatal("token near its expiry was not refreshed")
		}
		if _, err := token.Verify(e.srv.PublicKey(), tok, id, e.clock.Now()); err != nil {
			t.Fatal(err)
		}
		if _, err := c.LoadCharacter(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
