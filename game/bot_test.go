package game

import "testing"

// TestBotWorkload runs bots for ten simulated minutes and checks that the
// workload has the SimMud shape: region changes, eat and fight attempts at
// about the configured rates. The counts come from simulated ticks, not a
// wall clock, so they are exact for a given seed.
func TestBotWorkload(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RegionsX, cfg.RegionsY = 3, 3
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	bots := make([]*Bot, n)
	for i := range bots {
		id := PlayerID(rune('a' + i))
		w.AddPlayer(id, "bot")
		bots[i] = NewBot(cfg, id, 11, DefaultBotPace())
	}
	minutes := 10
	steps := minutes * 60 * cfg.TickRate
	var eats, fights, changes int
	for s := 0; s < steps; s++ {
		var in []Input
		for _, b := range bots {
			obs, _ := w.BotObserve(b.ID())
			i := b.Next(obs)
			if i.Eat && obs.Self.Alive {
				eats++
			}
			if i.Fight {
				fights++
			}
			in = append(in, i)
		}
		for _, e := range w.Step(in) {
			if e.Kind == EventRegionChanged {
				changes++
			}
		}
	}
	// About one eat and one fight attempt every 5 s per bot: 120 each per
	// bot in ten minutes. Eat inputs also repeat while a bot stands at its
	// food, so allow more above.
	wantAttempts := n * minutes * 60 / 5
	if fights < wantAttempts/2 || fights > wantAttempts*2 {
		t.Errorf("%d fight attempts, expected about %d", fights, wantAttempts)
	}
	if eats < wantAttempts/2 {
		t.Errorf("%d eat attempts, expected at least about %d", eats, wantAttempts)
	}
	// A trip to a neighbour about every 40 s, plus random-walk crossings.
	if wantTrips := n * minutes * 60 / 40; changes < wantTrips/2 {
		t.Errorf("%d region changes, expected at least about %d", changes, wantTrips)
	}
	t.Logf("%d bots, %d min: %d eat inputs, %d fight attempts, %d region changes", n, minutes, eats, fights, changes)
}

func TestBotIsDeterministic(t *testing.T) {
	cfg := DefaultConfig()
	obs := BotObservation{Self: Player{ID: "a", Alive: true, Pos: Vec{5000, 5000}}}
	b1, b2 := NewBot(cfg, "a", 3, DefaultBotPace()), NewBot(cfg, "a", 3, DefaultBotPace())
	for i := 0; i < 2000; i++ {
		obs.Tick = uint64(i)
		if i%7 == 0 {
			obs.Self.Pos.X += 30
		}
		if x, y := b1.Next(obs), b2.Next(obs); x != y {
			t.Fatalf("tick %d: %+v vs %+v", i, x, y)
		}
	}
}
