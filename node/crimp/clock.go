package crimp

import (
	"container/heap"
	"sync"
	"time"
)

// Clock is the time source of a driver: the wall clock in production, a
// discrete-event simulated clock in benches and tests.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f once d has passed. On the simulated clock f runs on
	// the goroutine that drives the simulation.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc call.
type Timer interface {
	// Stop cancels the call; it reports whether the call was still pending.
	Stop() bool
}

// WallClock is the real clock.
type WallClock struct{}

// Now returns time.Now().
func (WallClock) Now() time.Time { return time.Now() }

// AfterFunc wraps time.AfterFunc.
func (WallClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// SimClock is a discrete-event clock: time stands still until the owner
// calls Run, which jumps from one scheduled event to the next and runs it.
// Events at the same instant run in the order they were scheduled, so a
// simulation driven only by it (and seeded randomness) is reproducible.
// Callbacks may schedule and stop events; only one goroutine may call Run.
type SimClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    uint64
	events simEvents
}

// NewSimClock returns a simulated clock reading start.
func NewSimClock(start time.Time) *SimClock { return &SimClock{now: start} }

// Now returns the simulated time.
func (c *SimClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f at Now()+d.
func (c *SimClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	ev := &simEvent{at: c.now.Add(max(d, 0)), seq: c.seq, f: f, clock: c}
	heap.Push(&c.events, ev)
	return ev
}

// RunUntil runs every event due at or before t, in time order, then leaves
// the clock at t. It returns how many events ran.
func (c *SimClock) RunUntil(t time.Time) int {
	ran := 0
	for {
		c.mu.Lock()
		if len(c.events) == 0 || c.events[0].at.After(t) {
			if t.After(c.now) {
				c.now = t
			}
			c.mu.Unlock()
			return ran
		}
		ev := heap.Pop(&c.events).(*simEvent)
		ev.index = -1
		if ev.at.After(c.now) {
			c.now = ev.at
		}
		c.mu.Unlock()
		ev.f()
		ran++
	}
}

// RunFor runs the simulation for d of simulated time.
func (c *SimClock) RunFor(d time.Duration) int { return c.RunUntil(c.Now().Add(d)) }

// Pending reports how many events are scheduled.
func (c *SimClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.events)
}

type simEvent struct {
	at    time.Time
	seq   uint64
	f     func()
	index int
	clock *SimClock
}

func (e *simEvent) Stop() bool {
	c := e.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.index < 0 {
		return false
	}
	heap.Remove(&c.events, e.index)
	e.index = -1
	return true
}

type simEvents []*simEvent

func (h simEvents) Len() int { return len(h) }
func (h simEvents) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h simEvents) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *simEvents) Push(x any) {
	e := x.(*simEvent)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *simEvents) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
