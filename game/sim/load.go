package sim

import (
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Load is how hard the machine worked during the measured window. On a
// machine without CPU to spare, real-time delays measure the CPU queue, not
// the network: goroutines wait to run (scheduler latency), and the process
// uses all its cores. The virtual-time variant does not have that problem;
// there CPUSeconds is the cost of simulating the window.
type Load struct {
	// Cores is GOMAXPROCS.
	Cores int `json:"cores"`
	// CPUSeconds is the process's user+system CPU time over the window,
	// WindowSeconds the window's length by the run's clock (virtual in a
	// synctest bubble).
	CPUSeconds    float64 `json:"process_cpu_seconds"`
	WindowSeconds float64 `json:"window_seconds"`
	// Utilisation is CPUSeconds / (WindowSeconds × Cores): near 1 means
	// CPU-bound.
	Utilisation float64 `json:"cpu_utilisation"`
	// SchedLatencyMS is how long goroutines waited, runnable, before they
	// ran (runtime/metrics /sched/latencies), over the window.
	SchedLatencyMS struct {
		P50 float64 `json:"p50"`
		P99 float64 `json:"p99"`
	} `json:"sched_latency_ms"`
	// MachineBusy is the share of all the machine's CPUs busy over the
	// window, by /proc/stat (Linux; 0 elsewhere): other processes count
	// too. A busy machine with a low Utilisation means the simulation was
	// starved by others rather than limited by its own work.
	MachineBusy float64 `json:"machine_cpu_busy"`
	// PeakRSSMB is the process's peak resident memory so far.
	PeakRSSMB float64 `json:"peak_rss_mb"`
}

// loadMark is the state a Load is measured against.
type loadMark struct {
	at        time.Time
	cpu       time.Duration
	sched     *metrics.Float64Histogram
	busy, all uint64 // machine CPU ticks
}

const schedMetric = "/sched/latencies:seconds"

func markLoad() loadMark {
	s := []metrics.Sample{{Name: schedMetric}}
	metrics.Read(s)
	m := loadMark{at: time.Now(), cpu: processCPU()}
	m.busy, m.all = machineTicks()
	if s[0].Value.Kind() == metrics.KindFloat64Histogram {
		m.sched = s[0].Value.Float64Histogram()
	}
	return m
}

// since measures the load from m to now.
func (m loadMark) since() Load {
	end := markLoad()
	l := Load{Cores: runtime.GOMAXPROCS(0), CPUSeconds: (end.cpu - m.cpu).Seconds(), WindowSeconds: end.at.Sub(m.at).Seconds()}
	if l.WindowSeconds > 0 {
		l.Utilisation = l.CPUSeconds / (l.WindowSeconds * float64(l.Cores))
	}
	if m.sched != nil && end.sched != nil && len(m.sched.Counts) == len(end.sched.Counts) {
		counts := make([]uint64, len(end.sched.Counts))
		var total uint64
		for i := range counts {
			counts[i] = end.sched.Counts[i] - m.sched.Counts[i]
			total += counts[i]
		}
		q := func(p float64) float64 {
			want := uint64(p * float64(total))
			var seen uint64
			for i, c := range counts {
				seen += c
				if seen > want {
					// The bucket's upper bound, in ms.
					return end.sched.Buckets[i+1] * 1000
				}
			}
			return end.sched.Buckets[len(end.sched.Buckets)-1] * 1000
		}
		if total > 0 {
			l.SchedLatencyMS.P50, l.SchedLatencyMS.P99 = q(0.5), q(0.99)
		}
	}
	if end.all > m.all {
		l.MachineBusy = float64(end.busy-m.busy) / float64(end.all-m.all)
	}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		l.PeakRSSMB = float64(ru.Maxrss) / 1024 // kilobytes on Linux
	}
	return l
}

// processCPU is the process's user plus system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// machineTicks reads the machine's busy and total CPU ticks from the first
// line of /proc/stat ("cpu user nice system idle iowait irq softirq
// steal ..."); zeros where there is none.
func machineTicks() (busy, all uint64) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0
	}
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return 0, 0
		}
		all += n
		if i != 3 && i != 4 { // idle, iowait
			busy += n
		}
	}
	return busy, all
}
