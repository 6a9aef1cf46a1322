package vnettest

import (
	"runtime"
	"runtime/debug"
	"testing"
	"testing/synctest"
)

// Run runs f in a testing/synctest bubble, as synctest.Test does. In a
// test binary built with -race it runs f with GOMAXPROCS 1 (restored
// after): with the bubble's timer channels served on several threads at
// once, Go 1.26's race runtime crashes the process (golang/go#78156:
// "ThreadSanitizer: CHECK failed", or a SIGSEGV in
// runtime.(*timer).maybeRunChan, most often from mocknet's stream
// goroutines, which wait on a timer each). On one P it has not; the
// peers' simulated time is the same either way.
func Run(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	if raceBuild {
		prev := runtime.GOMAXPROCS(1)
		defer runtime.GOMAXPROCS(prev)
	}
	synctest.Test(t, f)
}

// raceBuild reports whether the binary was built with the race detector,
// from its build settings (no build tags: one file for both builds).
var raceBuild = func() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}()
