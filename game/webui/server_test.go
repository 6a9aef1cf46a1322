package webui

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/overworld-p2p/overworld/game"
)

// testWorld is a small world so tests stay quick.
func testConfig() *game.Config {
	cfg := game.DefaultConfig()
	cfg.RegionsX, cfg.RegionsY = 3, 3
	return &cfg
}

func newTestServer(t *testing.T, opts Options) (*LocalSession, *Server, *httptest.Server) {
	t.Helper()
	l, err := NewLocalSession(LocalOptions{Config: testConfig(), PlayerID: "me", Name: "Tester", Bots: 2, BotSeed: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Stand in the open band along the top of the middle region, where
	// walking left or right is never blocked.
	ru := testConfig().RegionUnits()
	l.With(func(w *game.World) {
		if !w.Teleport("me", game.Vec{X: ru + 8*game.TileUnits, Y: ru + 3*game.TileUnits/2}) {
			t.Fatal("could not place the player")
		}
	})
	if opts.ViewInterval == 0 {
		opts.ViewInterval = 20 * time.Millisecond
	}
	s, err := NewServer(l, opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		s.Close()
		hs.Close()
	})
	return l, s, hs
}

type testClient struct {
	t *testing.T
	c *websocket.Conn
}

func dial(t *testing.T, hs *httptest.Server) *testClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 22)
	t.Cleanup(func() { c.CloseNow() })
	return &testClient{t, c}
}

// frame is any server frame, decoded loosely.
type frame struct {
	Type  string    `json:"type"`
	Self  string    `json:"self"`
	World WorldInfo `json:"world"`
	View  View      `json:"view"`
	Maps  []MapView `json:"maps"`
	Error string    `json:"error"`
}

func (tc *testClient) read() (frame, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, b, err := tc.c.Read(ctx)
	if err != nil {
		return frame{}, err
	}
	var f frame
	if err := json.Unmarshal(b, &f); err != nil {
		tc.t.Fatalf("server sent bad JSON %q: %v", b, err)
	}
	return f, nil
}

func (tc *testClient) mustRead() frame {
	tc.t.Helper()
	f, err := tc.read()
	if err != nil {
		tc.t.Fatal(err)
	}
	return f
}

func (tc *testClient) send(s string) {
	tc.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tc.c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		tc.t.Fatal(err)
	}
}

// until reads frames until one satisfies ok, stepping the world before
// each read; it fails after limit frames.
func (tc *testClient) until(l *LocalSession, limit int, ok func(frame) bool) frame {
	tc.t.Helper()
	for i := 0; i < limit; i++ {
		if l != nil {
			l.Step()
		}
		f := tc.mustRead()
		if ok(f) {
			return f
		}
	}
	tc.t.Fatalf("no matching frame in %d frames", limit)
	return frame{}
}

func TestServerViewInputAndMove(t *testing.T) {
	l, _, hs := newTestServer(t, Options{})
	tc := dial(t, hs)

	hello := tc.mustRead()
	if hello.Type != "hello" || hello.Self != "me" || hello.World.RegionsX != 3 || hello.World.TileUnits != game.TileUnits {
		t.Fatalf("hello frame %+v", hello)
	}
	first := tc.mustRead()
	if first.Type != "view" || first.View.Self.ID != "me" || first.View.Self.Name != "Tester" {
		t.Fatalf("first view %+v", first)
	}
	if len(first.Maps) == 0 || len(first.Maps) != len(first.View.Regions) {
		t.Fatalf("first view carries %d maps for %d regions", len(first.Maps), len(first.View.Regions))
	}
	for _, m := range first.Maps {
		if len(m.Tiles) != m.Size*m.Size || m.Size != testConfig().RegionTiles {
			t.Fatalf("map %d,%d has %d tiles of size %d", m.X, m.Y, len(m.Tiles), m.Size)
		}
	}
	if len(first.View.Players) != 2 || first.View.Players[0].Name == "" {
		t.Fatalf("expected the two bots with names nearby, got %+v", first.View.Players)
	}
	if len(first.View.Objects) == 0 {
		t.Fatal("no food or health packs in view")
	}
	if first.View.Status.Mode != "local" || first.View.Status.Region == "" {
		t.Fatalf("status %+v", first.View.Status)
	}
	start := first.View.Self

	tc.send(`{"type":"input","move":[1,0]}`)
	f := tc.until(l, 200, func(f frame) bool { return f.Type == "view" && f.View.Self.X != start.X })
	if f.View.Self.X <= start.X || f.View.Self.Y != start.Y {
		t.Fatalf("moved from (%d,%d) to (%d,%d), want straight right", start.X, start.Y, f.View.Self.X, f.View.Self.Y)
	}
	if len(f.Maps) != 0 {
		t.Fatal("maps sent again without a region change")
	}
}

func TestServerChat(t *testing.T) {
	l, _, hs := newTestServer(t, Options{})
	tc := dial(t, hs)
	tc.send(`{"type":"chat","text":"hello world"}`)
	tc.until(l, 100, func(f frame) bool {
		for _, m := range f.View.Messages {
			if m.Kind == "chat" && m.Text == "hello world" && m.From == "Tester" {
				return true
			}
		}
		return false
	})
	// Each message reaches the page once.
	seen := map[uint64]int{}
	for i := 0; i < 5; i++ {
		for _, m := range tc.mustRead().View.Messages {
			seen[m.Seq]++
		}
	}
	for seq, n := range seen {
		if n > 1 {
			t.Fatalf("message %d sent %d times", seq, n)
		}
	}
}

func TestServerRejectsMalformedMessages(t *testing.T) {
	_, _, hs := newTestServer(t, Options{})
	tc := dial(t, hs)
	for _, bad := range []string{`{not json`, `{"type":"input","move":[5,5]}`, `{"type":"warp"}`} {
		tc.send(bad)
		f := tc.until(nil, 100, func(f frame) bool { return f.Type == "error" })
		if f.Error == "" {
			t.Fatalf("empty error for %s", bad)
		}
	}
	// The connection still works.
	if f := tc.until(nil, 10, func(f frame) bool { return f.Type == "view" }); f.View.Self.ID != "me" {
		t.Fatalf("view after errors: %+v", f)
	}
}

func TestServerClosesOnOversizedMessage(t *testing.T) {
	_, _, hs := newTestServer(t, Options{})
	tc := dial(t, hs)
	tc.send(`{"type":"chat","text":"` + strings.Repeat("a", MaxClientMessageBytes) + `"}`)
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		_, err = tc.read()
	}
	if got := websocket.CloseStatus(err); got != websocket.StatusMessageTooBig {
		t.Fatalf("close status %v (%v), want %v", got, err, websocket.StatusMessageTooBig)
	}
	// The server survives and serves the next page.
	tc2 := dial(t, hs)
	if f := tc2.mustRead(); f.Type != "hello" {
		t.Fatalf("second connection got %+v", f)
	}
}

func TestServerClosesAfterTooManyBadMessages(t *testing.T) {
	_, _, hs := newTestServer(t, Options{MaxBadMessages: 3})
	tc := dial(t, hs)
	for i := 0; i < 3; i++ {
		tc.send(`{"type":"nope"}`)
	}
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		_, err = tc.read()
	}
	if got := websocket.CloseStatus(err); got != websocket.StatusPolicyViolation {
		t.Fatalf("close status %v (%v), want policy violation", got, err)
	}
}

func TestServerRejectsForeignHostAndOrigin(t *testing.T) {
	_, _, hs := newTestServer(t, Options{})
	req, _ := http.NewRequest("GET", hs.URL+"/", nil)
	req.Host = "evil.example:8080"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign Host got %d", resp.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, resp, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Origin": []string{"http://evil.example"}},
	})
	if err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("cross-origin WebSocket: err=%v resp=%v", err, resp)
	}
}

func TestServerServesPage(t *testing.T) {
	_, _, hs := newTestServer(t, Options{})
	for path, want := range map[string]string{"/": "<canvas id=\"world\"", "/app.js": "new WebSocket", "/style.css": "#minimap", "/healthz": "ok"} {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		buf := new(strings.Builder)
		_, _ = io.Copy(buf, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(buf.String(), want) {
			t.Fatalf("%s: status %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
}

func TestServeShutsDownAndClosesPages(t *testing.T) {
	l, err := NewLocalSession(LocalOptions{Config: testConfig()})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewServer(l, Options{ViewInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx, ln) }()

	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	c, _, err := websocket.Dial(dctx, "ws://"+ln.Addr().String()+"/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	tc := &testClient{t, c}
	tc.mustRead()
	cancel()
	for err == nil {
		_, err = tc.read()
	}
	if got := websocket.CloseStatus(err); got != websocket.StatusGoingAway {
		t.Fatalf("page closed with %v (%v), want going away", got, err)
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
}
