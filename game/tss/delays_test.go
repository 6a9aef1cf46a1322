package tss

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// lanLatencies models two mirrors on a LAN bridge: half the commands are
// local (no latency), the rest cross a 25 ms link with 10 ms of jitter, and
// 5 % of those are lost once and repaired about 100 ms later.
func lanLatencies(n int, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 3))
	out := make([]time.Duration, n)
	for i := range out {
		if rng.IntN(2) == 0 {
			continue
		}
		d := 25*time.Millisecond + time.Duration(rng.Int64N(int64(10*time.Millisecond)))
		if rng.IntN(20) == 0 {
			d += 80*time.Millisecond + time.Duration(rng.Int64N(int64(40*time.Millisecond)))
		}
		out[i] = d
	}
	return out
}

func lanModel() DelayModel {
	return DelayModel{
		Latency:     NewDistribution(lanLatencies(20000, 1)),
		Rate:        200,
		TickPeriod:  time.Second / 30,
		CommandCost: 20 * time.Microsecond,
		TickCost:    60 * time.Microsecond,
		CopyCost:    300 * time.Microsecond,
		History:     time.Second,
	}
}

func TestChooseDelays(t *testing.T) {
	m := lanModel()
	c, err := ChooseDelays(m)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chose %v: %+v (tail %v)", c.Delays, c.Predicted, c.Tail)
	k := len(c.Delays) - 1
	if k < 1 || k > 4 {
		t.Fatalf("%d trailing states", k)
	}
	if !c.TailCovered || c.Delays[k] < c.Tail+m.TickPeriod || c.Tail != m.Latency.Quantile(1) || m.Predict(c.Delays).TooLate != 0 {
		t.Fatalf("last delay %v does not cover the largest latency %v plus a tick", c.Delays[k], c.Tail)
	}
	// MIRROR_MODE.md's rule, p99.9 + one tick, on request.
	m999 := m
	m999.Quantile = 0.999
	c999, err := ChooseDelays(m999)
	if err != nil {
		t.Fatal(err)
	}
	if last := c999.Delays[len(c999.Delays)-1]; c999.Tail != m.Latency.Quantile(0.999) || last < c999.Tail+m.TickPeriod || last > c999.Tail+m.TickPeriod+time.Millisecond {
		t.Fatalf("with q=0.999: last delay %v, tail %v", last, c999.Tail)
	}
	if c.Delays[0] != 0 || c.Delays[1]-c.Delays[0] > 100*time.Millisecond {
		t.Fatalf("first gap %v over 100 ms", c.Delays[1]-c.Delays[0])
	}
	if !slices.IsSorted(c.Delays) {
		t.Fatalf("delays %v not increasing", c.Delays)
	}
	// No other configuration with the same last delay is predicted cheaper.
	rng := rand.New(rand.NewPCG(9, 9))
	for range 2000 {
		n := rng.IntN(4)
		inner := map[time.Duration]bool{}
		for len(inner) < n {
			inner[time.Duration(1+rng.Int64N(int64(c.Delays[k]/time.Millisecond)-1))*time.Millisecond] = true
		}
		d := []time.Duration{0}
		for v := range inner {
			d = append(d, v)
		}
		slices.Sort(d[1:])
		d = append(d, c.Delays[k])
		if d[1] > 100*time.Millisecond {
			continue
		}
		if p := m.Predict(d); p.Total < c.Predicted.Total {
			t.Fatalf("%v predicted at %v, below the choice %v at %v", d, p.Total, c.Delays, c.Predicted.Total)
		}
	}
	// The paper's configurations, for the record.
	for _, d := range [][]time.Duration{{0, 50}, {0, 100}, {0, 50, 100}, {0, 100, 1000}, {0, 50, 100, 150}, {0, 50, 100, 500}, {0, 50, 500, 1000}} {
		for i := range d {
			d[i] *= time.Millisecond
		}
		t.Logf("paper %v: %+v", d, m.Predict(d))
	}
}

func TestChooseDelaysBounds(t *testing.T) {
	m := lanModel()
	m.History = 100 * time.Millisecond
	c, err := ChooseDelays(m)
	if err != nil {
		t.Fatal(err)
	}
	if c.TailCovered || c.Delays[len(c.Delays)-1] != 100*time.Millisecond {
		t.Fatalf("history of 100 ms: chose %v, tail covered %v", c.Delays, c.TailCovered)
	}
	if err := (Config{Delays: c.Delays, History: m.History}).WithDefaults().Validate(); err != nil {
		t.Fatalf("choice fails Validate: %v", err)
	}
	// A slow tail: more than 100 ms to cover needs an inner delay.
	m = lanModel()
	m.MaxTrailing = 1
	m.Latency = NewDistribution([]time.Duration{0, 300 * time.Millisecond})
	c, err = ChooseDelays(m)
	if err != nil {
		t.Fatal(err)
	}
	if c.Delays[1]-c.Delays[0] > 100*time.Millisecond {
		t.Fatalf("chose %v with one trailing state allowed: first gap over 100 ms", c.Delays)
	}
	if _, err := ChooseDelays(DelayModel{}); err == nil {
		t.Fatal("a model without a tick period accepted")
	}
}

func TestDistributionFromHistogram(t *testing.T) {
	samples := lanLatencies(50000, 2)
	exact := NewDistribution(samples)
	m := &Metrics{}
	for _, s := range samples {
		m.observeLatency(s)
	}
	bounds, counts, over := m.LatencyHistogram()
	h, err := DistributionFromHistogram(bounds, counts, over)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 100 * time.Millisecond, time.Second} {
		if d := h.CDF(x) - exact.CDF(x); d > 0.2 || d < -0.2 {
			t.Errorf("CDF(%v): histogram %.3f, samples %.3f", x, h.CDF(x), exact.CDF(x))
		}
	}
	if q := h.Quantile(0.999); q < 100*time.Millisecond || q > 150*time.Millisecond {
		t.Errorf("p99.9 from the histogram %v, samples %v", q, exact.Quantile(0.999))
	}
	if _, err := DistributionFromHistogram(nil, nil, 0); err == nil {
		t.Error("empty histogram accepted")
	}
}

func TestRetunerHysteresis(t *testing.T) {
	r, err := NewRetuner(RetunerConfig{Model: lanModel(), Window: 4096, MinSamples: 1000, Interval: 10 * time.Second, Gain: 0.2, CheckEvery: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	sec := int64(time.Second)
	now := int64(0)
	feed := func(lat []time.Duration) {
		for _, l := range lat {
			now += sec / 200
			r.Observe(now, l)
		}
	}
	current := []time.Duration{0, 50 * time.Millisecond, 500 * time.Millisecond, 1000 * time.Millisecond}
	feed(lanLatencies(500, 4))
	if _, ok := r.Propose(now, current); ok {
		t.Fatal("proposed before MinSamples")
	}
	feed(lanLatencies(4000, 5))
	c, ok := r.Propose(now, current)
	if !ok {
		t.Fatal("0/50/500/1000 on a LAN: no proposal")
	}
	t.Logf("proposed %v instead of %v", c.Delays, current)
	current = c.Delays
	// The same conditions: nothing to gain, nothing proposed, ever.
	feed(lanLatencies(4000, 6))
	if c2, ok := r.Propose(now+20*sec, current); ok {
		t.Fatalf("proposed %v again under the same conditions", c2.Delays)
	}
	// The tail grows past the last delay: proposed at once, interval or not.
	slow := lanLatencies(4000, 7)
	for i := range slow {
		if i%50 == 0 {
			slow[i] = 400 * time.Millisecond
		}
	}
	feed(slow)
	c3, ok := r.Propose(now+21*sec, current)
	if !ok || c3.Delays[len(c3.Delays)-1] <= current[len(current)-1] {
		t.Fatalf("tail of 400 ms over last delay %v: proposal %v, %v", current[len(current)-1], c3.Delays, ok)
	}
	if err := (Config{Delays: c3.Delays, History: time.Second}).WithDefaults().Validate(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewRetuner(RetunerConfig{Gain: 2, Model: lanModel()}); err == nil {
		t.Fatal("a gain of 2 accepted")
	}
}
