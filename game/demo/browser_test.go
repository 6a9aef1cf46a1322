package demo

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/game/webui/browsertest"
	"github.com/overworld-p2p/overworld/node/await"
)

func demoLogger() *slog.Logger {
	if os.Getenv("DEMO_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// TestBrowserPlaysDemo runs the demo (with fewer bots, to keep CI light),
// loads the page in headless Chromium, waits for the canvas and at least
// five other players, walks with the keyboard, says a line that another
// peer hears, and saves a screenshot (to $OVERWORLD_SCREENSHOT if set).
func TestBrowserPlaysDemo(t *testing.T) {
	ctx := browsertest.Start(t)
	startCtx, cancelStart := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelStart()
	d, err := Start(startCtx, Config{Bots: 6, HTTP: "127.0.0.1:0", Logger: demoLogger()})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	defer func() {
		stopping := time.Now()
		if err := d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		t.Logf("demo ran %s, stopped in %s", stopping.Sub(began).Round(time.Millisecond), time.Since(stopping).Round(time.Millisecond))
	}()
	t.Logf("demo at %s, accounts at %s", d.URL, d.AccountsURL)

	deadline, cancel := context.WithTimeout(ctx, 150*time.Second)
	defer cancel()
	if err := chromedp.Do(deadline,
		chromedp.Navigate(d.URL+"/"),
		chromedp.WaitVisible(chromedp.ID("world")),
	); err != nil {
		t.Fatal(err)
	}
	// poll evaluates a JS expression until it is truthy or within passes.
	poll := func(within time.Duration, what, expr string) string {
		t.Helper()
		return browsertest.MustUntil(t, deadline, within, what, expr)
	}
	// The bar: the canvas and at least five other players within 20 s.
	others := poll(20*time.Second, "the canvas and five other players", `(() => { const o = window.overworld;
		const c = document.getElementById('world');
		return c && c.width > 0 && o.view && o.view.players.length >= 5 ? String(o.view.players.length) : ''; })()`)
	t.Logf("the page shows %s other players", others)

	// Walk: hold a direction until the page reports the player elsewhere;
	// try the next direction if a wall is in the way.
	status := `(() => { const d = document.getElementById('status').dataset;
		return d.connected === 'true' && d.x ? d.x + ',' + d.y : ''; })()`
	start := poll(10*time.Second, "own position", status)
	moved := ""
	for _, key := range []rune{'d', 'a', 's', 'w'} {
		if err := chromedp.Do(deadline, browsertest.KeyAction(key, true)); err != nil {
			t.Fatal(err)
		}
		moved, _ = browsertest.Until(deadline, 3*time.Second, "a move", elsewhere(status, start))
		if err := chromedp.Do(deadline, browsertest.KeyAction(key, false)); err != nil {
			t.Fatal(err)
		}
		if moved != "" {
			break
		}
	}
	if moved == "" {
		t.Fatalf("the player did not move from %s with any arrow key", start)
	}
	t.Logf("the player walked from %s to %s", start, moved)
	self := d.Player.Player()
	if fmt.Sprintf("%d,%d", self.Pos.X, self.Pos.Y) == start {
		t.Fatalf("the peer did not see the move: still at %+v", self.Pos)
	}

	// Whisper a line to a bot the player sees. A whisper is a direct
	// stream, so whether it arrives does not depend on where the bots have
	// wandered; region-wide chat is tested in game/play (TestPlayersTogether).
	// The name is what the page shows: the bot's own name once its card has
	// arrived, else the end of its peer ID; both must reach it.
	var target, targetID string
	await.Until(t, browsertest.Remaining(deadline), "a bot in view", func() bool {
		for _, pv := range d.Player.Snapshot().Players {
			if pv.Name != "" && pv.Name != d.Player.Name() {
				target, targetID = pv.Name, pv.ID
				return true
			}
		}
		return false
	})
	const line = "hello from chromium"
	focused := `document.activeElement.id === 'chat-input' ? 'yes' : ''`
	shown := `document.getElementById('log').textContent.includes('` + line + `') ? 'yes' : ''`
	// The page shows a whisper once the target acknowledged it; on a loaded
	// machine the stream can time out, so the line is typed again until the
	// page shows it.
	for attempt := 1; ; attempt++ {
		if v, _ := chromedp.Run(deadline, chromedp.Evaluate[string](focused)); v == "" {
			if err := chromedp.Do(deadline, browsertest.KeyAction('\r', true), browsertest.KeyAction('\r', false)); err != nil {
				t.Fatal(err)
			}
			poll(10*time.Second, "chat box focused", focused)
		}
		if err := chromedp.Do(deadline, chromedp.KeyEvent("/w "+target+" "+line), chromedp.KeyEvent(kb.Enter)); err != nil {
			t.Fatal(err)
		}
		if _, err := browsertest.Until(deadline, 10*time.Second, "the whisper in the log", shown); err == nil {
			break
		}
		if attempt == 5 {
			log, _ := chromedp.Run(deadline, chromedp.Evaluate[string](`document.getElementById('log').textContent`))
			t.Fatalf("the whisper to %s never showed in the page's log after %d tries; the log reads:\n%s", target, attempt, log)
		}
		t.Logf("whisper try %d not acknowledged yet; typing it again", attempt)
	}
	var hearer *play.Peer
	await.Until(t, browsertest.Remaining(deadline), "the whispered bot hearing the line", func() bool {
		for _, b := range d.Bots {
			for _, m := range b.Messages() {
				if m.Kind == "whisper" && m.From == d.Player.Name() && m.Text == line {
					hearer = b
					return true
				}
			}
		}
		return false
	})
	if got := hearer.Node().Host().ID().String(); got != targetID {
		t.Fatalf("%s (%s) heard a whisper meant for %s (%s)", hearer.Name(), got, target, targetID)
	}
	t.Logf("%s heard the line", hearer.Name())

	png, err := chromedp.Run(deadline, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	path := os.Getenv("OVERWORLD_SCREENSHOT")
	if path == "" {
		path = filepath.Join(t.TempDir(), "demo.png")
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// elsewhere wraps the JavaScript expression pos (a position, or "") into
// one that is non-empty only once the position differs from was.
func elsewhere(pos, was string) string {
	return `(() => { const v = ` + pos + `; return v !== '` + was + `' ? v : ''; })()`
}
