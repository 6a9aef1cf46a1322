package demo

import (
	"context"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/webui"
	"github.com/overworld-p2p/overworld/node/await"
	"github.com/overworld-p2p/overworld/node/mirror"
)

// TestEventMirrorDemoKill runs the mirror-mode demo on the event protocol
// (`overworld demo -mode mirror -protocol event`): the page's status shows
// the event protocol and the authority's decisions as the bots eat and
// fight; when mirror 2, the page's, dies (Kill), the page moves to another
// mirror with the character as it was.
func TestEventMirrorDemoKill(t *testing.T) {
	startCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := StartMirror(startCtx, Config{Bots: 4, HTTP: "127.0.0.1:0", Logger: demoLogger(), MirrorProtocol: mirror.ProtocolEvent})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	// The page's view is taken on demand (the web server does so per
	// frame); nothing announces a change.
	poll := func(within time.Duration, what string, cond func(v webui.View) bool) webui.View {
		t.Helper()
		var v webui.View
		if err := await.UntilErr(within, what, func() bool {
			v = d.Page.Snapshot()
			return v.Status.Mirror != nil && cond(v)
		}); err != nil {
			t.Fatalf("%v; status %+v", err, v.Status.Mirror)
		}
		return v
	}
	v := poll(60*time.Second, "the page on mirror 2 with decisions of the event protocol", func(v webui.View) bool {
		m := v.Status.Mirror
		return m.Mirror == 2 && m.Protocol == "event" && m.Decided > 0
	})
	t.Logf("mirror 2's status: %+v", *v.Status.Mirror)
	// The page's player stands still: once the last state has passed the
	// tick it was read at, every mirror has it there.
	before := v.Self
	poll(10*time.Second, "the player's state confirmed", func(w webui.View) bool { return w.Status.Mirror.ConfirmedTick > v.Status.Mirror.LeadingTick })
	d.Kill(1)
	after := poll(60*time.Second, "the page on another mirror", func(v webui.View) bool {
		return v.Status.Mirror.Mirror != 2 && v.Status.Mirror.Protocol == "event" && v.Self.ID == before.ID
	})
	t.Logf("on mirror %d after the kill: %+v (was %+v)", after.Status.Mirror.Mirror, after.Self, before)
	margin := int32(game.TileUnits / 4)
	abs := func(v int32) int32 { return max(v, -v) }
	if after.Self.Score != before.Score || after.Self.Skill != before.Skill || abs(after.Self.X-before.X) > margin || abs(after.Self.Y-before.Y) > margin {
		t.Fatalf("on the new mirror the player is %+v, it was %+v on mirror 2", after.Self, before)
	}
}
