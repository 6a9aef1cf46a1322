package duty

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

func (m *Metrics) counters() []struct {
	name, help string
	v          *atomic.Uint64
} {
	return []struct {
		name, help string
		v          *atomic.Uint64
	}{
		{"handovers", "CRIMP duty handed to the arbiter's holder.", &m.HandOvers},
		{"handover_waits", "Hand-overs put off for want of a lease.", &m.HandOverWaits},
		{"campaigns", "Campaigns started for the CRIMP duty.", &m.Campaigns},
		{"expels", "Arbiter members expelled after a CRIMP drop.", &m.Expels},
		{"rejoins", "Rejoins after this member was dropped.", &m.Rejoins},
		{"bad_payloads", "CRIMP payloads without a known tag.", &m.BadPayloads},
		{"arbiter_refused", "Arbiter messages the arbiter refused (by reason in arbiter_refused_total).", &m.ArbiterRefused},
		{"send_errors", "Arbiter messages CRIMP would not send.", &m.SendErrors},
	}
}

// Counters returns a snapshot of every counter by name.
func (m *Metrics) Counters() map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range m.counters() {
		out[c.name] = c.v.Load()
	}
	return out
}

// Collector exposes m to Prometheus as duty_<name>_total counters with the
// given constant labels. The CRIMP member's and the arbiter's own
// collectors (with their refusals by reason) are registered beside it.
func (m *Metrics) Collector(constLabels prometheus.Labels) prometheus.Collector {
	c := &collector{m: m}
	for _, nc := range m.counters() {
		c.descs = append(c.descs, prometheus.NewDesc("duty_"+nc.name+"_total", nc.help, nil, constLabels))
	}
	return c
}

type collector struct {
	m     *Metrics
	descs []*prometheus.Desc
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	for i, nc := range c.m.counters() {
		ch <- prometheus.MustNewConstMetric(c.descs[i], prometheus.CounterValue, float64(nc.v.Load()))
	}
}
