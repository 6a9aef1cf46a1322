package demo

import (
	"context"
	"slices"
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
// fight; when the page's mirror dies (Kill), the page moves to another
// mirror with the character as it was. The page's mirror is mirror 2, its
// first choice, unless a loaded machine moved it on (see pageMirror).
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
	v := poll(60*time.Second, "the page on mirror 2 or 3 with decisions of the event protocol", func(v webui.View) bool {
		m := v.Status.Mirror
		return pageMirror(d, m) > 0 && m.Protocol == "event" && m.Decided > 0
	})
	t.Logf("mirror %d's status: %+v", pageMirror(d, v.Status.Mirror)+1, *v.Status.Mirror)
	// The page's player stands still: once the last state has passed the
	// tick it was read at, every mirror has it there.
	before := v.Self
	w := poll(10*time.Second, "the player's state confirmed", func(w webui.View) bool {
		return pageMirror(d, w.Status.Mirror) > 0 && w.Status.Mirror.ConfirmedTick > v.Status.Mirror.LeadingTick
	})
	killed := pageMirror(d, w.Status.Mirror)
	d.Kill(killed)
	after := poll(60*time.Second, "the page on another mirror", func(v webui.View) bool {
		return pageMirror(d, v.Status.Mirror) != killed && v.Status.Mirror.Protocol == "event" && v.Self.ID == before.ID
	})
	t.Logf("on mirror %d after the kill of mirror %d: %+v (was %+v)", pageMirror(d, after.Status.Mirror)+1, killed+1, after.Self, before)
	margin := int32(game.TileUnits / 4)
	abs := func(v int32) int32 { return max(v, -v) }
	if after.Self.Score != before.Score || after.Self.Skill != before.Skill || abs(after.Self.X-before.X) > margin || abs(after.Self.Y-before.Y) > margin {
		t.Fatalf("on the new mirror the player is %+v, it was %+v on mirror %d", after.Self, before, killed+1)
	}
}

// pageMirror is the index in d.MirrorURLs (0: the authority, which the
// demo keeps alive) of the mirror whose status m is, -1 for none. The page
// plays through mirror 2 first, but on a loaded machine it may have moved
// on to mirror 3: the authority drops a mirror that stays silent too long
// (which then rejoins under a new member ID), and a join that reaches the
// authority too late for its last state is undone by the resync that the
// states' mismatch starts ("the player is no longer in the world").
// Mirrors are told apart by their address, which stays.
func pageMirror(d *MirrorDemo, m *webui.MirrorStatus) int {
	if m == nil {
		return -1
	}
	return slices.Index(d.MirrorURLs, m.URL)
}
