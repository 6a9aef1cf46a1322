package browsertest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/overworld-p2p/overworld/node/await"
)

// Until evaluates the page's JavaScript expr until it returns a non-empty
// string, and returns that; within (and ctx) bound the wait, what names
// the awaited state in the error. A page tells the test nothing of
// itself, so it is asked again at await's growing interval.
func Until(ctx context.Context, within time.Duration, what, expr string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var v string
	var last error
	if err := await.UntilErr(within, what, func() bool {
		v, last = chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		return last == nil && v != ""
	}); err != nil {
		return "", fmt.Errorf("%w (last evaluation error: %v)", err, last)
	}
	return v, nil
}

// MustUntil is Until failing the test when the page never gets there.
func MustUntil(t testing.TB, ctx context.Context, within time.Duration, what, expr string) string {
	t.Helper()
	v, err := Until(ctx, within, what, expr)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// Remaining is what is left of ctx's deadline, for a wait that may take
// all of it.
func Remaining(ctx context.Context) time.Duration {
	dl, ok := ctx.Deadline()
	if !ok {
		panic("browsertest: Remaining of a context without a deadline")
	}
	return time.Until(dl)
}
