package play

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/game"
)

// saves keeps the player's character on the account server: restored at
// login, saved periodically by its loop, one save at a time, and once more
// when the peer stops (saveOnExit), recognising a save whose answer was
// lost.
type saves struct {
	acct  *accounts.Client
	httpc *http.Client // the account server's
	loop  *gameLoop
	every time.Duration
	log   *slog.Logger
	life  lifetime

	// mu serializes saves and guards what they leave: the character last
	// loaded or saved (for its version), and the saves since the last
	// answered one that got no answer (any may have been stored).
	mu        sync.Mutex
	character accounts.Character
	unacked   []accounts.Character
}

// login logs in on the account server with the token bound to id
// (registering first if a allows and needs it), loads the saved character
// and restores it into av. It returns the account's name as registered.
// On an error the HTTP client is still returned, so that its idle
// connections can be closed.
func login(ctx context.Context, a Account, id peer.ID, av *Avatar, log *slog.Logger) (*saves, *http.Client, string, error) {
	cl, hc, name, err := Login(ctx, a, id)
	if err != nil {
		return nil, hc, "", fmt.Errorf("play: %w", err)
	}
	ch, err := cl.LoadCharacter(ctx)
	if err != nil {
		return nil, hc, "", fmt.Errorf("play: %w", err)
	}
	sv := &saves{acct: cl, httpc: hc, log: log, life: newLifetime(), character: ch}
	if ch.Version == 0 {
		log.Info("logged in; new character", "user", a.User)
		return sv, hc, name, nil
	}
	av.Restore(int32(min(ch.Health, game.MaxHealth)), int32(min(ch.Hunger, game.MaxHunger)), int32(min(ch.Score, 1<<30)), int32(min(ch.Experience, game.MaxSkill)))
	pos := game.Vec{X: int32(clamp64(ch.X, 0, 1<<30)), Y: int32(clamp64(ch.Y, 0, 1<<30))}
	if !av.Place(pos) {
		if rc, ok := parseRegion(ch.Region); ok {
			av.PlaceInRegion(rc)
		}
	}
	log.Info("logged in; character restored", "user", a.User, "region", av.Region(), "health", ch.Health, "score", ch.Score)
	return sv, hc, name, nil
}

func clamp64(v, lo, hi int64) int64 { return max(lo, min(v, hi)) }

// parseRegion reads "x,y" (game.RegionCoord.String).
func parseRegion(s string) (game.RegionCoord, bool) {
	xs, ys, ok := strings.Cut(s, ",")
	if !ok {
		return game.RegionCoord{}, false
	}
	x, err1 := strconv.Atoi(xs)
	y, err2 := strconv.Atoi(ys)
	if err1 != nil || err2 != nil {
		return game.RegionCoord{}, false
	}
	return game.RegionCoord{X: x, Y: y}, true
}

func (sv *saves) start() { sv.life.spawn(sv.saveLoop) }

// stop ends the periodic saves; a save in flight finishes first.
func (sv *saves) stop() { sv.life.end() }

// save stores the character's current state, one save at a time, based on
// the version the last save (or the login) left. A save whose answer never
// came back (a timeout, a dropped connection) may still have been stored;
// the next save that the server refuses as based on an old version then
// loads the stored character, and if it is one of those saves, goes on
// from its version: a peer's saves never conflict with each other.
func (sv *saves) save(ctx context.Context) error {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	ch := sv.character
	sv.loop.with(func(av *Avatar) {
		self := av.Player()
		ch.Region = av.Region().String()
		ch.X, ch.Y = int64(self.Pos.X), int64(self.Pos.Y)
		ch.Health, ch.Hunger = int64(max(self.Health, 0)), int64(self.Hunger)
		ch.Score, ch.Experience = int64(self.Score), int64(self.Skill)
	})
	v, err := sv.acct.SaveCharacter(ctx, ch)
	if errors.Is(err, accounts.ErrConflict) && len(sv.unacked) > 0 {
		stored, lerr := sv.acct.LoadCharacter(ctx)
		if lerr == nil && sv.storedUnacked(stored) {
			sv.log.Info("a save whose answer was lost had been stored; going on from it", "version", stored.Version)
			ch.Version = stored.Version
			v, err = sv.acct.SaveCharacter(ctx, ch)
		}
	}
	if err != nil {
		var api *accounts.APIError
		if !errors.As(err, &api) {
			if len(sv.unacked) == maxUnacked {
				sv.unacked = sv.unacked[1:]
			}
			sv.unacked = append(sv.unacked, ch)
		}
		return err
	}
	sv.unacked = sv.unacked[:0]
	ch.Version = v
	sv.character = ch
	return nil
}

// maxUnacked bounds the saves without an answer a peer remembers.
const maxUnacked = 8

// storedUnacked reports whether the stored character is one of the saves
// that got no answer, stored on top of the version it was based on.
// Caller holds sv.mu.
func (sv *saves) storedUnacked(stored accounts.Character) bool {
	for _, u := range sv.unacked {
		if stored.Version == u.Version+1 && sameCharacter(stored, u) {
			return true
		}
	}
	return false
}

// sameCharacter reports whether two characters hold the same state
// (versions and save times aside).
func sameCharacter(a, b accounts.Character) bool {
	return a.Region == b.Region && a.X == b.X && a.Y == b.Y && a.Health == b.Health && a.Hunger == b.Hunger &&
		a.Score == b.Score && a.Experience == b.Experience && slices.Equal(a.Inventory, b.Inventory)
}

// saveOnExit saves the character once the peer has stopped, retrying
// what may pass on a second try (no answer, a busy or failing server)
// until budget runs out: the state at Ctrl-C is the one to keep.
func (sv *saves) saveOnExit(budget time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	wait := 250 * time.Millisecond
	for {
		err := sv.save(ctx)
		if err == nil || !retryableSave(err) {
			return err
		}
		sv.log.Info("saving the character on exit: trying again", "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 4*time.Second)
	}
}

// retryableSave reports whether a failed save may pass if sent again: it
// got no answer, or the server was busy or failing. A refusal (a conflict
// with another session's save, a bad or out-of-bounds character, a lost
// login) stays one.
func retryableSave(err error) bool {
	var api *accounts.APIError
	if !errors.As(err, &api) {
		return true
	}
	return api.Status >= 500 || errors.Is(err, accounts.ErrRateLimited)
}

func (sv *saves) saveLoop() {
	// Start at a random point of the period, so that peers started together
	// (a demo) do not all save at once.
	first := time.NewTimer(rand.N(sv.every))
	select {
	case <-sv.life.ctx.Done():
		first.Stop()
		return
	case <-first.C:
	}
	t := time.NewTicker(sv.every)
	defer t.Stop()
	for {
		select {
		case <-sv.life.ctx.Done():
			return
		case <-t.C:
			// Not cancelled when the peer stops: a save cut off in flight
			// may be stored without its answer, and the save on exit waits
			// for this one anyway.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(sv.life.ctx), 10*time.Second)
			if err := sv.save(ctx); err != nil && sv.life.ctx.Err() == nil {
				sv.log.Warn("saving the character failed", "err", err)
			}
			cancel()
		}
	}
}
