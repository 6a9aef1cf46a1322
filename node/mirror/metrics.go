package mirror

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Refusal reasons, as mirror_refused_total{reason} counts them.
const (
	refusedBadFrame           = "undecodable_frame"  // a client frame that does not decode or validate
	refusedOversized          = "oversized_frame"    // a client frame over MaxClientFrame
	refusedTextFrame          = "text_frame"         // a WebSocket text frame
	refusedBadToken           = "bad_token"          // a token that does not verify for the key presented
	refusedBadSignature       = "bad_signature"      // a hello not signed by the token's peer key
	refusedBadKey             = "bad_key"            // a hello key that does not parse
	refusedOutOfOrder         = "out_of_order_frame" // hello twice, input before hello, reauth before hello
	refusedWrongPlayer        = "wrong_player"       // an input naming another player than the session's
	refusedDuplicateInput     = "duplicate_input"    // an input whose seq the session already had
	refusedCoalesced          = "coalesced_input"    // a second input in one tick (the last one wins)
	refusedRateLimited        = "rate_limited"       // frames beyond the session's rate
	refusedSessionLimit       = "session_limit"      // a client beyond MaxSessions
	refusedNotReady           = "not_ready"          // a client while the mirror has no state
	refusedHelloTimeout       = "hello_timeout"      // no hello in time
	refusedReauth             = "bad_reauth"         // a reauth for another account or key
	refusedPayload            = "undecodable_payload"
	refusedForged             = "forged_sender" // a command whose mirror is not its CRIMP sender
	refusedFuture             = "future_stamp"  // a stamp beyond now + MaxSkew
	refusedDuplicate          = "duplicate_command"
	refusedTooLate            = "too_late"
	refusedOverflow           = "overflow"
	refusedNotIngress         = "not_ingress" // a command for a player from a mirror not its ingress (counted by the confirmed state)
	refusedNotAuthority       = "release_not_authority"
	refusedAuthoritySignature = "authority_bad_signature" // a signed message whose signature does not verify with the authority's key
	refusedAuthorityUnsigned  = "authority_unsigned"      // a release or authority checkpoint without its signature, or signed but sent by another mirror
	refusedUnsigned           = "unsigned"                // rotate mode: a command or moves without its sender's signature
	refusedBuffer             = "join_buffer_full"        // commands beyond the buffer kept while joining
	refusedBeforeState        = "before_state"            // commands older than the state this mirror started from (recovered history)
	refusedProtocol           = "wrong_protocol"          // a message the group's protocol does not carry, or not that way (moves only unreliably)
	refusedActionOverflow     = "actions_overflow"        // actions beyond the undecided ones a mirror keeps (event protocol)
)

// metrics are the server's counters, as atomics (tests and the status
// line read them) and as a Prometheus collector.
type metrics struct {
	mirror string

	mu      sync.Mutex
	refused map[string]*atomic.Uint64

	commandsSent, commandsReceived atomic.Uint64
	checkpointsAgreed              atomic.Uint64
	checkpointsMismatched          atomic.Uint64
	resyncs, resyncsFailed         atomic.Uint64
	dumps                          atomic.Uint64
	updatesSent, updateBytes       atomic.Uint64
	updatesDropped                 atomic.Uint64
	vfcFailures                    atomic.Uint64
	inputsReceived                 atomic.Uint64
	sessionsOpened, sessionsClosed atomic.Uint64
	saves, savesFailed             atomic.Uint64
	leaveSavesBy                   [leaveSaveKinds]atomic.Uint64
	savesInFlight                  atomic.Int64
	releases                       atomic.Uint64
	orphanLeaves                   atomic.Uint64
	leadingRollbacks               atomic.Uint64
	sessions                       atomic.Int64
	leadingTick, confirmedTick     atomic.Uint64
	skewAlarm                      atomic.Bool
	ready                          atomic.Bool

	skew func() map[string]PeerSkew
	// confirmed returns the refusals the last state counted (they are part
	// of the synchronized state, so every mirror counts them alike).
	confirmed func() map[string]uint64
	notReady  atomic.Value // string: why the mirror is not ready
	ev        eventMetrics
}

func newMetrics() *metrics { return &metrics{refused: map[string]*atomic.Uint64{}} }

func (m *metrics) refuse(reason string) {
	m.mu.Lock()
	c := m.refused[reason]
	if c == nil {
		c = &atomic.Uint64{}
		m.refused[reason] = c
	}
	m.mu.Unlock()
	c.Add(1)
}

// Refused returns the refusal counts by reason.
func (m *metrics) Refused() map[string]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]uint64, len(m.refused))
	for k, v := range m.refused {
		out[k] = v.Load()
	}
	return out
}

var (
	descRefused    = prometheus.NewDesc("mirror_refused_total", "Messages and commands refused, by reason.", []string{"reason"}, nil)
	descCounter    = func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	descSent       = descCounter("mirror_commands_sent_total", "Commands this mirror stamped as ingress and multicast.")
	descReceived   = descCounter("mirror_commands_received_total", "Commands received from other mirrors over CRIMP.")
	descAgreed     = descCounter("mirror_checkpoints_agreed_total", "Comparisons of a last-state hash with another mirror's that matched.")
	descMismatched = descCounter("mirror_hash_mismatches_total", "Comparisons of a last-state hash with another mirror's that did not match.")
	descResyncs    = prometheus.NewDesc("mirror_resyncs_total", "State transfers from the authority after a mismatch, by result.", []string{"result"}, nil)
	descDumps      = descCounter("mirror_state_dumps_total", "States written to the data dir after a mismatch.")
	descUpdates    = descCounter("mirror_updates_sent_total", "State updates sent to clients.")
	descUpBytes    = descCounter("mirror_update_bytes_total", "Bytes of state updates sent to clients.")
	descUpDropped  = descCounter("mirror_updates_dropped_total", "Updates dropped because a client's queue was full.")
	descVFCFailed  = descCounter("mirror_vfc_failures_total", "Egress frames vector-field consistency could not compute (clients got only their own player).")
	descInputs     = descCounter("mirror_inputs_received_total", "Input frames received from clients.")
	descSessions   = descCounter("mirror_sessions", "Client sessions open.")
	descSaves      = prometheus.NewDesc("mirror_character_saves_total", "Character saves to the account server, by result.", []string{"result"}, nil)
	descLeaveSaves = prometheus.NewDesc("mirror_leave_saves_total", "Characters of leaving players read for saving, by how the state they come from was confirmed: reference (the authority's own state), agreed (its hash matched ours after the leave), unconfirmed (our own reading, unconfirmed in time).", []string{"confirmation"}, nil)
	descReleases   = descCounter("mirror_releases_total", "Releases of a dropped mirror's players (authority).")
	descOrphans    = descCounter("mirror_orphan_leaves_total", "Leaves sent for players the game had on this mirror without a session here (their own leave had come too late to the others).")
	descLeadRb     = descCounter("mirror_leading_rollbacks_total", "Rollbacks of the leading state (the ones clients see).")
	descTicks      = prometheus.NewDesc("mirror_tick", "The tick of the leading and the last (confirmed) state.", []string{"state"}, nil)
	descSkew       = prometheus.NewDesc("mirror_clock_skew_seconds", "Another mirror's clock minus ours, from CRIMP session echoes.", []string{"peer"}, nil)
	descSkewErr    = prometheus.NewDesc("mirror_clock_skew_uncertainty_seconds", "Half the round trip of the skew sample: the skew is within ± this.", []string{"peer"}, nil)
	descSkewAlarm  = descCounter("mirror_clock_skew_alarm", "1 while another mirror's clock is certainly off by more than MaxSkew.")
	descReady      = descCounter("mirror_ready", "1 while the mirror serves clients (state in place, clocks within MaxSkew).")
)

func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRefused, descSent, descReceived, descAgreed, descMismatched, descResyncs, descDumps,
		descUpdates, descUpBytes, descUpDropped, descVFCFailed, descInputs, descSessions, descSaves, descLeaveSaves, descReleases, descOrphans, descLeadRb, descTicks,
		descSkew, descSkewErr, descSkewAlarm, descReady} {
		ch <- d
	}
	m.ev.describe(ch)
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	refused := m.Refused()
	if m.confirmed != nil {
		for reason, n := range m.confirmed() {
			refused[reason] = n
		}
	}
	for reason, n := range refused {
		ch <- prometheus.MustNewConstMetric(descRefused, prometheus.CounterValue, float64(n), reason)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter(descSent, m.commandsSent.Load())
	counter(descReceived, m.commandsReceived.Load())
	counter(descAgreed, m.checkpointsAgreed.Load())
	counter(descMismatched, m.checkpointsMismatched.Load())
	ch <- prometheus.MustNewConstMetric(descResyncs, prometheus.CounterValue, float64(m.resyncs.Load()), "ok")
	ch <- prometheus.MustNewConstMetric(descResyncs, prometheus.CounterValue, float64(m.resyncsFailed.Load()), "failed")
	counter(descDumps, m.dumps.Load())
	counter(descUpdates, m.updatesSent.Load())
	counter(descUpBytes, m.updateBytes.Load())
	counter(descUpDropped, m.updatesDropped.Load())
	counter(descVFCFailed, m.vfcFailures.Load())
	counter(descInputs, m.inputsReceived.Load())
	gauge(descSessions, float64(m.sessions.Load()))
	ch <- prometheus.MustNewConstMetric(descSaves, prometheus.CounterValue, float64(m.saves.Load()), "ok")
	ch <- prometheus.MustNewConstMetric(descSaves, prometheus.CounterValue, float64(m.savesFailed.Load()), "failed")
	for k, label := range leaveSaveLabels {
		ch <- prometheus.MustNewConstMetric(descLeaveSaves, prometheus.CounterValue, float64(m.leaveSavesBy[k].Load()), label)
	}
	counter(descReleases, m.releases.Load())
	counter(descOrphans, m.orphanLeaves.Load())
	counter(descLeadRb, m.leadingRollbacks.Load())
	gauge(descTicks, float64(m.leadingTick.Load()), "leading")
	gauge(descTicks, float64(m.confirmedTick.Load()), "confirmed")
	if m.skew != nil {
		for peer, s := range m.skew() {
			gauge(descSkew, s.Offset.Seconds(), peer)
			gauge(descSkewErr, s.Uncertainty.Seconds(), peer)
		}
	}
	gauge(descSkewAlarm, b2f(m.skewAlarm.Load()))
	gauge(descReady, b2f(m.ready.Load()))
	m.ev.collect(ch)
}

// How a leaving player's saved character was confirmed
// (mirror_leave_saves_total's label).
const (
	leaveSaveReference   = iota // read from the authority's state: this mirror holds the duty, or a resync brought it
	leaveSaveAgreed             // the authority's hash of a checkpoint after the leave matched ours
	leaveSaveUnconfirmed        // no agreement in time (or this mirror left the group): our own reading
	leaveSaveKinds
)

var leaveSaveLabels = [leaveSaveKinds]string{"reference", "agreed", "unconfirmed"}

func (m *metrics) leaveSaves(kind int) { m.leaveSavesBy[kind].Add(1) }

func (m *metrics) pendingSaves() int { return int(m.savesInFlight.Load()) }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func peerLabel(id uint32) string { return strconv.FormatUint(uint64(id), 10) }
