// Package browsertest starts the headless Chromium that the project's
// browser tests drive with chromedp, locked to loopback, and supplies the
// key actions those tests need, and waits for a state of the page. Only
// tests import it.
package browsertest

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// chromiumPath finds the browser: $OVERWORLD_CHROMIUM, then Debian's.
func chromiumPath() string {
	for _, p := range []string{os.Getenv("OVERWORLD_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if _, err := exec.LookPath(p); err == nil {
			return p
		}
	}
	return ""
}

// Start launches headless Chromium with a fresh profile and returns a tab's
// context; the browser stops when the test ends. It skips the test when no
// Chromium is installed.
func Start(t testing.TB) context.Context {
	t.Helper()
	bin := chromiumPath()
	if bin == "" {
		t.Skip("chromium not found at /usr/bin/chromium (apt-get install -y chromium, or set OVERWORLD_CHROMIUM)")
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		// Resolve nothing but loopback: the test must not reach any other host.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	ctx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
	})
	if err := chromedp.Do(ctx); err != nil { // start the browser without a deadline
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// KeyAction dispatches only the key-down (down=true) or key-up events of
// r, so a key can be held across several ticks.
func KeyAction(r rune, down bool) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, k := range kb.Encode(r) {
			if (down && k.Type == kb.KeyDown) || (!down && k.Type == kb.KeyUp) {
				if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, *k); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
