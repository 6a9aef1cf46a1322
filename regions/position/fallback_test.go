package position

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
)

// TestFallbackDecisions walks the fallback state machine through a
// coordinator that answers, goes quiet, answers again, breaks and is
// replaced, checking the update of every tick and which answers are a
// coordinator's first (the ones the service logs).
func TestFallbackDecisions(t *testing.T) {
	const c1, c2, self = peer.ID("c1"), peer.ID("c2"), peer.ID("me")
	f := fallback{after: 2}
	type step struct {
		seq     uint64
		coord   peer.ID
		result  uplinkResult
		echo    uint64 // echoed from coord before this tick's decision (0: none)
		first   bool   // that echo is coord's first answer
		direct  bool
		started string
		resumed bool
	}
	steps := []step{
		// No coordinator yet: direct at once.
		{seq: 1, result: uplinkNone, direct: true, started: FallbackNoCoordinator},
		{seq: 2, result: uplinkNone, direct: true},
		// A coordinator takes the updates; direct until it answers.
		{seq: 3, coord: c1, result: uplinkSent, direct: true},
		{seq: 4, coord: c1, result: uplinkSent, echo: 3, first: true, direct: false, resumed: true},
		{seq: 5, coord: c1, result: uplinkSent, echo: 4},
		// It answers 5 and then goes quiet: 6 and 7 unanswered, 8 direct.
		{seq: 6, coord: c1, result: uplinkSent, echo: 5},
		{seq: 7, coord: c1, result: uplinkSent},
		{seq: 8, coord: c1, result: uplinkSent, direct: true, started: FallbackUnanswered},
		{seq: 9, coord: c1, result: uplinkSent, direct: true},
		// An answer heard before does not count twice; one for 10 ends
		// the fallback.
		{seq: 10, coord: c1, result: uplinkSent, echo: 5, direct: true},
		{seq: 11, coord: c1, result: uplinkSent, echo: 10, resumed: true},
		// Only answers from the coordinator count (see below): 12 and 13
		// go unanswered by c1.
		{seq: 12, coord: c1, result: uplinkSent, echo: 11},
		{seq: 13, coord: c1, result: uplinkSent},
		// The stream breaks: direct at once.
		{seq: 14, coord: c1, result: uplinkBroken, direct: true, started: FallbackUplinkFailed},
		// A new coordinator: still direct until it answers.
		{seq: 15, coord: c2, result: uplinkSent, direct: true},
		{seq: 16, coord: c2, result: uplinkSent, echo: 15, first: true, resumed: true},
		// A new coordinator while aggregated gets its own budget.
		{seq: 17, coord: c1, result: uplinkSent},
		{seq: 18, coord: c1, result: uplinkSent},
		{seq: 19, coord: c1, result: uplinkSent, direct: true, started: FallbackUnanswered},
		// This peer becomes the coordinator: nothing to wait for.
		{seq: 20, coord: self, result: uplinkLocal, resumed: true},
		{seq: 21, coord: self, result: uplinkLocal},
	}
	for _, st := range steps {
		if st.echo != 0 {
			if first := f.echo(f.coord, st.echo); first != st.first {
				t.Fatalf("echo of %d before update %d: first answer %v, want %v", st.echo, st.seq, first, st.first)
			}
		}
		if st.seq == 13 {
			// A batch of another peer carrying the player's update is no
			// answer from its coordinator.
			if f.echo(c2, 13) {
				t.Fatal("a batch of another peer counted as the coordinator's first answer")
			}
		}
		direct, started, resumed := f.decide(st.seq, st.coord, st.result)
		if direct != st.direct || started != st.started || resumed != st.resumed {
			t.Fatalf("update %d: direct %v started %q resumed %v, want %v %q %v (state %+v)",
				st.seq, direct, started, resumed, st.direct, st.started, st.resumed, f)
		}
	}
}

// TestFallbackBound: whenever the coordinator stops answering after
// publishing update k, the first update published directly is
// k+FallbackAfter+1, so receivers miss FallbackAfter updates at most.
func TestFallbackBound(t *testing.T) {
	const c = peer.ID("c")
	for after := uint64(1); after <= 5; after++ {
		for k := uint64(1); k <= 10; k++ {
			f := fallback{after: after}
			first := uint64(0)
			for seq := uint64(1); seq <= k+after+3; seq++ {
				if seq > 1 && seq-1 <= k {
					f.echo(c, seq-1) // the answer to the last update arrives before the next tick
				}
				if direct, _, _ := f.decide(seq, c, uplinkSent); direct && first == 0 {
					first = seq
				}
			}
			if first != k+after+1 {
				t.Fatalf("after=%d, last answered %d: first direct update %d, want %d", after, k, first, k+after+1)
			}
		}
	}
}
