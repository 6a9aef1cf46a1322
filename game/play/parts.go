package play

import (
	"context"
	"sync"
)

// A Peer is a composition of parts, each owning its state (under its own
// lock) and its goroutines:
//
//	gameLoop     loop.go     the avatar, the tick, the page's or the bot's input, the other players in view
//	objectCache  objects.go  the region objects around the player: loads, updates, regrowth, eats and pick-ups
//	social       social.go   chat topics, player cards, chat lines and whispers
//	fights       fight.go    the fight protocol's two sides, over a pure decision (decideDefence) and duel.go
//	saves        account.go  the character on the account server: periodic saves and the save on exit
//	latencyProbe status.go   the round trip to the region's coordinator, for the status line
//
// The Peer starts them in that order's reverse dependency (the position
// service first, the game loop last) and stops them the other way round,
// so that no part runs while a part it calls into is stopped.
//
// Locks: a part's own lock may be held while taking the game loop's (the
// avatar) or the message log's; the game loop's while taking the message
// log's; the message log's is taken last. No part holds its lock while
// calling another part that takes its own.

// part is one piece of the runtime with goroutines of its own.
type part interface {
	// start starts the part's loops and handlers.
	start()
	// stop stops them and returns once every goroutine the part started
	// has returned. Safe without start and more than once.
	stop()
}

// lifetime is one part's goroutines and the context that bounds them.
type lifetime struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex // orders spawn against stop
	wg     sync.WaitGroup
}

func newLifetime() lifetime {
	ctx, cancel := context.WithCancel(context.Background())
	return lifetime{ctx: ctx, cancel: cancel}
}

// spawn runs f on a goroutine that stop waits for; once stop has begun it
// runs nothing and reports false.
func (l *lifetime) spawn(f func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return false
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
	return true
}

// enter counts a goroutine someone else started (a stream handler) until
// its leave; once stop has begun it reports false and counts nothing.
func (l *lifetime) enter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return false
	}
	l.wg.Add(1)
	return true
}

// leave ends what enter counted.
func (l *lifetime) leave() { l.wg.Done() }

// end cancels the context and waits for every goroutine spawned.
func (l *lifetime) end() {
	l.mu.Lock()
	l.cancel()
	l.mu.Unlock()
	l.wg.Wait()
}
