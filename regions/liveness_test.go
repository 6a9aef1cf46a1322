package regions

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// The liveness table takes the time as an argument: these tests step it
// by hand from lt0, with no network and no clock.
var lt0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	testDeadFor    = 30 * time.Second
	testProbeEvery = time.Second
)

// livenessStep is one call on the table, at lt0+at, and what it returns.
type livenessStep struct {
	op   string // dead, heard, alive, exclude, include, excluded, probe, prune
	p    peer.ID
	at   time.Duration
	want bool // dead: first; heard: changed; alive, excluded; probe: due; prune: dead changed
}

func (st livenessStep) apply(l *liveness) (bool, bool) {
	now := lt0.Add(st.at)
	switch st.op {
	case "dead":
		return l.markDead(st.p, now), true
	case "heard":
		return l.heard(st.p), true
	case "alive":
		return l.alive(st.p, now), true
	case "exclude":
		l.exclude(st.p, now)
		return st.want, true
	case "include":
		l.include(st.p)
		return st.want, true
	case "excluded":
		return l.isExcluded(st.p, now), true
	case "probe":
		return l.probeDue(st.p, now), true
	case "prune":
		return l.prune(now), true
	}
	return false, false
}

func TestLivenessTable(t *testing.T) {
	const a, b = peer.ID("a"), peer.ID("b")
	cases := []struct {
		name  string
		steps []livenessStep
	}{
		{"unknown peers are alive", []livenessStep{
			{op: "alive", p: a, want: true},
			{op: "heard", p: a, want: false},
		}},
		{"dead until deadFor has passed", []livenessStep{
			{op: "dead", p: a, want: true},
			{op: "alive", p: a, want: false},
			{op: "alive", p: b, want: true},
			{op: "alive", p: a, at: testDeadFor, want: false},
			{op: "alive", p: a, at: testDeadFor + 1, want: true},
		}},
		{"a second death is not news, an expired one is", []livenessStep{
			{op: "dead", p: a, want: true},
			{op: "dead", p: a, at: time.Second, want: false},
			// The second death restarted deadFor.
			{op: "alive", p: a, at: testDeadFor + 1, want: false},
			{op: "dead", p: a, at: 2*testDeadFor + 1, want: true},
		}},
		{"a sign of life revives at once", []livenessStep{
			{op: "dead", p: a, want: true},
			{op: "heard", p: a, at: time.Millisecond, want: true},
			{op: "alive", p: a, at: time.Millisecond, want: true},
			{op: "heard", p: a, at: time.Millisecond, want: false},
			{op: "dead", p: a, at: 2 * time.Millisecond, want: true},
		}},
		{"an exclusion holds for deadFor, whatever is heard", []livenessStep{
			{op: "exclude", p: a},
			{op: "heard", p: a, want: false},
			{op: "alive", p: a, want: true},
			{op: "excluded", p: a, at: testDeadFor, want: true},
			{op: "excluded", p: a, at: testDeadFor + 1, want: false},
			{op: "excluded", p: b, want: false},
		}},
		{"include ends an exclusion", []livenessStep{
			{op: "exclude", p: a},
			{op: "include", p: a},
			{op: "excluded", p: a, want: false},
		}},
		{"one probe per probeEvery and peer", []livenessStep{
			{op: "probe", p: a, want: true},
			{op: "probe", p: a, at: testProbeEvery - 1, want: false},
			{op: "probe", p: b, at: testProbeEvery - 1, want: true},
			{op: "probe", p: a, at: testProbeEvery, want: true},
			{op: "probe", p: a, at: testProbeEvery + 1, want: false},
		}},
		{"prune forgets only what no longer counts", []livenessStep{
			{op: "dead", p: a, want: true},
			{op: "exclude", p: b},
			{op: "probe", p: b, want: true},
			{op: "prune", at: testDeadFor, want: false},
			{op: "alive", p: a, at: testDeadFor, want: false},
			{op: "excluded", p: b, at: testDeadFor, want: true},
			{op: "probe", p: b, at: testDeadFor, want: true},
			{op: "prune", at: testDeadFor + 1, want: true},
			{op: "excluded", p: b, at: testDeadFor + 1, want: false},
			// Nothing left to forget.
			{op: "prune", at: 3 * testDeadFor, want: false},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newLiveness(testDeadFor, testProbeEvery, maxDead)
			for i, st := range tc.steps {
				got, ok := st.apply(l)
				if !ok {
					t.Fatalf("step %d: unknown op %q", i, st.op)
				}
				if got != st.want {
					t.Fatalf("step %d: %s %s at +%s = %v, want %v", i, st.op, st.p, st.at, got, st.want)
				}
			}
		})
	}
}

func TestLivenessExcludedAmong(t *testing.T) {
	self := peer.ID("self")
	order := []peer.ID{"a", self, "b", "c"}
	cases := []struct {
		name     string
		excluded []peer.ID
		at       time.Duration
		want     []peer.ID
	}{
		{"none", nil, 0, nil},
		{"only those in order", []peer.ID{"b", "z"}, 0, []peer.ID{"b"}},
		{"never self", []peer.ID{self, "c"}, 0, []peer.ID{"c"}},
		{"expired", []peer.ID{"a"}, testDeadFor + 1, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newLiveness(testDeadFor, testProbeEvery, maxDead)
			for _, p := range tc.excluded {
				l.exclude(p, lt0)
			}
			got := l.excludedAmong(order, self, lt0.Add(tc.at))
			if len(tc.want) == 0 {
				if got != nil {
					t.Fatalf("excluded %v, want nil", got)
				}
				return
			}
			if len(got) != len(tc.want) {
				t.Fatalf("excluded %v, want %v", got, tc.want)
			}
			for _, p := range tc.want {
				if !got[p] {
					t.Fatalf("excluded %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestLivenessRecheck(t *testing.T) {
	l := newLiveness(testDeadFor, testProbeEvery, maxDead)
	// Deaths at lt0+i seconds; c and d die at the same time.
	deaths := []struct {
		p  peer.ID
		at time.Duration
	}{{"e", 0}, {"d", time.Second}, {"c", time.Second}, {"b", 2 * time.Second}, {"a", 3 * time.Second}, {"gone", 4 * time.Second}}
	for _, d := range deaths {
		l.markDead(d.p, lt0.Add(d.at))
	}
	connected := func(p peer.ID) bool { return p != "gone" }
	cases := []struct {
		name string
		at   time.Duration
		n    int
		want []peer.ID
	}{
		{"longest dead first, ties by ID, connected only", 5 * time.Second, 8, []peer.ID{"e", "c", "d", "b", "a"}},
		{"at most n", 5 * time.Second, 2, []peer.ID{"e", "c"}},
		{"not the expired", testDeadFor + time.Second + 1, 8, []peer.ID{"b", "a"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := l.recheck(lt0.Add(tc.at), tc.n, connected); !slices.Equal(got, tc.want) {
				t.Fatalf("recheck = %v, want %v", got, tc.want)
			}
		})
	}
	// A failed probe marks the peer anew: it goes to the back.
	l.markDead("e", lt0.Add(6*time.Second))
	if got := l.recheck(lt0.Add(7*time.Second), 8, connected); !slices.Equal(got, []peer.ID{"c", "d", "b", "a", "e"}) {
		t.Fatalf("recheck after e's new death = %v", got)
	}
}

// TestLivenessBounded floods each per-peer table with more peers than
// its bound: it keeps the newest, evicting the oldest first (ties: the
// smallest ID), and a peer already held never evicts another.
func TestLivenessBounded(t *testing.T) {
	const limit = 4
	tables := []struct {
		name string
		put  func(l *liveness, p peer.ID, now time.Time)
		held func(l *liveness) map[peer.ID]time.Time
	}{
		{"dead", func(l *liveness, p peer.ID, now time.Time) { l.markDead(p, now) }, func(l *liveness) map[peer.ID]time.Time { return l.dead.at }},
		{"excluded", func(l *liveness, p peer.ID, now time.Time) { l.exclude(p, now) }, func(l *liveness) map[peer.ID]time.Time { return l.excluded.at }},
		{"probed", func(l *liveness, p peer.ID, now time.Time) { l.probeDue(p, now) }, func(l *liveness) map[peer.ID]time.Time { return l.probed.at }},
	}
	for _, tb := range tables {
		t.Run(tb.name, func(t *testing.T) {
			l := newLiveness(testDeadFor, testProbeEvery, limit)
			// p0..p9 one per 10s (each probe is due).
			for i := range 10 {
				tb.put(l, peer.ID(fmt.Sprintf("p%d", i)), lt0.Add(time.Duration(i)*10*time.Second))
				if n := len(tb.held(l)); n > limit {
					t.Fatalf("after %d peers the table holds %d, bound %d", i+1, n, limit)
				}
			}
			want := []peer.ID{"p6", "p7", "p8", "p9"}
			if got := sortedPeers(tb.held(l)); !slices.Equal(got, want) {
				t.Fatalf("held %v, want %v", got, want)
			}
			// Again for a held peer: nothing is evicted.
			tb.put(l, "p6", lt0.Add(100*time.Second))
			if got := sortedPeers(tb.held(l)); !slices.Equal(got, want) {
				t.Fatalf("held %v after renewing p6, want %v", got, want)
			}
			// Ties: the smallest ID goes first.
			l = newLiveness(testDeadFor, testProbeEvery, 2)
			tb.put(l, "y", lt0)
			tb.put(l, "x", lt0)
			tb.put(l, "z", lt0.Add(10*time.Second))
			if got := sortedPeers(tb.held(l)); !slices.Equal(got, []peer.ID{"y", "z"}) {
				t.Fatalf("held %v after a tie, want [y z]", got)
			}
		})
	}
}

func sortedPeers(m map[peer.ID]time.Time) []peer.ID {
	out := make([]peer.ID, 0, len(m))
	for p := range m {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// TestLivenessView: the published view answers as the table did when it
// was taken, and later changes to the table do not reach it.
func TestLivenessView(t *testing.T) {
	l := newLiveness(testDeadFor, testProbeEvery, maxDead)
	l.markDead("a", lt0)
	v := l.view()
	l.heard("a")
	l.markDead("b", lt0)
	for _, tc := range []struct {
		p    peer.ID
		at   time.Duration
		want bool
	}{
		{"a", 0, false},
		{"a", testDeadFor, false},
		{"a", testDeadFor + 1, true},
		{"b", 0, true},
	} {
		if got := v.alive(tc.p, lt0.Add(tc.at)); got != tc.want {
			t.Fatalf("view: %s alive at +%s = %v, want %v", tc.p, tc.at, got, tc.want)
		}
	}
	if !l.alive("a", lt0) || l.alive("b", lt0) {
		t.Fatal("the table changed with its view")
	}
}
