package sim

import (
	"fmt"
	"io"
	"syscall"
	"time"
)

// progress draws one line: the network being built, then the run's
// simulated time, the wall time and an estimate of the wall time left.
// Inside a testing/synctest bubble time.Now is virtual, so wall time is
// read from the system clock directly (wallClock).
type progress struct {
	w     io.Writer
	total time.Duration // simulated
	wall0 time.Time     // wall time at the start of Run
	// runWall is the wall time when the simulated run began.
	runWall   time.Time
	lastBuild time.Time
}

func newProgress(w io.Writer, total time.Duration, wall0 time.Time) *progress {
	return &progress{w: w, total: total, wall0: wall0}
}

// wallClock is the real time, even inside a synctest bubble.
func wallClock() time.Time {
	var tv syscall.Timeval
	if err := syscall.Gettimeofday(&tv); err != nil {
		return time.Now()
	}
	return time.Unix(tv.Sec, int64(tv.Usec)*1000)
}

// building reports that built of total players are built; at most one line
// per second of wall time, and the last.
func (p *progress) building(built, total int) {
	if p.w == nil {
		return
	}
	now := wallClock()
	if built < total && now.Sub(p.lastBuild) < time.Second {
		return
	}
	p.lastBuild = now
	el := now.Sub(p.wall0)
	eta := time.Duration(float64(el) / float64(built) * float64(total-built))
	fmt.Fprintf(p.w, "\rbuilding players %d/%d  wall %s  ETA %s   ", built, total, round(el), round(eta))
	if built == total {
		fmt.Fprintln(p.w)
	}
}

// running marks the start of the simulated run: the ETA counts from here.
func (p *progress) running() { p.runWall = wallClock() }

// update reports el of simulated time done with online players online.
func (p *progress) update(el time.Duration, online int) {
	if p.w == nil {
		return
	}
	now := wallClock()
	if p.runWall.IsZero() {
		p.runWall = now
	}
	const width = 30
	f := min(float64(el)/float64(p.total), 1)
	n := int(f * width)
	bar := make([]byte, width)
	for i := range bar {
		switch {
		case i < n:
			bar[i] = '='
		case i == n:
			bar[i] = '>'
		default:
			bar[i] = ' '
		}
	}
	eta := "?"
	if f > 0 {
		ran := now.Sub(p.runWall)
		eta = round(time.Duration(float64(ran) / f * (1 - f))).String()
	}
	fmt.Fprintf(p.w, "\r[%s] %3.0f%% simulated %s/%s  %d online  wall %s  ETA %s   ",
		bar, f*100, el.Truncate(time.Second), p.total, online, round(now.Sub(p.wall0)), eta)
}

func round(d time.Duration) time.Duration { return d.Round(time.Second) }

func (p *progress) done() {
	if p.w != nil {
		fmt.Fprintln(p.w)
	}
}
