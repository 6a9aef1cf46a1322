package master

import (
	"context"
	"slices"
	"testing"
	"time"
)

func keepAliveName(poll bool) string {
	if poll {
		return "poll"
	}
	return "push"
}

// eachMode runs f for a game the master polls and one that pushes.
func eachMode(t *testing.T, f func(t *testing.T, poll bool)) {
	for _, poll := range []bool{true, false} {
		t.Run(keepAliveName(poll), func(t *testing.T) { f(t, poll) })
	}
}

func TestRegisteredGameIsQueryableAtOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() *Store) {
		eachMode(t, func(t *testing.T, poll bool) {
			tm := startMaster(t, open(), testConfig(), "")
			id := "queryable-" + keepAliveName(poll)
			start := time.Now()
			tr := startRegistrar(t, tm.url, testGame(id, 2), poll)
			tr.waitSend(t, 0, accepted)
			took := time.Since(start)

			// The master stored the game before it answered the
			// registration: it is listed now, not after a round.
			c, err := NewClient(tm.url, nil)
			if err != nil {
				t.Fatal(err)
			}
			g, err := c.Game(context.Background(), id)
			if err != nil {
				t.Fatalf("game %s not queryable right after its registration: %v", id, err)
			}
			want := testGame(id, 2)
			if !sameInfo(g.GameInfo, want) || g.KeepAlive != keepAliveName(poll) || g.Free != 14 || g.Missed != 0 {
				t.Fatalf("stored %+v, registered %+v (keepalive %s)", g, want, keepAliveName(poll))
			}
			list, err := c.Games(context.Background(), Filter{World: "meadow", Mode: "ffa", MinFree: 1})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(list.Games, func(g Game) bool { return g.ID == id }) {
				t.Fatalf("filtered query misses %s: %+v", id, list)
			}
			t.Logf("%s game queryable %v after its registrar started", keepAliveName(poll), took)
		})
	})
}

func TestKilledAuthorityIsDroppedAfterThreeIntervals(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() *Store) {
		eachMode(t, func(t *testing.T, poll bool) {
			tm := startMaster(t, open(), testConfig(), "")
			id := "doomed-" + keepAliveName(poll)
			tr := startRegistrar(t, tm.url, testGame(id, 2), poll)
			tr.waitSend(t, 0, accepted)
			// Live through a round in which the master heard the game.
			first := tm.rounds.waitFor(t, 0, "the game listed", func(r observedRound) bool {
				_, ok := r.games[id]
				return ok && (!poll || r.Answers > 0)
			})

			before := tm.started.Load()
			tr.kill()
			after := tm.started.Load()

			dropped := tm.rounds.waitFor(t, first.Round, "the game dropped", func(r observedRound) bool {
				return slices.Contains(r.Dropped, id)
			})
			// The kill fell within rounds before..after; three misses
			// (±1) later the game goes, and not a round earlier.
			if dropped.Round < before+2 || dropped.Round > after+4 {
				t.Fatalf("killed during rounds %d-%d, dropped at round %d: want 3±1 intervals", before, after, dropped.Round)
			}
			for _, r := range tm.rounds.all() {
				if r.Round >= first.Round && r.Round < dropped.Round {
					if _, ok := r.games[id]; !ok {
						t.Fatalf("game missing after round %d, before its drop at round %d", r.Round, dropped.Round)
					}
				}
			}
			if _, err := tm.store.Game(context.Background(), id); err == nil {
				t.Fatal("dropped game still in the store")
			}
			t.Logf("killed during round %d (%d when the kill finished), dropped at round %d: %d intervals", before, after, dropped.Round, dropped.Round-before)
		})
	})
}

func TestMirrorChangeShowsWithinOneInterval(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() *Store) {
		t.Run("poll", func(t *testing.T) {
			tm := startMaster(t, open(), testConfig(), "")
			id := "growing-poll"
			tr := startRegistrar(t, tm.url, testGame(id, 2), true)
			tr.waitSend(t, 0, accepted)
			tm.rounds.waitFor(t, 0, "a poll answered", func(r observedRound) bool { return r.Answers > 0 })

			for _, step := range []struct {
				name    string
				change  func(*GameInfo)
				mirrors int
			}{
				{"mirror added", func(g *GameInfo) { g.Mirrors = testGame(id, 3).Mirrors }, 3},
				{"mirror removed", func(g *GameInfo) { g.Mirrors = testGame(id, 1).Mirrors }, 1},
			} {
				if err := tr.Update(step.change); err != nil {
					t.Fatal(err)
				}
				// Every round begun after the change polls after it.
				begun := tm.started.Load()
				seen := tm.rounds.waitFor(t, begun, step.name, func(r observedRound) bool {
					return len(r.games[id].Mirrors) == step.mirrors
				})
				if seen.Round > begun+1 {
					t.Fatalf("%s: change made while round %d ran, shown only after round %d", step.name, begun, seen.Round)
				}
			}
		})
		t.Run("push", func(t *testing.T) {
			tm := startMaster(t, open(), testConfig(), "")
			id := "growing-push"
			tr := startRegistrar(t, tm.url, testGame(id, 2), false)
			tr.waitSend(t, 0, accepted)
			n := tr.sendCount()
			if err := tr.Update(func(g *GameInfo) { g.Mirrors = testGame(id, 3).Mirrors }); err != nil {
				t.Fatal(err)
			}
			_, version := tr.Info()
			// The change goes out with the next push (at most one push
			// already in flight goes before it), not at the next
			// periodic one …
			i := tr.waitSend(t, n, func(s sendRecord) bool { return s.err == nil && s.version >= version })
			if i > n+1 {
				t.Fatalf("change to version %d went out with push %d; %d pushes after the change carried the old version", version, i, i-n)
			}
			// … and the master shows it as soon as it accepted it.
			g, err := tm.store.Game(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if len(g.Mirrors) != 3 {
				t.Fatalf("pushed change accepted but the master lists %d mirrors", len(g.Mirrors))
			}
		})
	})
}

func TestGamesComeBackAfterMasterRestart(t *testing.T) {
	eachStore(t, func(t *testing.T, open func() *Store) {
		eachMode(t, func(t *testing.T, poll bool) {
			id := "phoenix-" + keepAliveName(poll)
			tm := startMaster(t, open(), testConfig(), "")
			tr := startRegistrar(t, tm.url, testGame(id, 2), poll)
			tr.waitSend(t, 0, accepted)
			tm.rounds.waitFor(t, 0, "the game heard", func(r observedRound) bool {
				_, ok := r.games[id]
				return ok && (!poll || r.Answers > 0)
			})

			// Restart on the same store: the game is there at once and
			// stays through more rounds than it takes to drop a game.
			if err := tm.stop(); err != nil {
				t.Fatalf("master stop: %v", err)
			}
			tm2 := startMaster(t, open(), testConfig(), tm.addr)
			if _, err := tm2.store.Game(context.Background(), id); err != nil {
				t.Fatalf("game lost over a restart with its store: %v", err)
			}
			tm2.rounds.waitFor(t, 5, "five rounds passed", func(observedRound) bool { return true })
			for _, r := range tm2.rounds.all() {
				if _, ok := r.games[id]; !ok {
					for _, r := range tm2.rounds.all() {
						t.Logf("round %+v games %d", r.RoundReport, len(r.games))
					}
					tr.mu.Lock()
					for _, s := range tr.sends {
						t.Logf("send %+v", s)
					}
					tr.mu.Unlock()
					t.Fatalf("restarted master lost the game at round %d", r.Round)
				}
			}

			// Restart on an empty store: the registrar notices and
			// registers again.
			if err := tm2.stop(); err != nil {
				t.Fatalf("master stop: %v", err)
			}
			tm3 := startMaster(t, mustOpen(t, "sqlite:"+t.TempDir()+"/empty.db"), testConfig(), tm.addr)
			back := tm3.rounds.waitFor(t, 1, "the game registered again", func(r observedRound) bool {
				_, ok := r.games[id]
				return ok
			})
			// Push: within ¾ interval; poll: after 2 intervals without a
			// poll, counted from the old master's last one.
			if back.Round > 4 {
				t.Fatalf("game back only after round %d of the new master", back.Round)
			}
			t.Logf("%s game back on an empty master after round %d", keepAliveName(poll), back.Round)
		})
	})
}

func TestKeepAliveSchedule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	iv := time.Second
	ok := RegisterResponse{KeepAlive: KeepAlivePush, IntervalMS: iv.Milliseconds(), MaxMissed: 3}

	t.Run("push", func(t *testing.T) {
		k := newKeepAlive(false)
		if !k.due().IsZero() || k.reason() != reasonRegister {
			t.Fatalf("unregistered: due %v (%s), want at once", k.due(), k.reason())
		}
		k.sent(t0, 1, ok, nil)
		if got := k.due(); !got.Equal(t0.Add(750 * time.Millisecond)) {
			t.Fatalf("push due %v after registering, want ¾ interval", got.Sub(t0))
		}
		k.changed(2)
		if got := k.due(); !got.Equal(t0.Add(250*time.Millisecond)) || k.reason() != reasonChange {
			t.Fatalf("change due %v (%s), want ¼ interval after the last push", got.Sub(t0), k.reason())
		}
		k.sent(t0.Add(250*time.Millisecond), 2, ok, nil)
		if got := k.due(); !got.Equal(t0.Add(time.Second)) || k.reason() != reasonPush {
			t.Fatalf("after the change went: due %v (%s)", got.Sub(t0), k.reason())
		}
	})
	t.Run("poll watchdog", func(t *testing.T) {
		k := newKeepAlive(true)
		k.polled(t0) // a poll before any registration (an old run's) does not count
		if !k.due().IsZero() {
			t.Fatal("a poll before registering stopped the registration")
		}
		pollOK := ok
		pollOK.KeepAlive = KeepAlivePoll
		k.sent(t0, 1, pollOK, nil)
		k.changed(2) // polls carry changes; no send
		if got := k.due(); !got.Equal(t0.Add(2 * time.Second)) {
			t.Fatalf("watchdog due %v, want 2 intervals", got.Sub(t0))
		}
		k.polled(t0.Add(time.Second))
		if got := k.due(); !got.Equal(t0.Add(3*time.Second)) || k.reason() != reasonWatchdog {
			t.Fatalf("after a poll: due %v (%s)", got.Sub(t0), k.reason())
		}
	})
	t.Run("backoff", func(t *testing.T) {
		k := newKeepAlive(false)
		k.sent(t0, 1, ok, nil)
		now := t0
		var waits []time.Duration
		for range 6 {
			waits = append(waits, k.sent(now, 1, RegisterResponse{}, errCut))
			now = k.due()
		}
		want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
		if !slices.Equal(waits, want) {
			t.Fatalf("backoff %v, want %v", waits, want)
		}
		if k.reason() != reasonRetry {
			t.Fatalf("reason %s while failing", k.reason())
		}
		k.sent(now, 1, ok, nil)
		if k.failing || k.backoff != 0 {
			t.Fatal("a success did not end the backoff")
		}
		if k.sent(now, 1, RegisterResponse{}, &APIError{Status: 401, Code: CodeUnauthorized}) != time.Second {
			t.Fatal("a refused token is retried before an interval")
		}
	})
}
