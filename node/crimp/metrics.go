package crimp

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what one member did. The node updates it from its single
// owner goroutine; readers (a Prometheus scrape, a bench) may read at any
// time, hence the atomics.
type Metrics struct {
	DataSent        atomic.Uint64 // data packets originated
	Delivered       atomic.Uint64 // payloads handed to the application (each key once)
	DeliveredFEC    atomic.Uint64 // ... of which recovered from FEC
	DeliveredRepair atomic.Uint64 // ... of which recovered from a repair
	Duplicates      atomic.Uint64 // copies of already resolved packets received (data, FEC or repair)
	Late            atomic.Uint64 // packets that arrived after their history ended (not delivered)

	DatagramsSent      atomic.Uint64 // unreliable payloads sent (SendUnreliable)
	DatagramsDelivered atomic.Uint64 // ... received and delivered
	Losses             atomic.Uint64 // losses given up when their history interval expired
	Abandoned          atomic.Uint64 // outstanding losses cancelled because their sender was forgotten or skipped
	DeliveredAfterDrop atomic.Uint64 // payloads of a dropped member delivered while it drained (repaired after its drop)

	LossesDetected      atomic.Uint64 // sequence numbers declared lost (N-out-of-order or session)
	RequestsSent        atomic.Uint64 // recovery requests (NAKs) sent
	RequestsImmediate   atomic.Uint64 // ... of which sent at once (probability 1/n)
	RequestsSuppressed  atomic.Uint64 // own requests not sent because another member's was heard
	RequestRetries      atomic.Uint64 // recoveries restarted after F·d without a repair
	RequestsHeard       atomic.Uint64 // requests received from other members
	RequestsHeardDup    atomic.Uint64 // requests heard for a key this member had already requested or heard requested
	RequestsIgnored     atomic.Uint64 // requests ignored within E·d of a repair
	RepairsSent         atomic.Uint64 // repairs sent
	RepairsSuppressed   atomic.Uint64 // scheduled repairs cancelled by another member's repair
	RepairsHeardDup     atomic.Uint64 // repairs received for packets this member already had
	SessionsSent        atomic.Uint64
	BadPackets          atomic.Uint64 // undecodable or invalid packets
	MembersJoined       atomic.Uint64 // members admitted (authority) or learned
	MembersDropped      atomic.Uint64 // members dropped (declared by the authority)
	DropsRepeated       atomic.Uint64 // authority: copies of its drops multicast after the first (for members that lost it)
	Pauses              atomic.Uint64 // gaps between steps long enough to be this node's own pause, not counted as the members' silence
	Withheld            atomic.Uint64 // duty mode: joins the holder left unanswered for want of a lease
	HandOvers           atomic.Uint64 // duty mode: hand-overs this member sent
	Takeovers           atomic.Uint64 // duty mode: takeovers this member won
	Campaigns           atomic.Uint64 // duty mode: campaigns this member started
	VotesCast           atomic.Uint64 // duty mode: votes for another member's campaign
	ProofsRelayed       atomic.Uint64 // duty mode: hand-overs and takeovers multicast again for a laggard
	GaveUp              atomic.Uint64 // duty mode: memberships given up for staying behind the group's epoch
	refused             [numRefusals]atomic.Uint64
	StateBuffered       atomic.Int64 // snapshot bytes the state server holds in memory now
	StateBufferedPeak   atomic.Int64 // ... the most it ever held at once
	latencySumNanos     atomic.Int64
	latencyCount        atomic.Uint64
	latencyBucketCounts [len(latencyBuckets)]atomic.Uint64
}

// Refusal says why a member, or the authority's state server, refused
// what a peer sent: every such refusal is counted by reason.
type Refusal uint8

// Refusal reasons.
const (
	// RefusedDrop: a drop without a valid signature of the authority
	// (sent by another member, or altered).
	RefusedDrop Refusal = iota
	// RefusedEstablish: an establishment (admission, ID) not signed by the
	// authority.
	RefusedEstablish
	// RefusedDeny: a denial not signed by the authority.
	RefusedDeny
	// RefusedStale: an authority-signed packet stamped outside the
	// history around this member's clock: a replay.
	RefusedStale
	// RefusedStateConns: a state-transfer connection over the server's
	// MaxConns, closed at once.
	RefusedStateConns
	// RefusedStateMemory: a snapshot that would have taken the server's
	// buffered bytes over MaxBuffered; the joiner is told to retry.
	RefusedStateMemory
	// RefusedStateRequest: a state-transfer request that was malformed or
	// did not arrive within the request timeout.
	RefusedStateRequest
	// RefusedStaleEpoch (duty mode): a decision of an epoch this member
	// has left: a former holder's.
	RefusedStaleEpoch
	// RefusedEpochAhead (duty mode): a decision or hand-over of an epoch
	// this member cannot verify yet (it missed the moves before).
	RefusedEpochAhead
	// RefusedNotHolder (duty mode): a decision from a member that does not
	// hold the duty in its epoch.
	RefusedNotHolder
	// RefusedHandover (duty mode): a hand-over not signed by the holder.
	RefusedHandover
	// RefusedTakeover (duty mode): a takeover without a majority of valid
	// votes or without its candidate's signature.
	RefusedTakeover
	// RefusedVote (duty mode): a vote not signed by its voter.
	RefusedVote
	// RefusedJoinKey (duty mode): a join request without a key, or with a
	// key GroupKey did not certify.
	RefusedJoinKey
	// RefusedJoinAnswer (duty mode): an answer to this joiner's request
	// not signed by a certified holder.
	RefusedJoinAnswer
	numRefusals
)

var refusalNames = [numRefusals]string{
	"drop_not_authority", "establish_not_authority", "deny_not_authority", "stale_membership",
	"state_conns", "state_memory", "state_request",
	"stale_epoch", "epoch_ahead", "not_holder", "handover_not_holder", "takeover_no_majority", "forged_vote",
	"join_key", "join_answer_not_certified",
}

func (r Refusal) String() string {
	if r < numRefusals {
		return refusalNames[r]
	}
	return fmt.Sprintf("refusal(%d)", uint8(r))
}

// Refuse counts one refusal.
func (m *Metrics) Refuse(r Refusal) {
	if r < numRefusals {
		m.refused[r].Add(1)
	}
}

// Refused is how many times r happened.
func (m *Metrics) Refused(r Refusal) uint64 {
	if r >= numRefusals {
		return 0
	}
	return m.refused[r].Load()
}

// latencyBuckets are the upper bounds of the perceived-latency histogram.
var latencyBuckets = [...]time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 30 * time.Millisecond, 50 * time.Millisecond, 75 * time.Millisecond,
	100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond,
	500 * time.Millisecond, time.Second,
}

func (m *Metrics) observeLatency(d time.Duration) {
	m.latencySumNanos.Add(int64(d))
	m.latencyCount.Add(1)
	for i, b := range latencyBuckets {
		if d <= b {
			m.latencyBucketCounts[i].Add(1)
			return
		}
	}
}

// MeanLatency is the mean perceived latency (receive time minus the
// sender's timestamp) over every delivery so far.
func (m *Metrics) MeanLatency() time.Duration {
	n := m.latencyCount.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(m.latencySumNanos.Load() / int64(n))
}

// Counters returns a snapshot of every counter by name, for benches and logs.
func (m *Metrics) Counters() map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range m.counters() {
		out[c.name] = c.v.Load()
	}
	for r := range numRefusals {
		out["refused_"+r.String()] = m.refused[r].Load()
	}
	return out
}

type namedCounter struct {
	name, help string
	v          *atomic.Uint64
}

func (m *Metrics) counters() []namedCounter {
	return []namedCounter{
		{"data_sent", "Data packets originated.", &m.DataSent},
		{"delivered", "Payloads delivered to the application.", &m.Delivered},
		{"delivered_fec", "Payloads delivered from forward error correction.", &m.DeliveredFEC},
		{"delivered_repair", "Payloads delivered from a repair.", &m.DeliveredRepair},
		{"duplicates", "Copies of already resolved packets received.", &m.Duplicates},
		{"late", "Packets that arrived after their history ended.", &m.Late},
		{"datagrams_sent", "Unreliable payloads sent.", &m.DatagramsSent},
		{"datagrams_delivered", "Unreliable payloads delivered.", &m.DatagramsDelivered},
		{"losses", "Losses given up when their history expired.", &m.Losses},
		{"abandoned", "Outstanding losses cancelled with their sender.", &m.Abandoned},
		{"delivered_after_drop", "Payloads of a dropped member delivered after its drop, while it drained.", &m.DeliveredAfterDrop},
		{"losses_detected", "Sequence numbers declared lost.", &m.LossesDetected},
		{"requests_sent", "Recovery requests sent.", &m.RequestsSent},
		{"requests_immediate", "Recovery requests sent at once (probability 1/n).", &m.RequestsImmediate},
		{"requests_suppressed", "Own requests suppressed by another member's request.", &m.RequestsSuppressed},
		{"request_retries", "Recoveries restarted after the retransmission timeout.", &m.RequestRetries},
		{"requests_heard", "Recovery requests received from other members.", &m.RequestsHeard},
		{"requests_heard_duplicate", "Requests heard for a key already requested.", &m.RequestsHeardDup},
		{"requests_ignored", "Requests ignored shortly after a repair.", &m.RequestsIgnored},
		{"repairs_sent", "Repairs sent.", &m.RepairsSent},
		{"repairs_suppressed", "Scheduled repairs cancelled by another member's repair.", &m.RepairsSuppressed},
		{"repairs_heard_duplicate", "Repairs received for packets already held.", &m.RepairsHeardDup},
		{"sessions_sent", "Session packets sent.", &m.SessionsSent},
		{"bad_packets", "Undecodable or invalid packets received.", &m.BadPackets},
		{"members_joined", "Members admitted or learned.", &m.MembersJoined},
		{"members_dropped", "Members dropped.", &m.MembersDropped},
		{"drops_repeated", "Copies of the authority's drops multicast after the first.", &m.DropsRepeated},
		{"pauses", "Gaps between steps taken as this node's own pause (not counted as the members' silence).", &m.Pauses},
		{"joins_withheld", "Joins the duty holder left unanswered for want of a lease.", &m.Withheld},
		{"handovers", "Hand-overs of the authority duty sent.", &m.HandOvers},
		{"takeovers", "Takeovers of the authority duty won.", &m.Takeovers},
		{"campaigns", "Campaigns for the authority duty started.", &m.Campaigns},
		{"votes_cast", "Votes cast for another member's campaign.", &m.VotesCast},
		{"proofs_relayed", "Duty moves multicast again for a member behind.", &m.ProofsRelayed},
		{"gave_up", "Memberships given up for staying behind the group's duty epoch.", &m.GaveUp},
	}
}

// Collector exposes m to Prometheus as crimp_<name>_total counters and the
// crimp_perceived_latency_seconds histogram, with the given constant labels
// (e.g. the member ID). The caller registers it.
func (m *Metrics) Collector(constLabels prometheus.Labels) prometheus.Collector {
	c := &collector{m: m}
	for _, nc := range m.counters() {
		c.descs = append(c.descs, prometheus.NewDesc("crimp_"+nc.name+"_total", nc.help, nil, constLabels))
	}
	c.latency = prometheus.NewDesc("crimp_perceived_latency_seconds",
		"Receive time minus the sender's timestamp of delivered packets.", nil, constLabels)
	c.buffered = prometheus.NewDesc("crimp_state_buffered_bytes",
		"Snapshot bytes the state-transfer server holds in memory.", nil, constLabels)
	c.refused = prometheus.NewDesc("crimp_refused_total",
		"Membership packets and state-transfer requests refused, by reason.", []string{"reason"}, constLabels)
	return c
}

type collector struct {
	m        *Metrics
	descs    []*prometheus.Desc
	latency  *prometheus.Desc
	refused  *prometheus.Desc
	buffered *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	ch <- c.latency
	ch <- c.refused
	ch <- c.buffered
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for i, nc := range c.m.counters() {
		ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.CounterValue, float64(nc.v.Load()))
	}
	buckets := make(map[float64]uint64, len(latencyBuckets))
	var cum uint64
	for i, b := range latencyBuckets {
		cum += c.m.latencyBucketCounts[i].Load()
		buckets[b.Seconds()] = cum
	}
	ch <- prometheus.MustNewConstMetric(c.buffered, prometheus.GaugeValue, float64(c.m.StateBuffered.Load()))
	for r := range numRefusals {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(c.m.refused[r].Load()), r.String())
	}
	ch <- prometheus.MustNewConstHistogram(c.latency, c.m.latencyCount.Load(),
		time.Duration(c.m.latencySumNanos.Load()).Seconds(), buckets)
}
