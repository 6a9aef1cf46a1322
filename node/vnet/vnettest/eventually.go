package vnettest

import (
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/await"
)

// Patience bounds Eventually's wait. In a synctest bubble it is simulated
// time and costs nothing while the peers wait; outside one it is only a
// hang guard.
const Patience = 2 * time.Minute

// Eventually polls cond until it holds and fails the test if it does not
// within Patience. what names the awaited state for the failure.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	EventuallyWithin(t, Patience, what, cond)
}

// EventuallyWithin is Eventually with its own bound, for a test that
// asserts one (in a bubble the bound is exact simulated time, so it can be
// the bound the design promises).
//
// The clock is the caller's: inside a testing/synctest bubble time.Sleep
// and time.Now are virtual and the poll costs no wall time; outside, they
// are real.
func EventuallyWithin(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	await.Until(t, within, what, cond)
}
