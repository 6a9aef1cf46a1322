package tss

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The collector exports what the synchronizer counted: the fig. 3.1 run's
// rollback (by state 1) and a refused future stamp.
func TestMetricsCollector(t *testing.T) {
	ms := func(v int64) int64 { return v * int64(time.Millisecond) }
	s, err := newFxSync(Config{Delays: []time.Duration{0, 100 * time.Millisecond, 200 * time.Millisecond}, TickPeriod: 50 * time.Millisecond}, Options[fxCmd]{CostClock: func() time.Duration { return time.Duration(time.Now().UnixNano()) }})
	if err != nil {
		t.Fatal(err)
	}
	s.Deliver(fxCmd{Stamp: ms(200), Mirror: 2, Seq: 1, Player: 1, Op: fxFire}, ms(225))
	s.Deliver(fxCmd{Stamp: ms(900), Mirror: 2, Seq: 2, Player: 1, Op: fxFire}, ms(226))
	s.Tick(ms(1000))
	reg := prometheus.NewRegistry()
	if err := reg.Register(s.Metrics().Collector(prometheus.Labels{"mirror": "1"})); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() != "mirror" {
					name += "{" + l.GetValue() + "}"
				}
			}
			switch {
			case m.Counter != nil:
				got[name] = m.GetCounter().GetValue()
			case m.Histogram != nil:
				got[name] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	for name, want := range map[string]float64{
		"tss_rollbacks_total{1}":       1,
		"tss_refused_total{future}":    1,
		"tss_refused_total{duplicate}": 0,
		"tss_accepted_total":           1,
		"tss_rollback_depth_ticks":     1,
		"tss_arrival_latency_seconds":  1,
		"tss_too_late_total":           0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	if got["tss_execution_seconds_total"] <= 0 {
		t.Error("no execution time measured")
	}
}
