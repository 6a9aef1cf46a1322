package regions

import (
	"context"
	"sort"
	"testing"
	"time"
)

// BenchmarkReadWriteRoundTrip measures one acknowledged read-write update
// from a peer that is neither coordinator nor replica: client to
// coordinator, coordinator to replica and back, answer to the client.
func BenchmarkReadWriteRoundTrip(b *testing.B) {
	for _, lat := range []time.Duration{0, time.Millisecond, 5 * time.Millisecond} {
		b.Run("latency="+lat.String(), func(b *testing.B) {
			cl := newCluster(b, 8, lat, testConfig(1, 1))
			cl.settle(b, 30*time.Second)
			c := Coord{}
			co, re := cl.truth(c)
			var user *member
			for _, m := range cl.live() {
				if m.id() != co && m.id() != re {
					user = m
				}
			}
			ctx := context.Background()
			o, err := user.cl.Initialize(ctx, c, "counter", counter(0))
			if err != nil {
				b.Fatal(err)
			}
			version, value := o.Version, uint64(0)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				o, err := user.cl.ReadWrite(ctx, c, "counter", version, counter(value+1))
				if err != nil {
					b.Fatal(err)
				}
				version, value = o.Version, value+1
			}
		})
	}
}

// BenchmarkFailover measures the time from a coordinator's death to the
// first answered request for its region, at a peer that only knows the
// coordinator is gone when its request fails (lazy detection).
func BenchmarkFailover(b *testing.B) {
	cl := newCluster(b, 10, time.Millisecond, testConfig(2, 2))
	cl.settle(b, 30*time.Second)
	ctx := context.Background()
	c := Coord{1, 1}
	var took []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		co, re := cl.truth(c)
		var user *member
		for _, m := range cl.live() {
			if m.id() != co && m.id() != re {
				user = m
			}
		}
		if _, err := user.cl.Initialize(ctx, c, "food", counter(uint64(i))); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		cl.byID(co).stop()
		start := time.Now()
		st, err := user.cl.Get(ctx, c)
		took = append(took, time.Since(start))
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if o := findObject(st.Objects, "food"); o == nil || counterValue(b, o.Value) != uint64(i) {
			b.Fatalf("object lost in fail-over: %+v", st.Objects)
		}
		cl.add(b, nil)
		cl.settle(b, 30*time.Second)
		b.StartTimer()
	}
	b.StopTimer()
	sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
	var sum time.Duration
	for _, d := range took {
		sum += d
	}
	b.ReportMetric(float64(sum.Milliseconds())/float64(len(took)), "ms/failover")
	b.ReportMetric(float64(took[len(took)*9/10].Microseconds())/1000, "p90-ms/failover")
}
