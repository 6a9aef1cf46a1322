package accounts

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/leases"
)

// clientFrom is a client whose connections come from the loopback address
// ip (any of 127.0.0.0/8 works on Linux): another source for the server's
// per-address limits.
func clientFrom(t *testing.T, url, ip string) *Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	c, err := NewClient(url, WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// refusals reads overworld_accounts_refusals_total{route, reason} from
// the server's registry, as /metrics serves it.
func (e *testEnv) refusals(route, reason string) float64 {
	families, err := e.srv.cfg.Registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if f.GetName() != "overworld_accounts_refusals_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["route"] == route && labels["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestAdversarialLockout plays the lockout attack: a guesser, from several
// addresses, sends one wrong password every 12 s for an hour (and then
// floods). The owner, at the address it always logs in from, logs in at
// every point; the guesser's own addresses wait, doubling, and the guesses
// that reach the password check stay few. Refusals are counted.
func TestAdversarialLockout(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), nil)
		ctx := context.Background()
		owner := clientFrom(t, e.http.URL, "127.0.0.1")
		if _, err := owner.Register(ctx, "victim", "password-victim"); err != nil {
			t.Fatal(err)
		}
		id := newPeerID(t)
		if _, err := owner.Login(ctx, "victim", "password-victim", id); err != nil {
			t.Fatal(err)
		}
		ch := Character{Region: "1,1", X: 100, Y: 100, Health: 90, Score: 7, Experience: 10}
		if _, err := owner.SaveCharacter(ctx, ch); err != nil {
			t.Fatal(err)
		}
		var guessers []*Client
		for _, ip := range []string{"127.0.0.2", "127.0.0.3", "127.0.0.4"} {
			guessers = append(guessers, clientFrom(t, e.http.URL, ip))
		}
		checked := 0 // guesses that reached the password check
		guess := func(i int) {
			_, err := guessers[i%len(guessers)].Login(ctx, "victim", "not-the-password", newPeerID(t))
			switch {
			case errors.Is(err, ErrUnauthorized):
				checked++
			case errors.Is(err, ErrRateLimited):
			default:
				t.Fatalf("guess %d: %v", i, err)
			}
		}
		for i := range 300 { // an hour at one guess per 12 s
			guess(i)
			e.clock.Advance(12 * time.Second)
			if i%25 == 0 {
				if _, err := owner.Login(ctx, "victim", "password-victim", id); err != nil {
					t.Fatalf("owner locked out after %d guesses: %v", i+1, err)
				}
			}
		}
		for i := range 100 { // then as fast as it can
			guess(i)
		}
		if _, err := owner.Login(ctx, "victim", "password-victim", id); err != nil {
			t.Fatalf("owner locked out after the flood: %v", err)
		}
		// The account-wide backoff holds the guessers at one try per 15 min
		// at most once the free guesses are spent: far fewer than 400.
		t.Logf("%d of 400 guesses reached the password check", checked)
		if checked > 40 {
			t.Errorf("%d of 400 guesses reached the password check", checked)
		}
		const route = "POST /v1/login"
		if e.refusals(route, "locked_account") == 0 || e.refusals(route, "wrong_password") == 0 {
			t.Errorf("refusals not counted: locked_account %v, wrong_password %v",
				e.refusals(route, "locked_account"), e.refusals(route, "wrong_password"))
		}
		// The owner's state is untouched.
		got, err := owner.LoadCharacter(ctx)
		if err != nil || got.Score != 7 || got.Version != 1 {
			t.Fatalf("owner's character after the attack: %+v %v", got, err)
		}
		// A new address of the owner's waits at most MaxAccountWait, even
		// while the guessing goes on.
		traveller := clientFrom(t, e.http.URL, "127.0.0.9")
		if _, err := traveller.Login(ctx, "victim", "password-victim", id); !errors.Is(err, ErrRateLimited) {
			t.Fatalf("login from a new address under attack: %v", err)
		}
		e.clock.Advance(DefaultLockoutPolicy.MaxAccountWait)
		if _, err := traveller.Login(ctx, "victim", "password-victim", id); err != nil {
			t.Fatalf("login from a new address after the longest wait: %v", err)
		}
	})
}

// TestAdversarialPeerCap: one account logs in from as many peer IDs as it
// likes; the server lets MaxPeersPerAccount of them hold live tokens, tells
// the next one why not, and lets it in once a token has expired.
func TestAdversarialPeerCap(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), func(c *Config) { c.MaxPeersPerAccount = 3; c.TokenTTL = time.Minute })
		ctx := context.Background()
		c := e.client
		if _, err := c.Register(ctx, "swarm", "password-swarm"); err != nil {
			t.Fatal(err)
		}
		first := newPeerID(t)
		for i := range 3 {
			id := first
			if i > 0 {
				id = newPeerID(t)
			}
			if _, err := newClient(t, e.http.URL).Login(ctx, "swarm", "password-swarm", id); err != nil {
				t.Fatalf("peer %d: %v", i, err)
			}
		}
		_, err := c.Login(ctx, "swarm", "password-swarm", newPeerID(t))
		if !errors.Is(err, ErrTooManyPeers) || !strings.Contains(err.Error(), "logged in on 3 other peers") {
			t.Fatalf("fourth peer: %v", err)
		}
		// A peer already counted logs in again.
		if _, err := c.Login(ctx, "swarm", "password-swarm", first); err != nil {
			t.Fatalf("same peer again: %v", err)
		}
		// Logging out does not free the place: a token, once issued, is
		// checked offline until it expires.
		if err := c.Logout(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Login(ctx, "swarm", "password-swarm", newPeerID(t)); !errors.Is(err, ErrTooManyPeers) {
			t.Fatalf("new peer after a logout: %v", err)
		}
		if got := e.refusals("POST /v1/login", CodeTooManyPeers); got != 2 {
			t.Errorf("too_many_peers refusals counted %v, want 2", got)
		}
		if n := e.store.counts(t)["sessions"]; n != 4 {
			t.Errorf("%d sessions stored, want 4", n)
		}
		e.clock.Advance(time.Minute + time.Second)
		if _, err := c.Login(ctx, "swarm", "password-swarm", newPeerID(t)); err != nil {
			t.Fatalf("new peer once the other tokens expired: %v", err)
		}
	})
}

// TestAdversarialSaves: a player saves its own character with whatever it
// likes. The server refuses what no game state can be (a negative score),
// gains no play could make since the stored save, and a save that would
// overwrite unconditionally; the stored character stays as it was.
func TestAdversarialSaves(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), nil)
		ctx := context.Background()
		c, _ := e.registerAndLogin(t, "cheater")
		honest := Character{Region: "2,2", X: 500, Y: 500, Health: 80, Hunger: 10, Score: 40, Experience: 12}
		v, err := c.SaveCharacter(ctx, honest)
		if err != nil {
			t.Fatal(err)
		}
		honest.Version = v
		e.clock.Advance(30 * time.Second)
		stored := func() Character {
			t.Helper()
			got, err := c.LoadCharacter(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got.SavedAt = time.Time{}
			return got
		}
		before := stored()
		attacks := []struct {
			name   string
			ch     Character
			want   error
			reason string
		}{
			{"score -2^63", Character{Score: math.MinInt64, Version: v}, ErrBadRequest, "bad_request"},
			{"score 2^62", Character{Score: 1 << 62, Version: v}, ErrBadRequest, "save_out_of_bounds"},
			{"a day's score in 30 s", Character{Score: 40 + 5000, Experience: 12, Version: v}, ErrBadRequest, "save_out_of_bounds"},
			{"skill 100 in 30 s", Character{Score: 40, Experience: 100, Version: v}, ErrBadRequest, "save_out_of_bounds"},
			{"health 10000", Character{Health: 10000, Version: v}, ErrBadRequest, "save_out_of_bounds"},
			{"base version 0 over a saved character", Character{Score: 41, Version: 0}, ErrConflict, "save_unconditional"},
		}
		for _, a := range attacks {
			if _, err := c.SaveCharacter(ctx, a.ch); !errors.Is(err, a.want) {
				t.Errorf("%s: %v, want %v", a.name, err, a.want)
			}
			if got := e.refusals("PUT /v1/character", a.reason); got == 0 {
				t.Errorf("%s: refusal %q not counted", a.name, a.reason)
			}
		}
		if after := stored(); !charactersEqual(after, before) {
			t.Fatalf("character changed by refused saves: %+v -> %+v", before, after)
		}
		// What 30 s of play can bring is taken.
		next := honest
		next.Score += 200
		next.Experience++
		if _, err := c.SaveCharacter(ctx, next); err != nil {
			t.Fatalf("honest save: %v", err)
		}
	})
}

func charactersEqual(a, b Character) bool {
	a.SavedAt, b.SavedAt = time.Time{}, time.Time{}
	return a.Region == b.Region && a.X == b.X && a.Y == b.Y && a.Health == b.Health && a.Hunger == b.Hunger &&
		a.Score == b.Score && a.Experience == b.Experience && a.Version == b.Version && len(a.Inventory) == len(b.Inventory)
}

// TestAdversarialRefreshReuse: a thief with a copy of a refresh token uses
// it before the owner does. When the owner then presents the same token,
// the server ends the session: the thief's fresh tokens die with it.
func TestAdversarialRefreshReuse(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), nil)
		ctx := context.Background()
		owner, id := e.registerAndLogin(t, "robbed")
		thief := newClient(t, e.http.URL)
		thief.SetTokens(owner.Tokens())
		stolen, err := thief.Refresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := owner.Refresh(ctx); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("owner's refresh with the spent token: %v", err)
		}
		if _, err := thief.LoadCharacter(ctx); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("thief's tokens after the reuse: %v", err)
		}
		if _, err := thief.Refresh(ctx); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("thief's refresh token after the reuse: %v", err)
		}
		if got := e.refusals("POST /v1/refresh", "refresh_reused"); got != 1 {
			t.Errorf("refresh_reused counted %v, want 1", got)
		}
		_ = stolen
		// The owner logs in again and carries on.
		if _, err := owner.Login(ctx, "robbed", "password-robbed", id); err != nil {
			t.Fatal(err)
		}
		if _, err := owner.LoadCharacter(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestAdversarialCrossSitePost: a web page can make a browser POST without
// a CORS preflight only with no content type or a "simple" one; the server
// takes JSON bodies only as application/json, so such a post logs nobody
// in and changes nothing. An admin token without "Bearer " is refused too.
func TestAdversarialCrossSitePost(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), nil)
		e.registerAndLogin(t, "browser")
		before := e.store.counts(t)
		body := `{"name":"browser","password":"password-browser","peer_id":"12D3KooWGRUVh4ShuHuaC2Ne6tujCJbsbxJUUZDnyBbPzdRTPm9Q"}`
		for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
			req, _ := http.NewRequest(http.MethodPost, e.http.URL+"/v1/login", strings.NewReader(body))
			if ct != "" {
				req.Header.Set("Content-Type", ct)
			}
			req.Header.Set("Origin", "https://evil.example")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnsupportedMediaType {
				t.Errorf("login posted as %q: %d, want 415", ct, resp.StatusCode)
			}
		}
		if got := e.store.counts(t); got["sessions"] != before["sessions"] {
			t.Errorf("cross-site posts made sessions: %v -> %v", before, got)
		}
		route := "POST /v1/login"
		if e.refusals(route, "no_content_type") != 1 || e.refusals(route, "wrong_content_type") != 3 {
			t.Errorf("content-type refusals: none %v, wrong %v", e.refusals(route, "no_content_type"), e.refusals(route, "wrong_content_type"))
		}
		req, _ := http.NewRequest(http.MethodGet, e.http.URL+"/v1/admin/sessions", nil)
		req.Header.Set("Authorization", testAdminToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || e.refusals("GET /v1/admin/sessions", "admin_no_bearer") != 1 {
			t.Errorf("admin token without Bearer: %d", resp.StatusCode)
		}
	})
}

// TestAdversarialSessionChurn: a player logs in and out over and over.
// Ended sessions (and their spent refresh tokens) leave the table once the
// retention has passed, so the churn does not grow the store for ever.
func TestAdversarialSessionChurn(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), func(c *Config) { c.SessionRetention = time.Hour; c.TokenTTL = time.Minute })
		ctx := context.Background()
		c, id := e.registerAndLogin(t, "churner")
		for range 30 {
			if _, err := c.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
			if err := c.Logout(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Login(ctx, "churner", "password-churner", id); err != nil {
				t.Fatal(err)
			}
		}
		spent := func() int {
			var n int
			if err := e.store.db.QueryRow(`SELECT COUNT(*) FROM spent_refresh_tokens`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := e.store.counts(t)["sessions"]; n != 31 || spent() == 0 {
			t.Fatalf("%d sessions, %d spent tokens before the cleanup", n, spent())
		}
		if n, err := e.srv.CleanSessions(ctx); err != nil || n != 0 {
			t.Fatalf("cleanup within the retention deleted %d: %v", n, err)
		}
		e.clock.Advance(time.Hour + time.Second)
		n, err := e.srv.CleanSessions(ctx)
		if err != nil || n != 30 {
			t.Fatalf("cleanup deleted %d sessions, want the 30 ended ones: %v", n, err)
		}
		if got := e.store.counts(t)["sessions"]; got != 1 {
			t.Fatalf("%d sessions left, want the live one", got)
		}
		var left int
		if err := e.store.db.QueryRow(`SELECT COUNT(*) FROM spent_refresh_tokens WHERE session_id NOT IN (SELECT id FROM sessions)`).Scan(&left); err != nil || left != 0 {
			t.Fatalf("%d spent tokens of deleted sessions left: %v", left, err)
		}
		// (The client judges expiry by the real clock, the server by the
		// test's: refresh by hand.)
		if _, err := c.Refresh(ctx); err != nil {
			t.Fatalf("the live session after the cleanup: %v", err)
		}
		if _, err := c.LoadCharacter(ctx); err != nil {
			t.Fatalf("the live session after the cleanup: %v", err)
		}
	})
}

func TestBackoffs(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBackoffs(2, time.Second, 8*time.Second, time.Hour, 3)
	for i := range 2 {
		b.Fail("k", t0)
		if w := b.Wait("k", t0); w != 0 {
			t.Fatalf("free failure %d: wait %s", i, w)
		}
	}
	for i, want := range []time.Duration{1, 2, 4, 8, 8} {
		b.Fail("k", t0)
		if w := b.Wait("k", t0); w != want*time.Second {
			t.Fatalf("failure %d past the free ones: wait %s, want %s", i+1, w, want*time.Second)
		}
	}
	if w := b.Wait("k", t0.Add(8*time.Second)); w != 0 {
		t.Fatalf("wait after it passed: %s", w)
	}
	// A quiet hour starts over.
	b.Fail("k", t0.Add(time.Hour+8*time.Second))
	if w := b.Wait("k", t0.Add(time.Hour+8*time.Second)); w != 0 {
		t.Fatalf("first failure after a quiet hour: wait %s", w)
	}
	b.Clear("k")
	for _, k := range []string{"a", "b", "c", "d"} {
		b.Fail(k, t0)
	}
	if b.Len() != 3 {
		t.Fatalf("table of %d, limit 3", b.Len())
	}
}

// TestAdversarialLeaseSquatting plays lease squatting: twelve logged-in
// peers ask for one region's lease. The server grants it only to a peer
// among the LeaseCandidates closest to the region's key; the others are
// refused, counted, and the lease table does not change. The grant comes
// with a proof signed by the token key that peers verify offline.
func TestAdversarialLeaseSquatting(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		store := open()
		e := newTestEnv(t, store, func(c *Config) { c.LeaseCandidates = 3 })
		ctx := context.Background()
		region := leases.RegionLease("w", 4, 2)
		key, _ := leases.PlacementKey(region)
		type logged struct {
			c  *Client
			id peer.ID
		}
		var all []logged
		var ids []string
		for i := range 12 {
			c, id := e.registerAndLogin(t, fmt.Sprintf("squatter%d", i))
			all = append(all, logged{c, id})
			ids = append(ids, string(id))
		}
		var far, near []logged
		for _, p := range all {
			if leases.Rank(key, string(p.id), ids) >= 3 {
				far = append(far, p)
			} else {
				near = append(near, p)
			}
		}
		before := store.counts(t)
		for _, p := range far {
			if _, err := p.c.AcquireLease(ctx, region); !errors.Is(err, leases.ErrNotEntitled) {
				t.Fatalf("a peer ranked 3 or more acquired: %v", err)
			}
		}
		if got := store.counts(t); fmt.Sprint(got) != fmt.Sprint(before) {
			t.Fatalf("refused acquires changed the store: %v -> %v", before, got)
		}
		if got := e.refusals("POST /v1/leases/{region}/acquire", "lease_not_entitled"); got != float64(len(far)) {
			t.Fatalf("refusals counted %v, want %d", got, len(far))
		}
		g, err := near[len(near)-1].c.AcquireLease(ctx, region)
		if err != nil {
			t.Fatalf("a peer among the 3 closest: %v", err)
		}
		p, err := leases.ParseProof(e.srv.PublicKey(), g.Proof)
		if err != nil || p.Region != region || p.Holder != near[len(near)-1].id.String() || p.LeaseID != g.LeaseID {
			t.Fatalf("grant proof: %+v %v", p, err)
		}
		// A lease name that is no region's is not placement-checked: it
		// proves nothing to peers.
		if _, err := far[0].c.AcquireLease(ctx, "2,3"); err != nil {
			t.Fatalf("a non-region lease: %v", err)
		}
	})
}
