package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/regions/position"
)

// The path recorder counts only while recording, tells one-hop from
// forwarded deliveries with their causes, and counts those over the delay
// goal (1.25 x link + 10 ms) on each path.
func TestPathRecorderCountsPathsAndLateDeliveries(t *testing.T) {
	pr := newPathRecorder()
	link := 50 * time.Millisecond
	pr.record(link, link, "") // before the window: not counted
	if pr.report() != nil {
		t.Fatal("counted a delivery outside the window")
	}
	pr.setRecording(true)
	pr.record(link, link, "")                               // one hop, on time
	pr.record(72*time.Millisecond, link, "")                // within 72.5 ms
	pr.record(73*time.Millisecond, link, "")                // late
	pr.record(2*link, link, causeNotConnected)              // late
	pr.record(2*link, link, causeNotConnected)              // late
	pr.record(60*time.Millisecond, link, causeConnectedNew) // forwarded on time
	pr.setRecording(false)
	pr.record(2*link, link, causeOther) // after the window
	p := pr.report()
	if p == nil {
		t.Fatal("nothing reported")
	}
	if p.OneHop != 3 || p.Forwarded != 3 || p.LateOneHop != 1 || p.LateForwarded != 2 {
		t.Errorf("one hop %d (late %d), forwarded %d (late %d), want 3 (1), 3 (2)", p.OneHop, p.LateOneHop, p.Forwarded, p.LateForwarded)
	}
	if got := p.ForwardedByCause; len(got) != 2 || got[causeNotConnected] != 2 || got[causeConnectedNew] != 1 {
		t.Errorf("causes %v", got)
	}
	if p.ForwardedShare != 0.5 || p.ForwardedDelayMS.Max != 100 || p.OneHopDelayMS.P50 != 72 {
		t.Errorf("share %v, forwarded delays %+v, one-hop delays %+v", p.ForwardedShare, p.ForwardedDelayMS, p.OneHopDelayMS)
	}
	// The report is a copy: later counts do not change it.
	pr.setRecording(true)
	pr.record(2*link, link, causeNotConnected)
	if p.ForwardedByCause[causeNotConnected] != 2 {
		t.Error("the report shares its counts with the recorder")
	}
}

// entry is a window entry of a player online for secs with the counters
// of first and last.
func entry(walks bool, secs float64, first, last snapshot) windowEntry {
	p := &player{}
	if walks {
		p.walker = &Walker{}
	}
	return windowEntry{p: p, first: &first, last: &last, seconds: secs}
}

// The bandwidth split tells each kind of traffic apart, keeps the host's
// other streams out of the headline bytes (and never below zero), and
// counts as interior only the walking players who stayed off the border
// regions all window.
func TestBandwidthSplitByKindAndPlace(t *testing.T) {
	start := snapshot{}
	// Sent in 2 s: gossipsub 1000 B of which 600 position data and 100
	// event data; position streams 200, workload 50, host 1500 in all
	// (so 250 other).
	sent := snapshot{
		wire:  wireSnapshot{bytesOut: 1000, posBytesOut: 600, eventBytesOut: 100, bytesIn: 400, posBytesIn: 300},
		stats: position.Stats{StreamBytesOut: 200, StreamBytesIn: 10},
		// Received: the host saw less than gossipsub queued (in flight
		// at the window's end): other is 0, not negative.
		workloadOut: 50, hostOut: 1500, hostIn: 300,
	}
	interior := entry(true, 2, start, sent)
	movedToBorder := sent
	movedToBorder.borderSteps = 3
	border := entry(true, 2, start, movedToBorder)
	endsOnBorder := sent
	endsOnBorder.border = true
	border2 := entry(true, 2, start, endsOnBorder)
	bot := entry(false, 2, start, sent)
	brief := entry(true, 0.5, start, sent) // under minOnlineSeconds

	s := splitBandwidth([]windowEntry{interior, border, border2, bot, brief})
	if s.All.Players != 4 || s.Interior.Players != 1 || s.Border.Players != 3 {
		t.Fatalf("players all %d, interior %d, border %d; want 4, 1, 3", s.All.Players, s.Interior.Players, s.Border.Players)
	}
	want := map[string]float64{kindPositionData: 300, kindEventData: 50, kindGossipControl: 150, kindPositionStreams: 100, kindWorkload: 25, kindOther: 125}
	for k, v := range want {
		if got := s.Interior.SentByKind[k]; got != v {
			t.Errorf("sent %s: %v, want %v", k, got, v)
		}
	}
	if got := s.Interior.RecvByKind[kindOther]; got != 0 {
		t.Errorf("received other streams %v, want 0", got)
	}
	if got := s.Interior.RecvByKind[kindGossipControl]; got != 50 {
		t.Errorf("received gossipsub control %v, want 50", got)
	}
	// The headline (gossipsub + position streams + workload) leaves other
	// streams out.
	if got := s.All.BytesSentPerSec.Avg; got != 625 {
		t.Errorf("sent per player %v, want 625", got)
	}
	var b strings.Builder
	s.summary(&b)
	for _, want := range []string{"interior (  1) total 625", "other streams 125 (0)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

// scaleReport is a report of a scale series with the figures the goals
// read.
func scaleReport(players int, aggregate bool, sentAvg, interiorAvg, msgs float64) *Report {
	r := &Report{Players: players, Regions: players / 5, Aggregate: aggregate,
		BytesSentPerSec: Dist{Avg: sentAvg}, MsgsSentPerSec: Dist{Avg: msgs / 2}, MsgsRecvPerSec: Dist{Avg: msgs / 2},
		DelayMS: Dist{Count: 10, P99: 100}, LinkLatencyMS: Dist{Count: 10, P99: 50}}
	r.Bandwidth = &BandwidthSplit{Interior: Bandwidth{Players: players / 2, BytesSentPerSec: Dist{Avg: interiorAvg}}}
	return r
}

// The goals block gives the bandwidth spread of each mode (all players and
// interior players), direct delay p99 against 1.25 x link + 10 ms,
// aggregated messages against direct at equal player counts, and the time
// to the next coordinator.
func TestScaleGoals(t *testing.T) {
	agg250 := scaleReport(250, true, 100_000, 120_000, 300)
	agg1000 := scaleReport(1000, true, 117_000, 125_000, 320)
	direct250 := scaleReport(250, false, 400_000, 0, 1500)
	direct250.Bandwidth = nil // a report from before the split
	direct250.Paths = &Paths{OneHop: 98, Forwarded: 2, LateForwarded: 2, ForwardedShare: 0.02}
	churn := scaleReport(250, true, 100_000, 120_000, 300)
	churn.Churn = &Churn{Leave: "handoff", NextCoordinatorMS: Dist{Count: 4, P99: 120}}
	var b strings.Builder
	denser := scaleReport(2000, true, 300_000, 300_000, 300)
	denser.Regions = 200 // 10 players a region, twice the others'
	churn2 := scaleReport(250, true, 130_000, 120_000, 300)
	churn2.Churn = &Churn{Leave: "handoff"}
	ScaleTable(&b, []*Report{agg1000, direct250, agg250, churn, churn2, denser})
	out := b.String()
	for _, want := range []string{
		"bandwidth spread, aggregated, 2 runs (250-1000 players): all 100k-117k B/s, 17.0% (missed), interior 120k-125k B/s, 4.2% (met)",
		"delay p99, direct, 250 players: 100 ms against 1.25 x link p99 50 ms + 10 ms = 72 ms: missed; 2.00% of direct updates over",
		"messages per node (sent + received), 250 players: direct 1500/s, aggregated 300/s, 5.0x fewer (goal 2x): met",
		"time to next coordinator, aggregated, churn (handoff), 250 players",
		"p99 120 ms over 4, 0 pending (goal under 1000 ms): met",
		"| aggregated | 1000 | 200 | 5.0 | 117k / 0k | 0k | 125k (500) | - (0) |",
		"| direct | 250 | 50 | 5.0 | 400k / 0k | 0k | - | - |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("scale table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "bandwidth spread, aggregated, 3 runs") {
		t.Errorf("a spread over runs of different densities:\n%s", out)
	}
	if strings.Contains(out, "bandwidth spread, aggregated, churn") {
		t.Errorf("a spread over runs of one player count:\n%s", out)
	}
	if strings.Contains(out, "delay p99, aggregated") {
		t.Errorf("the delay goal is for direct mode only:\n%s", out)
	}
}
