package mirror

import (
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/game"
)

// What the event protocol (event.go) keeps for inspection and counts: each
// mirror's log of the authority's events and decisions, and its metrics.

// eventLog is a mirror's log of the authority's consistent events (by
// tick, parts assembled) and decisions: what the authority multicast, as
// this mirror received it.
type eventLog struct {
	ticks     map[uint64]*loggedTick
	decisions map[actionKey]uint64
}

type loggedTick struct {
	parts [][]game.Event
	got   int
}

func (l *eventLog) addPart(p *consistentPart) {
	if l.ticks == nil {
		l.ticks = map[uint64]*loggedTick{}
	}
	lt := l.ticks[p.tick]
	if lt == nil {
		if len(l.ticks) >= maxLogTicks {
			l.trim()
		}
		lt = &loggedTick{parts: make([][]game.Event, p.parts)}
		l.ticks[p.tick] = lt
	}
	if int(p.parts) != len(lt.parts) || lt.parts[p.part] != nil {
		return
	}
	lt.parts[p.part] = p.events
	lt.got++
}

// trim forgets the older half of the log.
func (l *eventLog) trim() {
	ticks := make([]uint64, 0, len(l.ticks))
	for t := range l.ticks {
		ticks = append(ticks, t)
	}
	slices.Sort(ticks)
	for _, t := range ticks[:len(ticks)/2] {
		delete(l.ticks, t)
	}
}

func (l *eventLog) addDecision(k actionKey, t uint64) {
	if l.decisions == nil {
		l.decisions = map[actionKey]uint64{}
	}
	if len(l.decisions) >= maxLogDecisions {
		// Forget the older half, by tick.
		ticks := slices.Sorted(maps.Values(l.decisions))
		cut := ticks[len(ticks)/2]
		maps.DeleteFunc(l.decisions, func(_ actionKey, t uint64) bool { return t < cut })
	}
	l.decisions[k] = t
}

// LoggedEvents are a mirror's log of authoritative events: the
// consistent events of each complete tick and each decision's tick.
type LoggedEvents struct {
	Ticks     map[uint64][]game.Event
	Decisions map[string]uint64 // "m<mirror>#<seq>" → tick
}

// AuthoritativeLog returns this mirror's log of the authority's consistent
// events (complete ticks only) and decisions.
func (s *Server) AuthoritativeLog() LoggedEvents {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := LoggedEvents{Ticks: map[uint64][]game.Event{}, Decisions: map[string]uint64{}}
	for t, lt := range s.ev.log.ticks {
		if lt.got != len(lt.parts) {
			continue
		}
		out.Ticks[t] = slices.Concat(lt.parts...)
	}
	for k, t := range s.ev.log.decisions {
		out.Decisions[fmt.Sprintf("m%d#%d", k.mirror, k.seq)] = t
	}
	return out
}

// eventMetrics are the event protocol's counters.
type eventMetrics struct {
	movesSent, movesTaken, movesRedundant, movesLate atomic.Uint64
	actionsSent                                      atomic.Uint64
	decided, decidedLate                             atomic.Uint64
	undecided, reconciled                            atomic.Uint64
	authoritative, applied, appliedLate              atomic.Uint64
	decisionDelaySum, decisionDelayCount             atomic.Int64
}

var (
	descEvMoves      = prometheus.NewDesc("mirror_event_moves_total", "Event protocol: moves sent by this ingress, and received (taken, redundant copies, too late).", []string{"result"}, nil)
	descEvActions    = descCounter("mirror_event_actions_sent_total", "Event protocol: actions (eat, pick up, attack) this ingress sent to the authority.")
	descEvDecided    = descCounter("mirror_event_decided_total", "Event protocol: actions the authority decided (this mirror holding the authority).")
	descEvLate       = descCounter("mirror_event_decided_late_total", "Event protocol: ... of which decided in the tick they arrived in, not their own.")
	descEvUndecided  = descCounter("mirror_event_undecided_total", "Event protocol: actions no decision reached within three CRIMP histories.")
	descEvReconciled = descCounter("mirror_event_reconciled_total", "Event protocol: resets that took back a guess the authority decided for another tick.")
	descEvAuth       = descCounter("mirror_event_authoritative_total", "Event protocol: consistent events of the authority logged.")
	descEvDelay      = descCounter("mirror_event_decision_delay_seconds_mean", "Event protocol: mean time from an action's stamp to its decision arriving here.")
)

func (m *eventMetrics) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEvMoves, descEvActions, descEvDecided, descEvLate, descEvUndecided, descEvReconciled, descEvAuth, descEvDelay} {
		ch <- d
	}
}

func (m *eventMetrics) collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(descEvMoves, m.movesSent.Load(), "sent")
	counter(descEvMoves, m.movesTaken.Load(), "taken")
	counter(descEvMoves, m.movesRedundant.Load(), "redundant")
	counter(descEvMoves, m.movesLate.Load(), "too_late")
	counter(descEvActions, m.actionsSent.Load())
	counter(descEvDecided, m.decided.Load())
	counter(descEvLate, m.decidedLate.Load())
	counter(descEvUndecided, m.undecided.Load())
	counter(descEvReconciled, m.reconciled.Load())
	counter(descEvAuth, m.authoritative.Load())
	ch <- prometheus.MustNewConstMetric(descEvDelay, prometheus.GaugeValue, m.meanDelay().Seconds())
}

func (m *eventMetrics) meanDelay() time.Duration {
	n := m.decisionDelayCount.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(m.decisionDelaySum.Load() / n)
}

// EventStats are the event protocol's counters.
type EventStats struct {
	MovesSent, MovesTaken, MovesRedundant, MovesLate uint64
	ActionsSent                                      uint64
	Decided, DecidedLate, Undecided, Reconciled      uint64
	Authoritative                                    uint64
	// Applied counts the decisions this mirror took into its states (its
	// own as the holder and those it heard); AppliedLate those of them
	// that put their action in a later tick than its own.
	Applied, AppliedLate uint64
	// DecisionDelay is the mean time from an action's stamp to its
	// decision arriving at (or, at the authority, being taken by) this
	// mirror: the consistent-event delay.
	DecisionDelay time.Duration
}

func (m *eventMetrics) stats() EventStats {
	return EventStats{
		MovesSent: m.movesSent.Load(), MovesTaken: m.movesTaken.Load(), MovesRedundant: m.movesRedundant.Load(), MovesLate: m.movesLate.Load(),
		ActionsSent: m.actionsSent.Load(), Decided: m.decided.Load(), DecidedLate: m.decidedLate.Load(),
		Undecided: m.undecided.Load(), Reconciled: m.reconciled.Load(), Authoritative: m.authoritative.Load(), Applied: m.applied.Load(), AppliedLate: m.appliedLate.Load(),
		DecisionDelay: m.meanDelay(),
	}
}
