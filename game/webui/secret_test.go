package webui

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

func refusalCount(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "overworld_webui_refusals_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelOf(m, "reason") == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestAdversarialPageWithoutSecret: a page served where others can reach
// it demands the per-run secret. A neighbour who sends "Host: 127.0.0.1"
// (which passes the loopback Host check), guesses a key, or opens the
// WebSocket directly is refused and counted; the player's browser, which
// opened the printed address, plays.
func TestAdversarialPageWithoutSecret(t *testing.T) {
	reg := prometheus.NewRegistry()
	secret := NewSecret()
	l, _, hs := newTestServer(t, Options{Secret: secret, Registerer: reg})
	get := func(c *http.Client, path, host string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", hs.URL+path, nil)
		if host != "" {
			req.Host = host
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	neighbour := &http.Client{}
	for _, path := range []string{"/", "/app.js", "/ws", "/healthz"} {
		if code := get(neighbour, path, "127.0.0.1:8080"); code != http.StatusUnauthorized {
			t.Errorf("%s with a loopback Host and no key: %d", path, code)
		}
	}
	if code := get(neighbour, "/?k=0123456789abcdef0123456789abcdef", ""); code != http.StatusUnauthorized {
		t.Errorf("a guessed key: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wsURL := "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws"
	if _, resp, err := websocket.Dial(ctx, wsURL, nil); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("WebSocket without the key: err=%v resp=%v", err, resp)
	}
	if refusalCount(t, reg, "no_secret") != 5 || refusalCount(t, reg, "bad_secret") != 1 {
		t.Errorf("refusals counted: no_secret %v, bad_secret %v", refusalCount(t, reg, "no_secret"), refusalCount(t, reg, "bad_secret"))
	}

	// The player's browser: the printed address, then assets and the
	// WebSocket on the cookie it set.
	jar, _ := cookiejar.New(nil)
	player := &http.Client{Jar: jar}
	addr := hs.Listener.Addr()
	page := PageURL(addr, secret)
	if !strings.Contains(page, "?k="+secret) {
		t.Fatalf("page address %s lacks the secret", page)
	}
	if code := get(player, "/?k="+secret, ""); code != http.StatusOK {
		t.Fatalf("page with the key: %d", code)
	}
	if code := get(player, "/app.js", ""); code != http.StatusOK {
		t.Fatalf("asset after the page: %d", code)
	}
	c, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: player})
	if err != nil {
		t.Fatalf("WebSocket with the page's cookie: %v", err)
	}
	defer c.CloseNow()
	tc := &testClient{t, c}
	if f := tc.mustRead(); f.Type != "hello" {
		t.Fatalf("first frame %+v", f)
	}
	tc.until(l, 50, func(f frame) bool { return f.Type == "view" })
}

func TestNeedsSecret(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": false, "localhost:8080": false, "[::1]:8080": false, "127.0.0.2:1": false,
		"0.0.0.0:8080": true, ":8080": true, "192.168.1.5:8080": true, "[::]:8080": true, "example.org:80": true,
	} {
		if got := NeedsSecret(addr); got != want {
			t.Errorf("NeedsSecret(%q) = %v, want %v", addr, got, want)
		}
	}
	if _, err := NewServer(&LocalSession{}, Options{Secret: "short"}); err == nil {
		t.Error("a short secret was taken")
	}
}
