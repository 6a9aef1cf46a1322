//go:build race

package guard

// The race detector slows everything several times; bounded waits stretch
// by this factor so that they bound hangs, not speed.
const slowdown = 4
