package sim

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	DHTPlacement    bool       `json:"dht_placement"`
	PlayBots        bool       `json:"play_bots"`
	MeasuredSeconds float64    `json:"measured_seconds"`
	LatencyMS       [2]float64 `json:"link_latency_range_ms"`
	Seed            uint64     `json:"seed"`
	VirtualTime     bool       `json:"virtual_time"`

	// Per node, per second online, over the measured window (players
	// online less than a second of it left out). Messages are gossipsub
	// RPCs plus position-stream messages; bytes are their framed sizes on
	// the wire plus the workload's streams.
	MsgsSentPerSec  Dist `json:"msgs_sent_per_node_per_s"`
	MsgsRecvPerSec  Dist `json:"msgs_recv_per_node_per_s"`
	BytesSentPerSec Dist `json:"bytes_sent_per_node_per_s"`
	BytesRecvPerSec Dist `json:"bytes_recv_per_node_per_s"`

	// Delay of delivered updates (arrival minus send) and, for the same
	// deliveries, the one-way latency of the sender-receiver link.
	DelayMS       Dist    `json:"update_delay_ms"`
	LinkLatencyMS Dist    `json:"link_latency_ms"`
	BatchedShare  float64 `json:"batched_share"`
	// Paths are the direct updates (a player's own, not batched)
	// delivered in the window by the path they took: straight from the
	// publisher or forwarded, and why; nil if none (play bots).
	Paths *Paths `json:"update_paths,omitempty"`
	// Bandwidth is the per-player bandwidth by kind, for all players and
	// for interior and border players apart.
	Bandwidth *BandwidthSplit `json:"bandwidth_split,omitempty"`

	// Coordinator load: regions each peer published batches for, and the
	// player updates it received, per peer that coordinated anything.
	Coordinators          int  `json:"coordinators"`
	RegionsPerCoordinator Dist `json:"regions_per_coordinator"`
	UplinkPerCoordinator  Dist `json:"uplink_updates_per_coordinator_per_s"`
	JoinsPerCoordinator   Dist `json:"joins_per_coordinator"`

	Published  uint64 `json:"updates_published"`
	SentUplink uint64 `json:"updates_sent_uplink"`
	// UplinkFailed are updates a player could not send to its
	// coordinator (aggregated mode).
	UplinkFailed uint64 `json:"uplink_failed"`
	Delivered    uint64 `json:"updates_delivered"`
	// Lost counts the sequence gaps in the updates receivers accepted: the
	// position updates lost; LostShare is Lost / (Delivered + Lost).
	Lost      uint64  `json:"sequence_gaps"`
	LostShare float64 `json:"lost_share"`
	// LostFollowing counts the updates receivers missed while following
	// their sender (a gap between two of its updates that arrived at most
	// 2 s apart, see follower); LostFollowingShare is over those due.
	LostFollowing      uint64            `json:"lost_while_following"`
	LostFollowingShare float64           `json:"lost_while_following_share"`
	Reordered          uint64            `json:"reordered"`
	Rejected           map[string]uint64 `json:"rejected"`
	Ignored            map[string]uint64 `json:"ignored"`
	DroppedRPCs        uint64            `json:"pubsub_rpcs_dropped_queue_full"`
	Undeliverable      uint64            `json:"pubsub_undeliverable"`
	RendezvousFailed   uint64            `json:"rendezvous_failed"`

	// Load is the machine's load over the window.
	Load Load `json:"load"`
	// Memory is where the process's memory was at the end of the window.
	Memory Memory `json:"memory"`
	// BuildSeconds and WallSeconds are the real time to build the network
	// and of the whole run.
	BuildSeconds float64 `json:"build_wall_s"`
	WallSeconds  float64 `json:"wall_s"`

	// Regions is what the region services did; nil without them.
	RegionActivity *RegionsReport `json:"regions_activity,omitempty"`
	// Churn is what the churn did; nil without churn.
	Churn *Churn `json:"churn,omitempty"`
	// Workload is the eat and fight workload's figures; nil when off or
	// with play bots.
	Workload *Workload `json:"workload,omitempty"`
	// Play are the play bots' eats, pick-ups and fights in the window by
	// outcome, as play's metrics count them; nil without play bots.
	Play map[string]uint64 `json:"play_actions,omitempty"`

	delays, links        []float64
	bytesSent, bytesRecv []float64
}

func buildReport(cfg Config, pc position.Config, window []windowEntry, measured time.Duration, rec *delays) *Report {
	r := &Report{
		Players: cfg.Players, Regions: pc.Width * pc.Height, Grid: fmt.Sprintf("%dx%d", pc.Width, pc.Height),
		Radius: cfg.Radius, IntervalMS: float64(cfg.Interval.Microseconds()) / 1000, Aggregate: cfg.Aggregate,
		DHTPlacement: cfg.DHTPlacement, MeasuredSeconds: measured.Seconds(), Seed: cfg.Seed,
		LatencyMS: [2]float64{float64(cfg.LatencyMin.Microseconds()) / 1000, float64(cfg.LatencyMax.Microseconds()) / 1000},
		Rejected:  map[string]uint64{}, Ignored: map[string]uint64{},
	}
	var msgsOut, msgsIn, coordRegions, coordUplink, coordJoins []float64
	var dueFollowing uint64
	for _, e := range window {
		a, b := e.last, e.first
		sa, sb := a.stats, b.stats
		r.DroppedRPCs += a.wire.dropped - b.wire.dropped
		r.Undeliverable += a.wire.undeliverable - b.wire.undeliverable
		r.Published += sa.Published - sb.Published
		r.SentUplink += sa.SentUplink - sb.SentUplink
		r.UplinkFailed += sa.UplinkFailed - sb.UplinkFailed
		r.Delivered += sa.Delivered - sb.Delivered
		r.Lost += sa.Lost - sb.Lost
		r.LostFollowing += a.lostFollowing - b.lostFollowing
		dueFollowing += a.dueFollowing - b.dueFollowing
		r.Reordered += sa.Reordered - sb.Reordered
		r.RendezvousFailed += sa.RendezvousFailed - sb.RendezvousFailed
		for k, v := range sa.Rejected {
			if d := v - sb.Rejected[k]; d > 0 {
				r.Rejected[k] += d
			}
		}
		for k, v := range sa.Ignored {
			if d := v - sb.Ignored[k]; d > 0 {
				r.Ignored[k] += d
			}
		}
		if e.seconds < minOnlineSeconds {
			continue
		}
		secs := e.seconds
		uplinkOut := (sa.SentUplink - sb.SentUplink) + (sa.RendezvousOK + sa.RendezvousFailed - sb.RendezvousOK - sb.RendezvousFailed)
		uplinkIn := (sa.UplinkReceived - sb.UplinkReceived) + (sa.CoordinatorJoins - sb.CoordinatorJoins)
		msgsOut = append(msgsOut, float64(a.wire.rpcsOut-b.wire.rpcsOut+uplinkOut)/secs)
		msgsIn = append(msgsIn, float64(a.wire.rpcsIn-b.wire.rpcsIn+uplinkIn)/secs)
		r.bytesSent = append(r.bytesSent, e.bytesSentPerSec())
		r.bytesRecv = append(r.bytesRecv, e.bytesRecvPerSec())
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
	if r.Delivered+r.Lost > 0 {
		r.LostShare = float64(r.Lost) / float64(r.Delivered+r.Lost)
	}
	if dueFollowing > 0 {
		r.LostFollowingShare = float64(r.LostFollowing) / float64(dueFollowing)
	}
	r.MsgsSentPerSec, r.MsgsRecvPerSec = summarise(msgsOut), summarise(msgsIn)
	r.Bandwidth = splitBandwidth(window)
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

// bytesSentPerSec is the player's bytes on the wire sent per second
// online: gossipsub, position streams, workload streams.
func (e windowEntry) bytesSentPerSec() float64 {
	a, b := e.last, e.first
	return float64(a.wire.bytesOut-b.wire.bytesOut+a.stats.StreamBytesOut-b.stats.StreamBytesOut+a.workloadOut-b.workloadOut) / e.seconds
}

func (e windowEntry) bytesRecvPerSec() float64 {
	a, b := e.last, e.first
	return float64(a.wire.bytesIn-b.wire.bytesIn+a.stats.StreamBytesIn-b.stats.StreamBytesIn+a.workloadIn-b.workloadIn) / e.seconds
}

// RegionsReport is what the region services did in the window.
type RegionsReport struct {
	// Takeovers are regions a peer started coordinating, by how it got
	// their state (own_copy: a replica promoted its copy; transfer: a
	// hand-off; rebuilt: from the members' caches; created: a region
	// nobody held).
	Takeovers map[string]uint64 `json:"takeovers"`
	// Answers are the region requests peers answered, by status; each
	// "retry" is a request its client had to send again, each "redirect"
	// one sent to a peer that did not coordinate the region.
	Answers map[string]uint64 `json:"answers"`
	// ObjectRequestsFailed are the workload's object requests (eats,
	// regrowths, creations) that failed in the window.
	ObjectRequestsFailed uint64 `json:"object_requests_failed"`
	// CoordinatorChanges are the changes of a region's coordinator, by
	// cause (see roleLog), reported by the region services within a
	// maintenance period.
	CoordinatorChanges map[string]uint64 `json:"coordinator_changes"`
	// ByRole is the per-player bandwidth of players by the most they did
	// for regions in the window (with play bots, by their roles at the
	// window's start and end).
	ByRole map[string]RoleBandwidth `json:"bandwidth_by_role"`
	// Placement, with play bots, checks every coordinated region's
	// coordinator against placement at the end of the run.
	Placement *PlacementCheck `json:"placement,omitempty"`
}

// RoleBandwidth is the bandwidth of the players of one role.
type RoleBandwidth struct {
	Players         int  `json:"players"`
	BytesSentPerSec Dist `json:"bytes_sent_per_s"`
	BytesRecvPerSec Dist `json:"bytes_recv_per_s"`
}

func (r *run) regionsReport(window []windowEntry) *RegionsReport {
	if !r.needRegions() {
		return nil
	}
	out := &RegionsReport{Takeovers: map[string]uint64{}, Answers: map[string]uint64{},
		CoordinatorChanges: r.roles.changesInWindow(), ByRole: map[string]RoleBandwidth{}}
	sent, recv := map[string][]float64{}, map[string][]float64{}
	for _, e := range window {
		for k, v := range e.last.takeovers {
			if d := v - e.first.takeovers[k]; d > 0 {
				out.Takeovers[k] += d
			}
		}
		for k, v := range e.last.answers {
			if d := v - e.first.answers[k]; d > 0 {
				out.Answers[k] += d
			}
		}
		if e.seconds >= minOnlineSeconds {
			sent[e.role] = append(sent[e.role], e.bytesSentPerSec())
			recv[e.role] = append(recv[e.role], e.bytesRecvPerSec())
		}
	}
	for role, xs := range sent {
		out.ByRole[role] = RoleBandwidth{Players: len(xs), BytesSentPerSec: summarise(xs), BytesRecvPerSec: summarise(recv[role])}
	}
	return out
}

// Summary writes the headline figures for a person.
func (r *Report) Summary(w io.Writer) {
	mode := "direct"
	if r.Aggregate {
		mode = "aggregated"
	}
	placement := "directory"
	if r.DHTPlacement {
		placement = "DHT"
	}
	if r.PlayBots {
		mode += ", play bots"
	}
	fmt.Fprintf(w, "players %d, regions %d (%s), radius %d, interval %.0f ms, %s mode, placement by %s, measured %.0f s\n",
		r.Players, r.Regions, r.Grid, r.Radius, r.IntervalMS, mode, placement, r.MeasuredSeconds)
	d := func(name string, x Dist, unit string) {
		fmt.Fprintf(w, "  %-28s avg %9.1f  p50 %9.1f  p99 %9.1f  max %9.1f %s\n", name, x.Avg, x.P50, x.P99, x.Max, unit)
	}
	d("msgs sent per node", r.MsgsSentPerSec, "/s")
	d("msgs received per node", r.MsgsRecvPerSec, "/s")
	d("bytes sent per node", r.BytesSentPerSec, "B/s")
	d("bytes received per node", r.BytesRecvPerSec, "B/s")
	d("update delay", r.DelayMS, "ms")
	d("link latency (same pairs)", r.LinkLatencyMS, "ms")
	r.Paths.summary(w, d)
	r.Bandwidth.summary(w)
	d("regions per coordinator", r.RegionsPerCoordinator, "")
	fmt.Fprintf(w, "  deliveries %d, lost while following %d (%.3f%%), sequence gaps %d (%.3f%%), reordered %d, rejected %v, ignored %s, dropped RPCs %d, uplink failed %d, coordinators %d\n",
		r.Delivered, r.LostFollowing, 100*r.LostFollowingShare, r.Lost, 100*r.LostShare, r.Reordered, r.Rejected, sortedCounts(r.Ignored), r.DroppedRPCs, r.UplinkFailed, r.Coordinators)
	if a := r.RegionActivity; a != nil {
		fmt.Fprintf(w, "  regions: take-overs %v; answers %v; object requests failed %d; coordinator changes %v\n",
			sortedCounts(a.Takeovers), sortedCounts(a.Answers), a.ObjectRequestsFailed, sortedCounts(a.CoordinatorChanges))
		for _, role := range []string{"coordinator", "replica", "member"} {
			if b, ok := a.ByRole[role]; ok {
				d(fmt.Sprintf("sent per %s (%d)", role, b.Players), b.BytesSentPerSec, "B/s")
				d(fmt.Sprintf("received per %s", role), b.BytesRecvPerSec, "B/s")
			}
		}
	}
	if c := r.Churn; c != nil {
		fmt.Fprintf(w, "  churn: mean session %.0f s, leave by %s: %d joins, %d leaves in the window\n", c.SessionMeanSeconds, c.Leave, c.Joins, c.Leaves)
		d("time to next coordinator", c.NextCoordinatorMS, "ms")
		fmt.Fprintf(w, "    regions without a coordinator after 30 s: %d\n", c.NextCoordinatorPending)
	}
	if r.Workload != nil {
		r.Workload.summary(w, d)
	}
	if r.Play != nil {
		fmt.Fprintf(w, "  play bots' eats, pick-ups and fights in the window: %s\n", sortedCounts(r.Play))
		if pc := r.RegionActivity.Placement; pc != nil {
			fmt.Fprintf(w, "    regions coordinated as placed %d of %d coordinated, claimed by several %d\n", pc.AsPlaced, pc.Regions, pc.Split)
		}
	}
	m := r.Memory
	fmt.Fprintf(w, "  memory (%d players online): live heap %.0f MB (%.2f per player), stacks %.0f MB (%.2f per player), %d goroutines (%.0f per player, %.1f per connected peer)\n",
		m.PlayersOnline, m.HeapLiveMB, m.HeapPerPlayerMB, m.StacksMB, m.StacksPerPlayerMB, m.Goroutines, m.GoroutinesPerPlayer, m.GoroutinesPerPeer)
	d("peers per player", m.PeersPerPlayer, "")
	d("streams per player", m.StreamsPerPlayer, "")
	fmt.Fprintf(w, "  wall time %.0f s (network built in %.0f s)\n", r.WallSeconds, r.BuildSeconds)
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

// sortedCounts prints counts by key in key order.
func sortedCounts(m map[string]uint64) string {
	var b strings.Builder
	b.WriteString("{")
	for i, k := range slices.Sorted(maps.Keys(m)) {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %d", k, m[k])
	}
	b.WriteString("}")
	return b.String()
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
