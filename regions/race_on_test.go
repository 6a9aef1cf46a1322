//go:build race

package regions

// The race detector slows everything down several times; bounded waits in
// the tests stretch by this factor so that they bound hangs, not speed.
const slowdown = 4
