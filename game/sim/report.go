package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/overworld-p2p/overworld/regions/position"
)

// Dist summarises a distribution.
type Dist struct {
	Count int     `json:"count"`
	Avg   float64 `json:"avg"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
	Max   float64 `json:"max"`
}

func summarise(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	q := func(p float64) float64 { return s[min(int(p*float64(len(s))), len(s)-1)] }
	return Dist{Count: len(s), Avg: sum / float64(len(s)), P50: q(0.5), P99: q(0.99), Max: s[len(s)-1]}
}

// Report is what a run measured.
type Report struct {
	Players         int        `json:"players"`
	Regions         int        `json:"regions"`
	Grid            string     `json:"grid"`
	Radius          int        `json:"radius"`
	IntervalMS      float64    `json:"update_interval_ms"`
	Aggregate       bool       `json:"aggregate"`
	MeasuredSeconds float64    `json:"measured_seconds"`
	LatencyMS       [2]float64 `json:"link_latency_range_ms"`
	Seed            uint64     `json:"seed"`
	VirtualTime     bool       `json:"virtual_time"`

	// Per node, per second, over the measured window. Messages are
	// gossipsub RPCs plus position-stream messages; bytes are their framed
	// sizes on the wire.
	MsgsSentPerSec  Dist `json:"msgs_sent_per_node_per_s"`
	MsgsRecvPerSec  Dist `json:"msgs_recv_per_node_per_s"`
	BytesSentPerSec Dist `json:"bytes_sent_per_node_per_s"`
	BytesRecvPerSec Dist `json:"bytes_recv_per_node_per_s"`

	// Delay of delivered updates (arrival minus send) and, for the same
	// deliveries, the one-way latency of the sender-receiver link.
	DelayMS       Dist    `json:"update_delay_ms"`
	LinkLatencyMS Dist    `json:"link_latency_ms"`
	BatchedShare  float64 `json:"batched_share"`

	// Coordinator load: regions each peer published batches for, and the
	// player updates it received, per peer that coordinated anything.
	Coordinators          int  `json:"coordinators"`
	RegionsPerCoordinator Dist `json:"regions_per_coordinator"`
	UplinkPerCoordinator  Dist `json:"uplink_updates_per_coordinator_per_s"`
	JoinsPerCoordinator   Dist `json:"joins_per_coordinator"`

	Published        uint64            `json:"updates_published"`
	SentUplink       uint64            `json:"updates_sent_uplink"`
	UplinkFailed     uint64            `json:"uplink_failed"`
	Delivered        uint64            `json:"updates_delivered"`
	Lost             uint64            `json:"sequence_gaps"`
	Reordered        uint64            `json:"reordered"`
	Rejected         map[string]uint64 `json:"rejected"`
	Ignored          map[string]uint64 `json:"ignored"`
	DroppedRPCs      uint64            `json:"pubsub_rpcs_dropped_queue_full"`
	Undeliverable    uint64            `json:"pubsub_undeliverable"`
	RendezvousFailed uint64            `json:"rendezvous_failed"`

	// Load is the machine's load over the window.
	Load Load `json:"load"`

	// Workload is the eat and fight workload's figures; nil when off.
	Workload *Workload `json:"workload,omitempty"`

	delays, links        []float64
	bytesSent, bytesRecv []float64
}

func buildReport(cfg Config, pc position.Config, before, after []snapshot, measured time.Duration, rec *delays) *Report {
	secs := measured.Seconds()
	r := &Report{
		Players: cfg.Players, Regions: pc.Width * pc.Height, Grid: fmt.Sprintf("%dx%d", pc.Width, pc.Height),
		Radius: cfg.Radius, IntervalMS: float64(cfg.Interval.Microseconds()) / 1000, Aggregate: cfg.Aggregate,
		MeasuredSeconds: secs, Seed: cfg.Seed,
		LatencyMS: [2]float64{float64(cfg.LatencyMin.Microseconds()) / 1000, float64(cfg.LatencyMax.Microseconds()) / 1000},
		Rejected:  map[string]uint64{}, Ignored: map[string]uint64{},
	}
	var msgsOut, msgsIn, coordRegions, coordUplink, coordJoins []float64
	for i := range after {
		a, b := after[i], before[i]
		sa, sb := a.stats, b.stats
		uplinkOut := (sa.SentUplink - sb.SentUplink) + (sa.RendezvousOK + sa.RendezvousFailed - sb.RendezvousOK - sb.RendezvousFailed)
		uplinkIn := (sa.UplinkReceived - sb.UplinkReceived) + (sa.CoordinatorJoins - sb.CoordinatorJoins)
		msgsOut = append(msgsOut, float64(a.wire.rpcsOut-b.wire.rpcsOut+uplinkOut)/secs)
		msgsIn = append(msgsIn, float64(a.wire.rpcsIn-b.wire.rpcsIn+uplinkIn)/secs)
		r.bytesSent = append(r.bytesSent, float64(a.wire.bytesOut-b.wire.bytesOut+sa.StreamBytesOut-sb.StreamBytesOut+a.workloadOut-b.workloadOut)/secs)
		r.bytesRecv = append(r.bytesRecv, float64(a.wire.bytesIn-b.wire.bytesIn+sa.StreamBytesIn-sb.StreamBytesIn+a.workloadIn-b.workloadIn)/secs)
		r.DroppedRPCs += a.wire.dropped - b.wire.dropped
		r.Undeliverable += a.wire.undeliverable - b.wire.undeliverable
		r.Published += sa.Published - sb.Published
		r.SentUplink += sa.SentUplink - sb.SentUplink
		r.UplinkFailed += sa.UplinkFailed - sb.UplinkFailed
		r.Delivered += sa.Delivered - sb.Delivered
		r.Lost += sa.Lost - sb.Lost
		r.Reordered += sa.Reordered - sb.Reordered
		r.RendezvousFailed += sa.RendezvousFailed - sb.RendezvousFailed
		for k, v := range sa.Rejected {
			r.Rejected[k] += v - sb.Rejected[k]
		}
		for k, v := range sa.Ignored {
			r.Ignored[k] += v - sb.Ignored[k]
		}
		batches := sa.BatchesPublished - sb.BatchesPublished
		joins := sa.CoordinatorJoins - sb.CoordinatorJoins
		if batches > 0 || joins > 0 {
			// Batches per interval approximate the regions coordinated.
			regionsCoordinated := float64(batches) / (secs / cfg.Interval.Seconds())
			coordRegions = append(coordRegions, regionsCoordinated)
			coordUplink = append(coordUplink, float64(sa.UplinkReceived-sb.UplinkReceived)/secs)
			coordJoins = append(coordJoins, float64(joins))
		}
	}
	r.MsgsSentPerSec, r.MsgsRecvPerSec = summarise(msgsOut), summarise(msgsIn)
	r.BytesSentPerSec, r.BytesRecvPerSec = summarise(r.bytesSent), summarise(r.bytesRecv)
	rec.mu.Lock()
	r.delays, r.links = rec.delay, rec.link
	if len(rec.delay) > 0 {
		r.BatchedShare = float64(rec.batched) / float64(len(rec.delay))
	}
	rec.mu.Unlock()
	r.DelayMS, r.LinkLatencyMS = summarise(r.delays), summarise(r.links)
	r.Coordinators = len(coordJoins)
	r.RegionsPerCoordinator = summarise(coordRegions)
	r.UplinkPerCoordinator = summarise(coordUplink)
	r.JoinsPerCoordinator = summarise(coordJoins)
	return r
}

// Summary writes the headline figures for a person.
func (r *Report) Summary(w io.Writer) {
	mode := "direct"
	if r.Aggregate {
		mode = "aggregated"
	}
	fmt.Fprintf(w, "players %d, regions %d (%s), radius %d, interval %.0f ms, %s mode, measured %.0f s\n",
		r.Players, r.Regions, r.Grid, r.Radius, r.IntervalMS, mode, r.MeasuredSeconds)
	d := func(name string, x Dist, unit string) {
		fmt.Fprintf(w, "  %-28s avg %9.1f  p50 %9.1f  p99 %9.1f  max %9.1f %s\n", name, x.Avg, x.P50, x.P99, x.Max, unit)
	}
	d("msgs sent per node", r.MsgsSentPerSec, "/s")
	d("msgs received per node", r.MsgsRecvPerSec, "/s")
	d("bytes sent per node", r.BytesSentPerSec, "B/s")
	d("bytes received per node", r.BytesRecvPerSec, "B/s")
	d("update delay", r.DelayMS, "ms")
	d("link latency (same pairs)", r.LinkLatencyMS, "ms")
	d("regions per coordinator", r.RegionsPerCoordinator, "")
	fmt.Fprintf(w, "  deliveries %d, sequence gaps %d, reordered %d, rejected %v, dropped RPCs %d, coordinators %d\n",
		r.Delivered, r.Lost, r.Reordered, r.Rejected, r.DroppedRPCs, r.Coordinators)
	if r.Workload != nil {
		r.Workload.summary(w, d)
	}
	l := r.Load
	if r.VirtualTime && l.WindowSeconds > 0 {
		fmt.Fprintf(w, "  cost: %.1f CPU-s for %.1f simulated s (%.1f CPU-s per simulated s); peak RSS %.0f MB\n",
			l.CPUSeconds, l.WindowSeconds, l.CPUSeconds/l.WindowSeconds, l.PeakRSSMB)
		return
	}
	fmt.Fprintf(w, "  load: this process %.1f CPU-s over %.1f s on %d cores (%.0f%% of them), machine %.0f%% busy; goroutines waited to run p50 %.2f ms, p99 %.2f ms; peak RSS %.0f MB\n",
		l.CPUSeconds, l.WindowSeconds, l.Cores, 100*l.Utilisation, 100*l.MachineBusy, l.SchedLatencyMS.P50, l.SchedLatencyMS.P99, l.PeakRSSMB)
	if l.Utilisation > 0.8 || l.MachineBusy > 0.8 || l.SchedLatencyMS.P99 > 100 {
		fmt.Fprintln(w, "  note: CPU-bound run: the delays above include waiting for the CPU, not only the network; see the virtual-time variant")
	}
}

// WriteFiles writes report.json, delay.svg and bandwidth.svg into dir and
// returns their paths.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report dir: %w", err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode report: %w", err)
	}
	jsonPath := filepath.Join(dir, "report.json")
	if err := os.WriteFile(jsonPath, append(data, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("write report: %w", err)
	}
	delayPath := filepath.Join(dir, "delay.svg")
	if err := cdfPlot(delayPath, "Position update delay vs link latency", "milliseconds",
		series{"update delay", r.delays}, series{"link latency (same pairs)", r.links}); err != nil {
		return nil, err
	}
	bwPath := filepath.Join(dir, "bandwidth.svg")
	if err := cdfPlot(bwPath, "Per-node bandwidth", "bytes per second",
		series{"sent", r.bytesSent}, series{"received", r.bytesRecv}); err != nil {
		return nil, err
	}
	files := []string{jsonPath, delayPath, bwPath}
	if r.Workload != nil {
		opsPath := filepath.Join(dir, "workload.svg")
		if err := cdfPlot(opsPath, "Eat commit latency and fight round trip", "milliseconds",
			series{"eat commit", r.Workload.eatMS}, series{"fight round trip", r.Workload.fightMS}); err != nil {
			return nil, err
		}
		files = append(files, opsPath)
	}
	return files, nil
}

type series struct {
	name string
	xs   []float64
}

// cdfPlot draws the empirical CDF of each series.
func cdfPlot(path, title, xlabel string, ss ...series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "fraction ≤ x"
	p.Add(plotter.NewGrid())
	for i, s := range ss {
		if len(s.xs) == 0 {
			continue
		}
		sorted := slices.Clone(s.xs)
		slices.Sort(sorted)
		// At most 2000 points per line keeps the SVG small.
		stride := max(1, len(sorted)/2000)
		var pts plotter.XYs
		for j := 0; j < len(sorted); j += stride {
			pts = append(pts, plotter.XY{X: sorted[j], Y: float64(j+1) / float64(len(sorted))})
		}
		pts = append(pts, plotter.XY{X: sorted[len(sorted)-1], Y: 1})
		line, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("plot %s: %w", s.name, err)
		}
		line.Color = plotter.DefaultLineStyle.Color
		if i == 1 {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line)
		p.Legend.Add(s.name, line)
	}
	p.Legend.Top = false
	p.Legend.Left = false
	if err := p.Save(7*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("save %s: %w", path, err)
	}
	return nil
}
