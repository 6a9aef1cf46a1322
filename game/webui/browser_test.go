package webui

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/webui/browsertest"
	"github.com/overworld-p2p/overworld/node/await"
)

// TestBrowserPlays loads the page in headless Chromium against a
// LocalSession, walks with the keyboard, chats, and saves a screenshot
// (to $OVERWORLD_SCREENSHOT if set, else into the test's temp dir).
func TestBrowserPlays(t *testing.T) {
	ctx := browsertest.Start(t)
	cfg := testConfig()
	l, err := NewLocalSession(LocalOptions{Config: cfg, PlayerID: "me", Name: "Wanderer", Bots: 5, BotSeed: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Stand in the open band at the top of the middle region, so that
	// walking right is never blocked by a wall.
	ru := cfg.RegionUnits()
	var placed bool
	l.With(func(w *game.World) {
		placed = w.Teleport("me", game.Vec{X: ru + 8*game.TileUnits, Y: ru + 3*game.TileUnits/2})
		for i, id := range []game.PlayerID{"bot-000", "bot-001", "bot-002"} {
			w.Teleport(id, game.Vec{X: ru + int32(11+3*i)*game.TileUnits, Y: ru + int32(2+i)*game.TileUnits + game.TileUnits/2})
		}
	})
	if !placed {
		t.Fatal("could not place the player")
	}

	runCtx, stopRun := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.Run(runCtx) }()
	defer func() {
		stopRun()
		wg.Wait()
	}()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	stopServe := serveInBackground(t, l, ln)
	defer func() { stopServe() }()

	deadline, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()

	if err := chromedp.Do(deadline,
		chromedp.Navigate("http://"+addr+"/"),
		chromedp.WaitVisible(chromedp.ID("world")),
		chromedp.WaitVisible(chromedp.ID("minimap")),
	); err != nil {
		t.Fatal(err)
	}
	// poll evaluates a JS expression until it is truthy.
	poll := func(what, expr string) string {
		t.Helper()
		return browsertest.MustUntil(t, deadline, browsertest.Remaining(deadline), what, expr)
	}
	status := `(() => { const d = document.getElementById('status').dataset;
		return d.connected === 'true' && d.x ? d.x + ',' + d.y : ''; })()`
	start := poll("first view", status)
	startX, _ := strconv.Atoi(strings.Split(start, ",")[0])
	poll("terrain and players drawn", `(() => { const o = window.overworld;
		return o.maps.size >= 4 && o.view.players.length >= 3 ? 'yes' : ''; })()`)

	// Hold D (right) until the page reports the player further right.
	if err := chromedp.Do(deadline, browsertest.KeyAction('d', true)); err != nil {
		t.Fatal(err)
	}
	moved := poll("moving right", fmt.Sprintf(`(() => { const x = +document.getElementById('status').dataset.x;
		return x > %d + 2 * %d ? String(x) : ''; })()`, startX, game.TileUnits))
	if err := chromedp.Do(deadline, browsertest.KeyAction('d', false)); err != nil {
		t.Fatal(err)
	}
	t.Logf("player moved from x=%d to x=%s", startX, moved)
	var self game.Player
	l.With(func(w *game.World) { self, _ = w.Player("me") })
	if int(self.Pos.X) <= startX {
		t.Fatalf("the world did not see the move: %+v", self)
	}

	// Enter focuses the chat box; type a line and send it with Enter.
	// Only key-down and key-up: the page cancels the key-down, which in a
	// real browser also suppresses the character event that CDP would
	// otherwise send on its own (and that would submit the empty box).
	if err := chromedp.Do(deadline, browsertest.KeyAction('\r', true), browsertest.KeyAction('\r', false)); err != nil {
		t.Fatal(err)
	}
	poll("chat box focused", `document.activeElement.id === 'chat-input' ? 'yes' : ''`)
	if err := chromedp.Do(deadline,
		chromedp.KeyEvent("hello from chromium"),
		chromedp.KeyEvent(kb.Enter),
	); err != nil {
		t.Fatal(err)
	}
	poll("chat line in the log", `document.getElementById('log').textContent.includes('Wanderer: hello from chromium') ? 'yes' : ''`)

	// Let the bots wander a moment so the picture is lively, then shoot.
	var now uint64
	l.With(func(w *game.World) { now = w.Tick() })
	poll("a few more ticks", fmt.Sprintf(`+document.getElementById('status').dataset.tick > %d ? 'yes' : ''`, now+15))
	png, err := chromedp.Run(deadline, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	path := os.Getenv("OVERWORLD_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "webui.png")
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))

	// Restart the server on the same address, as a restarting peer would;
	// the page must notice the drop and reconnect by itself.
	stopServe()
	poll("the page noticing the drop", `document.getElementById('status').dataset.connected === 'false' ? 'yes' : ''`)
	// The kernel may hold the port a moment and says nothing when it lets go.
	if werr := await.UntilErr(browsertest.Remaining(deadline), "listening on "+addr+" again", func() bool {
		ln, err = net.Listen("tcp", addr)
		return err == nil
	}); werr != nil {
		t.Fatalf("%v: %v", werr, err)
	}
	stopServe = serveInBackground(t, l, ln)
	poll("reconnection", `(() => { const o = window.overworld;
		return o.connected && o.reconnects > 0 && document.getElementById('status').dataset.connected === 'true' ? 'yes' : ''; })()`)
}

// serveInBackground serves a new Server for l on ln and returns a function
// that stops it and waits until it is gone (safe to call twice).
func serveInBackground(t *testing.T, l *LocalSession, ln net.Listener) func() {
	t.Helper()
	s, err := NewServer(l, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Serve(ctx, ln); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
