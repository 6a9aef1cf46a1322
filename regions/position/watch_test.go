package position_test

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/regions"
	"github.com/overworld-p2p/overworld/regions/position"
)

// watchLog is what one receiver took of other players while recording:
// the sequence numbers of their updates, in the order delivered. The
// tracker delivers only updates newer than the last one taken, so the step
// from one to the next counts the updates the receiver missed (plus one),
// whatever the machine's speed: a player sends one per interval.
type watchLog struct {
	mu        sync.Mutex
	recording bool
	seqs      map[peer.ID][]uint64
	region    map[peer.ID]map[uint64]regions.Coord // where each update says the player was
	batched   map[peer.ID]int
}

func newWatchLog() *watchLog {
	return &watchLog{seqs: map[peer.ID][]uint64{}, region: map[peer.ID]map[uint64]regions.Coord{}, batched: map[peer.ID]int{}}
}

// hook is the receiver's delivery hook.
func (w *watchLog) hook(d position.Delivery) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.recording {
		return
	}
	w.seqs[d.Player] = append(w.seqs[d.Player], d.Seq)
	if w.region[d.Player] == nil {
		w.region[d.Player] = map[uint64]regions.Coord{}
	}
	w.region[d.Player][d.Seq] = d.Region
	if d.Batched {
		w.batched[d.Player]++
	}
}

// start clears the log and starts recording.
func (w *watchLog) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recording = true
	clear(w.seqs)
	clear(w.region)
	clear(w.batched)
}

func (w *watchLog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recording = false
}

// count is how many updates of p were taken since start, and how many of
// them came in batches.
func (w *watchLog) count(p peer.ID) (all, batched int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seqs[p]), w.batched[p]
}

// countSince is how many updates of p numbered above seq were taken.
func (w *watchLog) countSince(p peer.ID, seq uint64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, s := range w.seqs[p] {
		if s > seq {
			n++
		}
	}
	return n
}

// last is the newest update of p taken (0: none).
func (w *watchLog) last(p peer.ID) uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.seqs[p]
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1]
}

// gaps is the histogram of steps between consecutive sequence numbers of
// p taken (1: nothing missed) and the largest step. The numbers are
// sorted first: pubsub validates messages concurrently, so two updates can
// reach the delivery hook in the other order than the tracker took them,
// and what a receiver missed is the numbers it never took.
func (w *watchLog) gaps(p peer.ID) (hist map[uint64]int, largest uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	hist = map[uint64]int{}
	s := slices.Compact(slices.Sorted(slices.Values(w.seqs[p])))
	for i := 1; i < len(s); i++ {
		step := s[i] - s[i-1]
		hist[step]++
		largest = max(largest, step)
	}
	return hist, largest
}

// regions is where p's updates taken said p was, by sequence number.
func (w *watchLog) regions(p peer.ID) map[uint64]regions.Coord {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[uint64]regions.Coord, len(w.region[p]))
	for s, r := range w.region[p] {
		out[s] = r
	}
	return out
}

// missedRun is the longest run of consecutive updates of p that the
// receiver did not take among those due to it: the sequence numbers of
// ref (another receiver's record of where p was) for which due is true.
// An update ref missed too counts as due when the one before it was.
func (w *watchLog) missedRun(p peer.ID, ref map[uint64]regions.Coord, due func(regions.Coord) bool) (longest int, from uint64) {
	got := w.regions(p)
	var lo, hi uint64
	for s := range ref {
		if lo == 0 || s < lo {
			lo = s
		}
		hi = max(hi, s)
	}
	run := 0
	prevDue := false
	for s := lo; s <= hi && lo != 0; s++ {
		r, known := ref[s]
		isDue := prevDue
		if known {
			isDue = due(r)
		}
		prevDue = isDue
		if _, took := got[s]; took || !isDue {
			run = 0
			continue
		}
		if run++; run > longest {
			longest, from = run, s-uint64(run)+1
		}
	}
	return longest, from
}

// formatHist prints a gap histogram as "step×count" in step order.
func formatHist(h map[uint64]int) string {
	steps := make([]uint64, 0, len(h))
	for s := range h {
		steps = append(steps, s)
	}
	sort.Slice(steps, func(i, j int) bool { return steps[i] < steps[j] })
	parts := make([]string, 0, len(steps))
	for _, s := range steps {
		parts = append(parts, fmt.Sprintf("%d×%d", s, h[s]))
	}
	return strings.Join(parts, " ")
}
