package demo

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/libp2p/go-libp2p/core/crypto"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node/await"
	"github.com/overworld-p2p/overworld/node/mirror"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// refusingMirror is a mirror's client WebSocket that turns every login
// away with a fatal error frame of code, and counts the logins.
func refusingMirror(t *testing.T, code string) (url string, logins *atomic.Int32) {
	t.Helper()
	logins = &atomic.Int32{}
	frame, err := proto.Marshal(&mirrorpb.ServerFrame{Body: &mirrorpb.ServerFrame_Error{Error: &mirrorpb.Error{
		Code: code, Message: "refused by the test", Fatal: true,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		logins.Add(1)
		_ = c.Write(r.Context(), websocket.MessageBinary, frame)
		_ = c.Close(websocket.StatusNormalClosure, "")
	}))
	t.Cleanup(hs.Close)
	return "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws", logins
}

// TestBotLoginGoesToTheNextMirror: a bot whose mirror turns it away as
// not ready, or dropped from the group, tries the next mirror (round after
// round for a mirror not ready yet); any other refusal ends the login.
func TestBotLoginGoesToTheNextMirror(t *testing.T) {
	key, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	notReady, notReadyLogins := refusingMirror(t, "not_ready")
	dropped, droppedLogins := refusingMirror(t, "mirror_dropped")
	badToken, badTokenLogins := refusingMirror(t, "bad_token")
	md := &MirrorDemo{d: &Demo{log: slog.New(slog.DiscardHandler)}, MirrorURLs: []string{badToken, notReady, dropped}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// From mirror 2: 2 and 3 send it on, 1 refuses for good.
	_, err = md.dialReady(ctx, 1, key, "token")
	var me *mirror.MirrorError
	if !errors.As(err, &me) || me.Code != "bad_token" {
		t.Fatalf("login from mirror 2: %v, want mirror 1's bad_token", err)
	}
	if n, d, b := notReadyLogins.Load(), droppedLogins.Load(), badTokenLogins.Load(); n != 1 || d != 1 || b != 1 {
		t.Fatalf("logins at mirrors 1, 2, 3: %d, %d, %d; want one each", b, n, d)
	}

	// Two mirrors that send it on: round after round, until the context
	// ends.
	md.MirrorURLs = []string{notReady, dropped}
	rounds, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() {
		_, err := md.dialReady(rounds, 0, key, "token")
		done <- err
	}()
	await.Until(t, 30*time.Second, "three rounds of logins at both mirrors", func() bool {
		return notReadyLogins.Load() >= 4 && droppedLogins.Load() >= 4
	})
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("login while no mirror is ready: %v, want the context's end", err)
	}
}
