package arbiter

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Refusal is why a received message was refused. Every refusal is counted.
type Refusal uint8

// Refusals.
const (
	RefusedMalformed     Refusal = iota // undecodable or out of bounds
	RefusedForgedSender                 // the envelope's sender is not who the transport says sent it
	RefusedWrongGame                    // another game's message
	RefusedUnknownMember                // the sender is not in the view
	RefusedForgedServer                 // a duty message (grant, admit, ping …) from a member that does not serve its stamp
	RefusedFutureStamp                  // a (lap, ts) beyond the next lap
	RefusedStaleEpoch                   // an older membership epoch
	RefusedStaleTerm                    // stamped in a term (lap, place) older than the receiver's
	RefusedOutOfTurn                    // a newer term nobody handed over while its arbiter is alive
	RefusedIDTaken                      // a JOIN for an ID another member holds
	RefusedInconsistent                 // a view change or hand-off that does not follow from the receiver's state
	refusalCount
)

var refusalNames = [refusalCount]string{
	"malformed", "forged_sender", "wrong_game", "unknown_member", "forged_server", "future_stamp",
	"stale_epoch", "stale_term", "out_of_turn", "id_taken", "inconsistent",
}

func (r Refusal) String() string {
	if r >= refusalCount {
		return "invalid"
	}
	return refusalNames[r]
}

// Metrics counts what one node did. The node updates it from its owner's
// goroutine; readers (a Prometheus scrape, a test) may read at any time.
type Metrics struct {
	Refused [refusalCount]atomic.Uint64

	Grants          atomic.Uint64 // grants made by this node on duty
	Denies          atomic.Uint64 // denials sent
	ClaimsStale     atomic.Uint64 // claims discarded as stale (older term or epoch) by this node on duty
	ClaimsQueued    atomic.Uint64 // claims held while waiting for the lease
	ClaimsDropped   atomic.Uint64 // claims dropped because the queue was full
	Admits          atomic.Uint64 // members admitted
	Fulls           atomic.Uint64 // JOINs refused (full or ID taken)
	Leaves          atomic.Uint64 // members removed on their LEAVE
	Drops           atomic.Uint64 // members dropped (silent or expelled)
	Terms           atomic.Uint64 // terms this node served
	Takeovers       atomic.Uint64 // ... of which after the arbiter fell silent
	Resumes         atomic.Uint64 // ... of which with no successor or after giving up lost grants
	Handoffs        atomic.Uint64 // hand-offs completed (ACK received)
	HandoffRetries  atomic.Uint64 // HANDOFFs sent again
	HandoffSkips    atomic.Uint64 // successors skipped after HandoffTimeout without ACK
	InactiveSkips   atomic.Uint64 // members skipped at hand-off because they answered no PING
	LaggingSkips    atomic.Uint64 // members skipped at hand-off because their grant log lags
	Abdications     atomic.Uint64 // terms given up for want of a lease
	Laps            atomic.Uint64 // wrap-arounds this node served
	GrantsLearned   atomic.Uint64 // grants this node learned (live, repaired or carried)
	SyncGiveUps     atomic.Uint64 // times a new arbiter gave up missing grants after SyncTimeout
	GrantsLost      atomic.Uint64 // sequence numbers it gave up then (grants, or numbers never used)
	GrantConflicts  atomic.Uint64 // grants of one resource to two members found in the log
	LogResets       atomic.Uint64 // grant logs dropped for the arbiter's (they differed)
	ChatsDelivered  atomic.Uint64
	PingsSent       atomic.Uint64
	ViewRequests    atomic.Uint64
	MessagesSent    atomic.Uint64
	MessagesHandled atomic.Uint64
}

func (m *Metrics) refuse(r Refusal) { m.Refused[r].Add(1) }

type namedCounter struct {
	name, help string
	v          *atomic.Uint64
}

func (m *Metrics) counters() []namedCounter {
	return []namedCounter{
		{"grants", "Grants made on duty.", &m.Grants},
		{"denies", "Claims denied on duty.", &m.Denies},
		{"claims_stale", "Claims discarded as stale on duty.", &m.ClaimsStale},
		{"claims_queued", "Claims held until the lease was confirmed.", &m.ClaimsQueued},
		{"claims_dropped", "Claims dropped because the queue was full.", &m.ClaimsDropped},
		{"admits", "Members admitted on duty.", &m.Admits},
		{"fulls", "JOINs refused on duty (game full or ID taken).", &m.Fulls},
		{"leaves", "Members removed on their LEAVE.", &m.Leaves},
		{"drops", "Members dropped as silent or expelled.", &m.Drops},
		{"terms", "Terms served.", &m.Terms},
		{"takeovers", "Terms taken over from a silent arbiter.", &m.Takeovers},
		{"resumes", "Terms opened without a successor or after lost grants.", &m.Resumes},
		{"handoffs", "Hand-offs acknowledged by the successor.", &m.Handoffs},
		{"handoff_retries", "HANDOFF messages sent again.", &m.HandoffRetries},
		{"handoff_skips", "Successors skipped for want of an ACK.", &m.HandoffSkips},
		{"inactive_skips", "Members skipped at hand-off as inactive.", &m.InactiveSkips},
		{"lagging_skips", "Members skipped at hand-off as lagging in grants.", &m.LaggingSkips},
		{"abdications", "Terms given up for want of a lease.", &m.Abdications},
		{"laps", "Wrap-arounds of the logical clock served.", &m.Laps},
		{"grants_learned", "Grants learned from the group.", &m.GrantsLearned},
		{"sync_give_ups", "Times a new arbiter gave up missing grants.", &m.SyncGiveUps},
		{"grants_lost", "Grant numbers given up after the sync timeout.", &m.GrantsLost},
		{"grant_conflicts", "Grants of one resource to two members found.", &m.GrantConflicts},
		{"log_resets", "Grant logs dropped for the arbiter's.", &m.LogResets},
		{"chats_delivered", "Chat lines delivered.", &m.ChatsDelivered},
		{"pings_sent", "PINGs sent on duty.", &m.PingsSent},
		{"view_requests", "Requests for the current view sent.", &m.ViewRequests},
		{"messages_sent", "Messages sent.", &m.MessagesSent},
		{"messages_handled", "Messages received and accepted.", &m.MessagesHandled},
	}
}

// Counters returns every counter by name (refusals as refused_<reason>),
// for tests, benches and logs.
func (m *Metrics) Counters() map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range m.counters() {
		out[c.name] = c.v.Load()
	}
	for r := Refusal(0); r < refusalCount; r++ {
		out["refused_"+r.String()] = m.Refused[r].Load()
	}
	return out
}

// Collector exposes m to Prometheus as arbiter_<name>_total counters and
// arbiter_refused_total{reason}, with the given constant labels (e.g. the
// member). The caller registers it.
func (m *Metrics) Collector(constLabels prometheus.Labels) prometheus.Collector {
	c := &collector{m: m}
	for _, nc := range m.counters() {
		c.descs = append(c.descs, prometheus.NewDesc("arbiter_"+nc.name+"_total", nc.help, nil, constLabels))
	}
	c.refused = prometheus.NewDesc("arbiter_refused_total",
		"Received messages refused, by reason.", []string{"reason"}, constLabels)
	return c
}

type collector struct {
	m       *Metrics
	descs   []*prometheus.Desc
	refused *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.refused
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for i, nc := range c.m.counters() {
		ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.CounterValue, float64(nc.v.Load()))
	}
	for r := Refusal(0); r < refusalCount; r++ {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(c.m.Refused[r].Load()), r.String())
	}
}
