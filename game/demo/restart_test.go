package demo

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/node/await"
)

// failureLog records the warnings and errors of a run.
type failureLog struct {
	mu    sync.Mutex
	lines []string
}

func (f *failureLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (f *failureLog) Handle(_ context.Context, r slog.Record) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	line := r.Message
	r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
	f.lines = append(f.lines, line)
	return nil
}
func (f *failureLog) WithAttrs([]slog.Attr) slog.Handler { return f }
func (f *failureLog) WithGroup(string) slog.Handler      { return f }

func (f *failureLog) matching(sub string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, l := range f.lines {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return out
}

// TestCtrlCSavesTheCharacter stops a demo the way Ctrl-C does (Close),
// after the player moved and ate, and starts it again on the same data
// dir: every player saved on the way out without a failure (with saves
// every 100 ms, so that some are in flight at the stop), and the
// character the player gets back is the one saved at the stop.
func TestCtrlCSavesTheCharacter(t *testing.T) {
	dir := t.TempDir()
	logs := &failureLog{}
	start := func() *Demo {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		d, err := Start(ctx, Config{Bots: 4, HTTP: "127.0.0.1:0", DataDir: dir, SaveEvery: 100 * time.Millisecond, Logger: slog.New(logs)})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := start()
	human := d.Player
	spot := game.Vec{}
	human.With(func(av *play.Avatar) {
		// Somewhere else than where the demo starts, and fed.
		rc := av.Region()
		w := av.World()
		for dy := int32(0); dy < w.Config().RegionUnits(); dy += game.TileUnits {
			p := game.Vec{X: int32(rc.X)*w.Config().RegionUnits() + 5*game.TileUnits + game.TileUnits/2, Y: int32(rc.Y)*w.Config().RegionUnits() + dy + game.TileUnits/2}
			if av.Place(p) {
				spot = p
				break
			}
		}
		av.Feed(3)
	})
	if spot == (game.Vec{}) {
		t.Fatal("no open ground to move the player to")
	}
	// Play on, saving all the while: two periodic saves after the move
	// (saves are one at a time, so the second began after it) show the
	// save loops running with the new state when the stop comes.
	moved := savedVersion(t, d, "Wanderer")
	await.Until(t, 30*time.Second, "two saves of the player after the move", func() bool {
		return savedVersion(t, d, "Wanderer") >= moved+2
	})
	if err := d.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if failed := logs.matching("saving the character"); len(failed) > 0 {
		t.Fatalf("saves failed at the stop: %q", failed)
	}
	saved := storedCharacter(t, dir, "Wanderer")
	if saved.X != int64(spot.X) || saved.Y != int64(spot.Y) || saved.Score < 3 {
		t.Fatalf("saved %+v; the player stood at %+v with a score of 3 or more", saved, spot)
	}

	d = start()
	defer d.Close()
	got := d.Player.Player()
	if int64(got.Pos.X) != saved.X || int64(got.Pos.Y) != saved.Y || int64(got.Score) != saved.Score || int64(got.Skill) != saved.Experience {
		t.Fatalf("loaded %+v, saved %+v", got, saved)
	}
	// Hunger and health may have moved by one metabolism step since the
	// login restored them.
	if d := int64(got.Hunger) - saved.Hunger; d < 0 || d > 1 {
		t.Errorf("hunger loaded %d, saved %d", got.Hunger, saved.Hunger)
	}
	if d := int64(got.Health) - saved.Health; d < -1 || d > 1 {
		t.Errorf("health loaded %d, saved %d", got.Health, saved.Health)
	}
}

// savedVersion reads the version of name's character in a running
// demo's account store: 0 before its first save, which a fresh demo
// has not made yet when Start returns.
func savedVersion(t *testing.T, d *Demo, name string) int64 {
	t.Helper()
	ctx := context.Background()
	a, err := d.store.AccountByName(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.store.LoadCharacter(ctx, a.ID)
	if errors.Is(err, accounts.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return c.Version
}

// storedCharacter reads name's character straight from the demo's
// account store.
func storedCharacter(t *testing.T, dir, name string) accounts.Character {
	t.Helper()
	ctx := context.Background()
	store, err := accounts.OpenStore(ctx, "", filepath.Join(dir, "accounts"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a, err := store.AccountByName(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	c, err := store.LoadCharacter(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
