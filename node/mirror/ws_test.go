package mirror

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/await"
	"github.com/overworld-p2p/overworld/node/crimp"
)

// The real thing on the wall clock: the account server (SQLite), mirrors
// on the in-memory CRIMP network, clients over WebSockets on 127.0.0.1.

type accountServer struct {
	url string
	pub ed25519.PublicKey
}

func startAccountServer(t testing.TB) accountServer {
	t.Helper()
	dir := t.TempDir()
	key, err := accounts.LoadOrCreateKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	store, err := accounts.OpenStore(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := accounts.New(accounts.Config{
		Key: key, Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
		LoginPerSource: accounts.RateLimit{Every: time.Millisecond, Burst: 10_000},
		Hash:           accounts.HashParams{Memory: 8 * 1024, Time: 1, Threads: 1}, HashConcurrency: 4,
	}, store)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Serve(ctx, ln)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		store.Close()
	})
	return accountServer{url: "http://" + ln.Addr().String(), pub: srv.PublicKey()}
}

// account registers and logs in name from a fresh peer key.
func (a accountServer) account(t testing.TB, name string) (*accounts.Client, crypto.PrivKey) {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(key)
	cl, err := accounts.NewClient(a.url)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := cl.Register(ctx, name, "password-"+name); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Login(ctx, name, "password-"+name, id); err != nil {
		t.Fatal(err)
	}
	return cl, key
}

// wallGroup is mirrors on the wall clock, each serving its Handler.
type wallGroup struct {
	mirrors []*Server
	urls    []string
	game    game.Config
}

func startWallGroup(t testing.TB, n int, acct accountServer) *wallGroup {
	t.Helper()
	clock := crimp.WallClock{}
	mn := crimp.NewMemNetwork(clock, 1)
	g := &wallGroup{game: testGame()}
	authPub, authKey, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		for j := range i {
			mn.SetLink(site(i), site(j), crimp.LinkParams{Delay: time.Millisecond})
		}
	}
	for i := range n {
		var key ed25519.PrivateKey
		if i == 0 {
			key = authKey
		}
		s, err := New(Config{
			Game: g.game, Authority: i == 0, Transport: mn.Endpoint(site(i)), AuthorityKey: key, AuthorityPublicKey: authPub,
			Delays:     []time.Duration{0, 50 * time.Millisecond, 200 * time.Millisecond},
			AccountKey: acct.pub, Characters: &AccountServer{URL: acct.url, Key: acct.pub, Game: g.game},
			Logger: testLogger().With("mirror", i+1), DataDir: t.TempDir(),
			// The tests look at the save a leave makes: no periodic one
			// (every 30 s by default) may come between, however slow the
			// machine.
			SaveEvery: time.Hour,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := &http.Server{Handler: s.Handler()}
		go hs.Serve(ln)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			s.Shutdown(ctx)
			hs.Close()
		})
		g.mirrors = append(g.mirrors, s)
		g.urls = append(g.urls, "ws://"+ln.Addr().String()+"/ws")
		await.Until(t, 30*time.Second, fmt.Sprintf("mirror %d ready", i+1), s.Ready)
	}
	t.Cleanup(mn.Close)
	return g
}

// TestWebSocketRestoreAndSave: a player with a saved character connects
// to a mirror over its WebSocket and comes back as saved; when it leaves,
// the mirror saves it to the account server from the last trailing state.
func TestWebSocketRestoreAndSave(t *testing.T) {
	acct := startAccountServer(t)
	g := startWallGroup(t, 2, acct)
	cl, key := acct.account(t, "alice")
	w, _ := game.NewWorld(g.game)
	pos := w.SpawnPoint("somewhere", game.RegionCoord{X: 2, Y: 1}, 0)
	ctx := context.Background()
	if _, err := cl.SaveCharacter(ctx, accounts.Character{X: int64(pos.X), Y: int64(pos.Y), Health: 60, Hunger: 10, Score: 7, Experience: 12}); err != nil {
		t.Fatal(err)
	}
	tok, _ := cl.AccessToken(ctx)
	c, err := Dial(ctx, g.urls[1], key, tok)
	if err != nil {
		t.Fatal(err)
	}
	await.Until(t, 30*time.Second, "alice's first update", func() bool { return c.View().HasSelf })
	v := c.View()
	if !v.Restored || v.Self.Pos != pos || v.Self.Score != 7 || v.Self.Skill != 12 || v.Self.Health < 59 || v.Self.Health > 61 {
		t.Fatalf("alice came back as %+v (restored %v), saved at %v with score 7, skill 12, health 60", v.Self, v.Restored, pos)
	}
	if v.Mirror != 2 || v.Player != game.PlayerID(cl.Tokens().AccountID) {
		t.Fatalf("welcome: mirror %d, player %q", v.Mirror, v.Player)
	}
	// Walk east for a second (30 inputs at the client's 30 Hz), then leave.
	pace := time.NewTicker(time.Second / 30)
	defer pace.Stop()
	for range 30 {
		if err := c.SendInput(ctx, game.Input{MoveX: 127}, false); err != nil {
			t.Fatal(err)
		}
		<-pace.C
	}
	await.Until(t, 30*time.Second, "a status line", func() bool { return c.View().Status.Mirror == 2 })
	// Mirror 2 took the last input once an update says so; the input went
	// out stamped with a tick at most one past that update's leading tick
	// (a second input in one tick is held for the next).
	var taken uint64
	await.Until(t, 30*time.Second, "mirror 2 taking alice's last input", func() bool {
		cv := c.View()
		taken = cv.LeadingTick
		return cv.InputSeq >= c.LastSeq()
	})
	var moved game.Player
	// The walk is over once mirror 1's confirmed (last trailing) state has
	// passed the last input's tick: mirror 1 is the authority, and an
	// input of alice's reaching it after that is dropped as too late, so
	// that is where alice stands. (Not "once it agrees with the leading
	// state": a leading state may keep a position within the
	// synchronizer's margin of the trailing one without rolling back, so
	// on a loaded machine the two can differ for good.) Mirror 2, which
	// saves her, executed every one of her inputs; if mirror 1 dropped one
	// as too late, mirror 2 stands her a step further until the hash
	// exchange makes it fetch the authority's state. So the walk is over
	// for the save once mirror 2's confirmed state has passed the tick too
	// and agrees with mirror 1's on where she stands.
	await.Until(t, 30*time.Second, "both mirrors' confirmed states past alice's last input, agreeing where she stands", func() bool {
		var tick1, tick2 uint64
		var at2 game.Player
		g.mirrors[0].Inspect(func(_, last *State) {
			moved, _ = last.World().Player(v.Player)
			tick1 = last.Tick()
		})
		g.mirrors[1].Inspect(func(_, last *State) {
			at2, _ = last.World().Player(v.Player)
			tick2 = last.Tick()
		})
		return tick1 > taken+1 && tick2 > taken+1 && at2.Pos == moved.Pos
	})
	if moved.Pos == pos {
		t.Fatalf("alice's walk did not move her from %v in the confirmed state", pos)
	}
	if err := c.Close(); err != nil && !strings.Contains(err.Error(), "closed") {
		t.Logf("close: %v", err)
	}
	var saved accounts.Character
	await.Until(t, 30*time.Second, "alice saved", func() bool {
		saved, _ = cl.LoadCharacter(ctx)
		return saved.Version >= 2
	})
	if saved.X != int64(moved.Pos.X) || saved.Y != int64(moved.Pos.Y) || saved.Score != 7 || saved.Region == "" {
		m1, m2 := g.mirrors[0].Metrics(), g.mirrors[1].Metrics()
		t.Fatalf("saved %+v, alice stood at %v (mirror 1: too late %d, mismatched %d, resyncs %d; mirror 2: too late %d, mismatched %d, resyncs %d)",
			saved, moved.Pos, m1.TSS["too_late"], m1.Mismatched, m1.Resyncs, m2.TSS["too_late"], m2.Mismatched, m2.Resyncs)
	}
	// The account server answers before the mirror counts the save.
	await.Until(t, 30*time.Second, "the mirror counting the save", func() bool { return g.mirrors[1].Metrics().Saves > 0 })
	t.Logf("alice restored at %v, walked to %v, saved there (version %d, region %s)", pos, moved.Pos, saved.Version, saved.Region)
}

// TestWebSocketAdversaries: over the real WebSocket, an oversized frame
// closes the connection with 1009, a text frame and a bad token are
// refused; all are counted; /readyz and /healthz answer.
func TestWebSocketAdversaries(t *testing.T) {
	acct := startAccountServer(t)
	g := startWallGroup(t, 1, acct)
	cl, key := acct.account(t, "carol")
	ctx := context.Background()
	tok, _ := cl.AccessToken(ctx)
	c, err := Dial(ctx, g.urls[0], key, tok)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SendRaw(ctx, websocket.MessageText, []byte(`{"type":"input"}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.SendRaw(ctx, websocket.MessageBinary, make([]byte, MaxClientFrame+100)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the oversized frame did not end the session")
	}
	if code := websocket.CloseStatus(c.Err()); code != websocket.StatusMessageTooBig {
		t.Fatalf("closed with %v (%v), want 1009", code, c.Err())
	}
	// A token from another key.
	_, other := acct.account(t, "dave")
	_, err = Dial(ctx, g.urls[0], other, tok)
	var me *MirrorError
	if !errors.As(err, &me) || me.Code != refusedBadToken {
		t.Fatalf("a token presented with another peer key: %v", err)
	}
	// The library writes the 1009 close frame before its Read returns the
	// error the mirror counts, so the client can be done before the count:
	// wait for it.
	var refused map[string]uint64
	err = await.UntilErr(30*time.Second, "the refusals counted", func() bool {
		refused = g.mirrors[0].Metrics().Refused
		return refused[refusedOversized] > 0 && refused[refusedTextFrame] > 0 && refused[refusedBadToken] > 0
	})
	if err != nil {
		t.Errorf("%v: %v", err, refused)
	}
	base := strings.Replace(strings.TrimSuffix(g.urls[0], "/ws"), "ws://", "http://", 1)
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
}
