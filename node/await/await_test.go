package await

import (
	"errors"
	"fmt"
	"regexp"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestMatchWakesOnTheWriteThatCompletesTheLine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out Output
		go func() {
			time.Sleep(time.Second)
			fmt.Fprint(&out, "listening on 127.0.0.1:")
			time.Sleep(time.Second)
			fmt.Fprintln(&out, "4242")
		}()
		start := time.Now()
		m := out.Match(t, time.Minute, regexp.MustCompile(`listening on (\S+:\d+)\n`))
		if m[1] != "127.0.0.1:4242" {
			t.Fatalf("match %q", m)
		}
		if waited := time.Since(start); waited != 2*time.Second {
			t.Fatalf("woke after %v, want the 2 s the process took", waited)
		}
	})
}

func TestMatchTimesOutWithWhatWasAwaited(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out Output
		fmt.Fprintln(&out, "starting")
		_, err := out.MatchErr(3*time.Second, regexp.MustCompile(`ready`))
		var timeout *TimeoutError
		if !errors.As(err, &timeout) || timeout.After != 3*time.Second {
			t.Fatalf("err %v, want a timeout after 3s", err)
		}
	})
}

func TestUntilSeesAStateSoonAfterItHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var ready atomic.Bool
		go func() {
			time.Sleep(10 * time.Second)
			ready.Store(true)
		}()
		start := time.Now()
		Until(t, time.Minute, "ready", ready.Load)
		if waited := time.Since(start); waited < 10*time.Second || waited > 10*time.Second+maxWait {
			t.Fatalf("saw the state after %v, want within %v of 10s", waited, maxWait)
		}
	})
}

func TestUntilErrTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		err := UntilErr(time.Second, "never", func() bool { return false })
		if err == nil || err.Error() != "timed out after 1s waiting for never" {
			t.Fatalf("err %v", err)
		}
	})
}
