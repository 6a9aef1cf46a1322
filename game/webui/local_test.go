package webui

import (
	"strings"
	"testing"

	"github.com/overworld-p2p/overworld/game"
)

func TestLocalSessionEatAndMessages(t *testing.T) {
	l, err := NewLocalSession(LocalOptions{Config: testConfig(), PlayerID: "me", Name: "Solo"})
	if err != nil {
		t.Fatal(err)
	}
	l.With(func(w *game.World) {
		self, _ := w.Player("me")
		for _, e := range w.Objects(w.RegionOf(self.Pos)) {
			if e.Object.Kind == game.ObjectFood && w.Teleport("me", e.Pos) {
				return
			}
		}
		t.Fatal("no reachable food in the home region")
	})
	if err := l.Input(Control{Eat: true}); err != nil {
		t.Fatal(err)
	}
	l.Step()
	v := l.Snapshot()
	if v.Self.Score != 1 {
		t.Fatalf("score %d after eating", v.Self.Score)
	}
	if last := v.Messages[len(v.Messages)-1]; last.Kind != "event" || !strings.Contains(last.Text, "ate") {
		t.Fatalf("last message %+v", last)
	}
	// Eat is one-shot: the next tick does not eat again.
	l.Step()
	if l.Snapshot().Self.Score != 1 {
		t.Fatal("eat repeated without a new input")
	}

	if err := l.Chat("psst", "Ada"); err != nil {
		t.Fatal(err)
	}
	if err := l.Chat("\x01", ""); err == nil {
		t.Fatal("accepted a control character")
	}
	if err := l.Input(Control{MoveX: 3}); err == nil {
		t.Fatal("accepted move 3")
	}
	v = l.Snapshot()
	if last := v.Messages[len(v.Messages)-1]; last.Kind != "whisper" || last.To != "Ada" || last.Seq != uint64(len(v.Messages)) {
		t.Fatalf("whisper %+v", last)
	}
	for i := 0; i < 2*maxMessages; i++ {
		l.Chat("spam", "")
	}
	if v := l.Snapshot(); len(v.Messages) != maxMessages || v.Messages[maxMessages-1].Seq != v.Messages[0].Seq+maxMessages-1 {
		t.Fatalf("message ring holds %d, seqs %d..%d", len(v.Messages), v.Messages[0].Seq, v.Messages[len(v.Messages)-1].Seq)
	}
}

func TestLocalSessionViewCoversNeighbours(t *testing.T) {
	l, err := NewLocalSession(LocalOptions{Config: testConfig(), Bots: 3})
	if err != nil {
		t.Fatal(err)
	}
	v := l.Snapshot()
	if len(v.Regions) < 4 || len(v.Regions) > 9 {
		t.Fatalf("%d regions in view", len(v.Regions))
	}
	for _, r := range v.Regions {
		m, ok := l.Map(game.RegionCoord{X: r.X, Y: r.Y})
		if !ok || len(m.Tiles) != m.Size*m.Size {
			t.Fatalf("map of %d,%d: %v %d", r.X, r.Y, ok, len(m.Tiles))
		}
	}
	if _, ok := l.Map(game.RegionCoord{X: -1, Y: 0}); ok {
		t.Fatal("map outside the world")
	}
	if len(v.Players) != 3 {
		t.Fatalf("%d bots visible, want 3", len(v.Players))
	}
}
