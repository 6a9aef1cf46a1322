package position

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
)

// Stats are a Service's counters since it started.
type Stats struct {
	Published        uint64            // updates this player published on its topic
	SentUplink       uint64            // updates sent to the coordinator (aggregated mode)
	UplinkFailed     uint64            // updates not sent: no coordinator or stream failure
	BatchesPublished uint64            // batches published as a coordinator
	BatchEntries     uint64            // updates in those batches
	Delivered        uint64            // other players' updates accepted and delivered
	Lost             uint64            // sequence gaps in accepted updates
	Reordered        uint64            // updates that arrived after a newer one
	Duplicate        uint64            // updates seen twice
	Rejected         map[string]uint64 // by reason; each penalised the sender
	Ignored          map[string]uint64 // by reason; no penalty
	RendezvousOK     uint64
	RendezvousFailed uint64
	CoordinatorJoins uint64 // Join requests served as a coordinator
	UplinkReceived   uint64 // updates received from players as a coordinator
	StreamBytesOut   uint64 // bytes written on position streams (both roles)
	StreamBytesIn    uint64 // bytes read from position streams (both roles)
	// Aggregated mode's fallback to direct publishing (failover.go):
	// how often it started, by reason; how often the coordinator's
	// answer ended it; the updates published directly meanwhile (also in
	// Published); and whether the player publishes directly now.
	Fallbacks         map[string]uint64
	FallbackResumed   uint64
	FallbackPublished uint64
	PublishingDirect  bool
	// Summaries (summary.go): published as a coordinator and their
	// entries; published of this player alone while it published
	// directly; and the bytes of accepted messages from others on
	// position topics and on summary topics (what following a region
	// costs this peer).
	SummariesPublished uint64
	SummaryEntries     uint64
	OwnSummaries       uint64
	PositionBytesIn    uint64
	SummaryBytesIn     uint64
}

// counters is the concurrent side of Stats.
type counters struct {
	published, sentUplink, uplinkFailed     atomic.Uint64
	batches, batchEntries, delivered        atomic.Uint64
	rendezvousOK, rendezvousFail, joinsSeen atomic.Uint64
	uplinkReceived, streamOut, streamIn     atomic.Uint64
	resumed, fallbackPublished              atomic.Uint64
	direct                                  atomic.Bool
	summaries, summaryEntries, ownSummaries atomic.Uint64
	positionBytesIn, summaryBytesIn         atomic.Uint64

	mu        sync.Mutex
	rejected  map[string]uint64
	ignored   map[string]uint64
	fallbacks map[string]uint64
	tracker   TrackerStats
}

func (c *counters) fallback(reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fallbacks[reason]++
}

func (c *counters) setDirect(direct bool) { c.direct.Store(direct) }

func (c *counters) setTracker(t TrackerStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tracker = t
}

func (c *counters) trackerStats() TrackerStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tracker
}

func newCounters() *counters {
	return &counters{rejected: map[string]uint64{}, ignored: map[string]uint64{}, fallbacks: map[string]uint64{}}
}

func (c *counters) verdict(v Verdict, reason string) {
	if v == Accept {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v == Reject {
		c.rejected[reason]++
	} else {
		c.ignored[reason]++
	}
}

func (c *counters) snapshot(t TrackerStats) Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{
		Published:        c.published.Load(),
		SentUplink:       c.sentUplink.Load(),
		UplinkFailed:     c.uplinkFailed.Load(),
		BatchesPublished: c.batches.Load(),
		BatchEntries:     c.batchEntries.Load(),
		Delivered:        c.delivered.Load(),
		Lost:             t.Lost,
		Reordered:        t.Reordered,
		Duplicate:        t.Duplicate,
		Rejected:         map[string]uint64{},
		Ignored:          map[string]uint64{},
		RendezvousOK:     c.rendezvousOK.Load(),
		RendezvousFailed: c.rendezvousFail.Load(),
		CoordinatorJoins: c.joinsSeen.Load(),
		UplinkReceived:   c.uplinkReceived.Load(),
		StreamBytesOut:   c.streamOut.Load(),
		StreamBytesIn:    c.streamIn.Load(),

		SummariesPublished: c.summaries.Load(),
		SummaryEntries:     c.summaryEntries.Load(),
		OwnSummaries:       c.ownSummaries.Load(),
		PositionBytesIn:    c.positionBytesIn.Load(),
		SummaryBytesIn:     c.summaryBytesIn.Load(),

		Fallbacks:         maps.Clone(c.fallbacks),
		FallbackResumed:   c.resumed.Load(),
		FallbackPublished: c.fallbackPublished.Load(),
		PublishingDirect:  c.direct.Load(),
	}
	for k, v := range c.rejected {
		s.Rejected[k] = v
	}
	for k, v := range c.ignored {
		s.Ignored[k] = v
	}
	return s
}

// TotalRejected sums Rejected over reasons.
func (s Stats) TotalRejected() uint64 {
	var n uint64
	for _, v := range s.Rejected {
		n += v
	}
	return n
}

// Reasons lists the keys of m in order, for stable output.
func Reasons(m map[string]uint64) []string {
	return slices.Sorted(maps.Keys(m))
}
