package play

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	ping "github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/game"
)

// login logs in on the account server with the token bound to this peer's
// ID (registering first if allowed and needed) and restores the saved
// character.
func (p *Peer) login(ctx context.Context) error {
	a := p.cfg.Account
	cl, hc, name, err := Login(ctx, *a, p.h.ID())
	p.httpc = hc
	if err != nil {
		return fmt.Errorf("play: %w", err)
	}
	p.acct = cl
	p.cfg.Name = name
	ch, err := cl.LoadCharacter(ctx)
	if err != nil {
		return fmt.Errorf("play: %w", err)
	}
	p.character = ch
	if ch.Version == 0 {
		p.log.Info("logged in; new character", "user", a.User)
		return nil
	}
	p.av.Restore(int32(min(ch.Health, game.MaxHealth)), int32(min(ch.Hunger, game.MaxHunger)), int32(min(ch.Score, 1<<30)), int32(min(ch.Experience, game.MaxSkill)))
	pos := game.Vec{X: int32(clamp64(ch.X, 0, 1<<30)), Y: int32(clamp64(ch.Y, 0, 1<<30))}
	if !p.av.Place(pos) {
		if rc, ok := parseRegion(ch.Region); ok {
			p.av.PlaceInRegion(rc)
		}
	}
	p.log.Info("logged in; character restored", "user", a.User, "region", p.av.Region(), "health", ch.Health, "score", ch.Score)
	return nil
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

// Save stores the character on the account server now.
func (p *Peer) Save(ctx context.Context) error {
	if p.acct == nil {
		return errors.New("save: not logged in")
	}
	return p.save(ctx)
}

// save stores the character's current state, one save at a time, based on
// the version the last save (or the login) left. A save whose answer never
// came back (a timeout, a dropped connection) may still have been stored;
// the next save that the server refuses as based on an old version then
// loads the stored character, and if it is one of those saves, goes on
// from its version: a peer's saves never conflict with each other.
func (p *Peer) save(ctx context.Context) error {
	p.saveMu.Lock()
	defer p.saveMu.Unlock()
	p.mu.Lock()
	self := p.av.Player()
	ch := p.character
	ch.Region = p.av.Region().String()
	ch.X, ch.Y = int64(self.Pos.X), int64(self.Pos.Y)
	ch.Health, ch.Hunger = int64(max(self.Health, 0)), int64(self.Hunger)
	ch.Score, ch.Experience = int64(self.Score), int64(self.Skill)
	p.mu.Unlock()
	v, err := p.acct.SaveCharacter(ctx, ch)
	if errors.Is(err, accounts.ErrConflict) && len(p.unacked) > 0 {
		stored, lerr := p.acct.LoadCharacter(ctx)
		if lerr == nil && p.storedUnacked(stored) {
			p.log.Info("a save whose answer was lost had been stored; going on from it", "version", stored.Version)
			ch.Version = stored.Version
			v, err = p.acct.SaveCharacter(ctx, ch)
		}
	}
	if err != nil {
		var api *accounts.APIError
		if !errors.As(err, &api) {
			if len(p.unacked) == maxUnacked {
				p.unacked = p.unacked[1:]
			}
			p.unacked = append(p.unacked, ch)
		}
		return err
	}
	p.unacked = p.unacked[:0]
	p.mu.Lock()
	ch.Version = v
	p.character = ch
	p.mu.Unlock()
	return nil
}

// maxUnacked bounds the saves without an answer a peer remembers.
const maxUnacked = 8

// storedUnacked reports whether the stored character is one of the saves
// that got no answer, stored on top of the version it was based on.
func (p *Peer) storedUnacked(stored accounts.Character) bool {
	for _, u := range p.unacked {
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
func (p *Peer) saveOnExit(budget time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	wait := 250 * time.Millisecond
	for {
		err := p.save(ctx)
		if err == nil || !retryableSave(err) {
			return err
		}
		p.log.Info("saving the character on exit: trying again", "err", err)
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

func (p *Peer) saveLoop() {
	// Start at a random point of the period, so that peers started together
	// (a demo) do not all save at once.
	first := time.NewTimer(rand.N(p.cfg.SaveEvery))
	select {
	case <-p.ctx.Done():
		first.Stop()
		return
	case <-first.C:
	}
	t := time.NewTicker(p.cfg.SaveEvery)
	defer t.Stop()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
			// Not cancelled when the peer stops: a save cut off in flight
			// may be stored without its answer, and the save on exit waits
			// for this one anyway.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(p.ctx), 10*time.Second)
			if err := p.save(ctx); err != nil && p.ctx.Err() == nil {
				p.log.Warn("saving the character failed", "err", err)
			}
			cancel()
		}
	}
}

// latencyLoop measures the round trip to the coordinator of the player's
// region with libp2p ping, for the status line.
func (p *Peer) latencyLoop() {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		p.mu.Lock()
		rc := p.av.Region()
		p.mu.Unlock()
		coord, _ := p.store.Coordinator(coordOf(rc))
		var rtt time.Duration
		if coord != "" && coord != p.h.ID() {
			ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
			select {
			case r := <-ping.Ping(ctx, p.h, coord):
				if r.Error == nil {
					rtt = r.RTT
				}
			case <-ctx.Done():
			}
			cancel()
		}
		p.mu.Lock()
		p.latency = rtt
		p.mu.Unlock()
		select {
		case <-p.ctx.Done():
			return
		case <-t.C:
		}
	}
}
