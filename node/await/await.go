// Package await is how tests wait: for a process to say something, and for
// a state to hold, each under a deadline that fails the test with what was
// awaited.
//
// Output is the event-driven half. A test hands an Output to a process or
// service as its stdout or log writer; every write wakes the waiters, which
// match what has been written so far against a pattern. Nothing polls and
// nothing sleeps: a test waits exactly as long as the process takes to say
// it is ready.
//
// Until is the half for state that announces nothing (a counter on another
// process's /metrics page, a peer's view of the network). It checks cond,
// and between checks waits a short interval that grows from 1 ms to 50 ms,
// so a state that holds at once costs a millisecond and a long wait costs
// few checks. Inside a testing/synctest bubble the clock is virtual and the
// waits cost no wall time; outside one the deadline is only a hang guard,
// never a claim about how fast the machine is.
package await

import (
	"bytes"
	"regexp"
	"sync"
	"testing"
	"time"
)

// Until checks cond until it holds and fails the test if it does not
// within the given bound. what names the awaited state for the failure.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if err := UntilErr(within, what, cond); err != nil {
		t.Fatal(err)
	}
}

// UntilErr is Until for code that reports instead of failing a test (a
// goroutine, or a network namespace's child process).
func UntilErr(within time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(within)
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return &TimeoutError{What: what, After: within}
		}
		time.Sleep(wait)
		wait = min(2*wait, maxWait)
	}
	return nil
}

// maxWait bounds the interval between two checks: a state is seen at most
// this long after it holds.
const maxWait = 50 * time.Millisecond

// TimeoutError says what was awaited and for how long.
type TimeoutError struct {
	What  string
	After time.Duration
}

func (e *TimeoutError) Error() string {
	return "timed out after " + e.After.String() + " waiting for " + e.What
}

// Output collects what a process writes and wakes the tests that wait for
// a line of it. The zero value is ready to use; it is safe for concurrent
// writers and waiters.
type Output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

// Write appends p and wakes every waiter.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, err := o.buf.Write(p)
	if o.changed != nil {
		close(o.changed)
		o.changed = nil
	}
	return n, err
}

// String returns everything written so far.
func (o *Output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// snapshot returns what was written so far and a channel closed by the
// next write.
func (o *Output) snapshot() (string, <-chan struct{}) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.changed == nil {
		o.changed = make(chan struct{})
	}
	return o.buf.String(), o.changed
}

// Match waits until what was written matches re and returns the match and
// its groups (as regexp.FindStringSubmatch does). It fails the test, with
// everything written, if no match comes within the bound.
func (o *Output) Match(t testing.TB, within time.Duration, re *regexp.Regexp) []string {
	t.Helper()
	m, err := o.MatchErr(within, re)
	if err != nil {
		t.Fatalf("%v; output:\n%s", err, o.String())
	}
	return m
}

// MatchErr is Match for code that reports instead of failing a test.
func (o *Output) MatchErr(within time.Duration, re *regexp.Regexp) ([]string, error) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		text, changed := o.snapshot()
		if m := re.FindStringSubmatch(text); m != nil {
			return m, nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return nil, &TimeoutError{What: "output matching " + re.String(), After: within}
		}
	}
}
