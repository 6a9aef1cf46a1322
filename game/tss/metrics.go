package tss

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what one synchronizer did. It is updated by the
// synchronizer's owner and read at any time (a Prometheus scrape, a bench),
// hence the atomics.
type Metrics struct {
	Accepted     atomic.Uint64 // commands filed
	Executed     atomic.Uint64 // command executions by all states, re-executions included
	Reexecuted   atomic.Uint64 // ... of which re-executions after a rollback
	Ticks        atomic.Uint64 // tick executions by all states, re-executions included
	Rollbacks    atomic.Uint64 // rollbacks, cascades included (each one state copy)
	RollbackTick atomic.Uint64 // ticks re-executed by rollbacks, summed
	Copies       atomic.Uint64 // state copies outside rollbacks (SetDelays, Reset)
	TooLate      atomic.Uint64 // commands later than the last delay, dropped
	Duplicates   atomic.Uint64 // commands whose (mirror, seq) was already accepted
	Future       atomic.Uint64 // commands stamped beyond now + MaxSkew
	Overflow     atomic.Uint64 // commands refused because MaxPending were waiting
	Unchecked    atomic.Uint64 // ticks a trailing state could not compare (no leader record, after SetDelays/Reset)
	Checkpoints  atomic.Uint64
	Reconfigured atomic.Uint64 // SetDelays calls applied
	Resets       atomic.Uint64

	execNanos     atomic.Int64
	rollbackNanos atomic.Int64
	// by detecting trailing state (index 1..k) and by state: commands that
	// state executed out of order (it had passed their tick on arrival)
	rollbacksBy [MaxStates]atomic.Uint64
	outOfOrder  [MaxStates]atomic.Uint64

	depthCounts         [len(depthBuckets)]atomic.Uint64
	latencySum          atomic.Int64
	latencyCount        atomic.Uint64
	latencyBucketCounts [len(latencyBuckets)]atomic.Uint64
}

// depthBuckets are the upper bounds (ticks) of the rollback depth histogram.
var depthBuckets = [...]uint64{0, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500}

// latencyBuckets are the upper bounds of the arrival latency histogram
// (arrival time minus stamp): what ChooseDelays needs.
var latencyBuckets = [...]time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
	20 * time.Millisecond, 30 * time.Millisecond, 50 * time.Millisecond, 75 * time.Millisecond,
	100 * time.Millisecond, 150 * time.Millisecond, 200 * time.Millisecond, 300 * time.Millisecond,
	500 * time.Millisecond, time.Second,
}

func (m *Metrics) observeRollback(by int, depth uint64) {
	m.Rollbacks.Add(1)
	m.RollbackTick.Add(depth)
	m.rollbacksBy[by].Add(1)
	for i, b := range depthBuckets {
		if depth <= b {
			m.depthCounts[i].Add(1)
			return
		}
	}
}

func (m *Metrics) observeLatency(d time.Duration) {
	m.latencySum.Add(int64(d))
	m.latencyCount.Add(1)
	for i, b := range latencyBuckets {
		if d <= b {
			m.latencyBucketCounts[i].Add(1)
			return
		}
	}
}

// ExecTime is the time spent executing ticks (re-executions included), if
// the synchronizer was given a CostClock.
func (m *Metrics) ExecTime() time.Duration { return time.Duration(m.execNanos.Load()) }

// RollbackTime is the time spent copying states and requeueing commands
// (the paper's rollback cost), if the synchronizer was given a CostClock.
func (m *Metrics) RollbackTime() time.Duration { return time.Duration(m.rollbackNanos.Load()) }

// RollbacksBy is the number of rollbacks found by trailing state i.
func (m *Metrics) RollbacksBy(i int) uint64 {
	if i < 0 || i >= MaxStates {
		return 0
	}
	return m.rollbacksBy[i].Load()
}

// OutOfOrder is the number of commands state i executed out of order.
func (m *Metrics) OutOfOrder(i int) uint64 {
	if i < 0 || i >= MaxStates {
		return 0
	}
	return m.outOfOrder[i].Load()
}

// LatencyHistogram returns the arrival latency histogram: bucket upper
// bounds and the count in each (not cumulative), plus the count above the
// last bound.
func (m *Metrics) LatencyHistogram() (bounds []time.Duration, counts []uint64, over uint64) {
	var in uint64
	for i, b := range latencyBuckets {
		bounds = append(bounds, b)
		c := m.latencyBucketCounts[i].Load()
		counts = append(counts, c)
		in += c
	}
	return bounds, counts, m.latencyCount.Load() - in
}

type namedCounter struct {
	name, help string
	v          *atomic.Uint64
}

func (m *Metrics) counters() []namedCounter {
	return []namedCounter{
		{"accepted", "Commands filed by the synchronizer.", &m.Accepted},
		{"executed", "Command executions by all states, re-executions included.", &m.Executed},
		{"reexecuted", "Command re-executions after rollbacks.", &m.Reexecuted},
		{"ticks", "Tick executions by all states, re-executions included.", &m.Ticks},
		{"rollback_ticks", "Ticks re-executed by rollbacks.", &m.RollbackTick},
		{"copies", "State copies outside rollbacks (delay changes, resets).", &m.Copies},
		{"too_late", "Commands later than the last delay, dropped.", &m.TooLate},
		{"unchecked", "Ticks a trailing state had no leader record to compare with.", &m.Unchecked},
		{"checkpoints", "Checkpoints of the last state.", &m.Checkpoints},
		{"reconfigured", "Delay changes applied.", &m.Reconfigured},
		{"resets", "Resyncs from a transferred state.", &m.Resets},
	}
}

// Counters returns a snapshot of every counter by name, for benches, logs
// and reports.
func (m *Metrics) Counters() map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range m.counters() {
		out[c.name] = c.v.Load()
	}
	out["rollbacks"] = m.Rollbacks.Load()
	out["duplicates"] = m.Duplicates.Load()
	out["future"] = m.Future.Load()
	out["overflow"] = m.Overflow.Load()
	return out
}

// Collector exposes m to Prometheus with the given constant labels (e.g.
// the mirror ID): tss_<counter>_total, tss_rollbacks_total{state} (by the
// trailing state that found the mismatch), tss_refused_total{reason}
// (duplicate, future, overflow), tss_execution_seconds_total,
// tss_rollback_seconds_total, tss_rollback_depth_ticks and
// tss_arrival_latency_seconds histograms. The caller registers it.
func (m *Metrics) Collector(constLabels prometheus.Labels) prometheus.Collector {
	c := &collector{m: m}
	for _, nc := range m.counters() {
		c.descs = append(c.descs, prometheus.NewDesc("tss_"+nc.name+"_total", nc.help, nil, constLabels))
	}
	c.rollbacks = prometheus.NewDesc("tss_rollbacks_total", "Rollbacks by the trailing state that found the mismatch.", []string{"state"}, constLabels)
	c.refused = prometheus.NewDesc("tss_refused_total", "Commands refused, by reason.", []string{"reason"}, constLabels)
	c.exec = prometheus.NewDesc("tss_execution_seconds_total", "Time spent executing ticks, re-executions included.", nil, constLabels)
	c.rollbackTime = prometheus.NewDesc("tss_rollback_seconds_total", "Time spent copying states and requeueing commands.", nil, constLabels)
	c.depth = prometheus.NewDesc("tss_rollback_depth_ticks", "Ticks re-executed per rollback.", nil, constLabels)
	c.latency = prometheus.NewDesc("tss_arrival_latency_seconds", "Arrival time minus stamp of accepted commands.", nil, constLabels)
	return c
}

type collector struct {
	m                                                      *Metrics
	descs                                                  []*prometheus.Desc
	rollbacks, refused, exec, rollbackTime, depth, latency *prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{c.rollbacks, c.refused, c.exec, c.rollbackTime, c.depth, c.latency} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	for i, nc := range m.counters() {
		ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.CounterValue, float64(nc.v.Load()))
	}
	for i := 1; i < MaxStates; i++ {
		if n := m.rollbacksBy[i].Load(); n > 0 {
			ch <- prometheus.MustNewConstMetric(c.rollbacks, prometheus.CounterValue, float64(n), strconv.Itoa(i))
		}
	}
	for _, r := range []struct {
		reason string
		v      *atomic.Uint64
	}{{"duplicate", &m.Duplicates}, {"future", &m.Future}, {"overflow", &m.Overflow}} {
		ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(r.v.Load()), r.reason)
	}
	ch <- prometheus.MustNewConstMetric(c.exec, prometheus.CounterValue, m.ExecTime().Seconds())
	ch <- prometheus.MustNewConstMetric(c.rollbackTime, prometheus.CounterValue, m.RollbackTime().Seconds())

	depth := make(map[float64]uint64, len(depthBuckets))
	var cum uint64
	for i, b := range depthBuckets {
		cum += m.depthCounts[i].Load()
		depth[float64(b)] = cum
	}
	ch <- prometheus.MustNewConstHistogram(c.depth, m.Rollbacks.Load(), float64(m.RollbackTick.Load()), depth)

	lat := make(map[float64]uint64, len(latencyBuckets))
	cum = 0
	for i, b := range latencyBuckets {
		cum += m.latencyBucketCounts[i].Load()
		lat[b.Seconds()] = cum
	}
	ch <- prometheus.MustNewConstHistogram(c.latency, m.latencyCount.Load(), time.Duration(m.latencySum.Load()).Seconds(), lat)
}
