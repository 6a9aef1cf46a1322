// Package crimpbench reproduces table 4.1 of the CRIMP paper (Cronin et
// al., "A Distributed Multiplayer Game Server System", ch. 4.6) on the
// in-memory network, and prints the paper's rows beside the measured ones.
//
// The paper's virtual topology is two groups of test harnesses, one per
// machine, joined by a two-way Dummynet bridge with a 25 ms delay and a set
// loss rate; each sender multicasts 2000 packets, one every 30 ms, and CRIMP
// keeps 1000 ms of history. The text does not say how many harnesses ran per
// machine; three per side reproduces the paper's 15 ms mean perceived delay
// at 0% loss (each receiver hears two senders at ~0 ms and three at 25 ms),
// so that is the default. Loss is applied on the bridge once per packet for
// the whole far side, as Dummynet did; packets within a side are not lost.
//
// Data flows: Run builds, for every (FEC, loss rate) pair, a MemNetwork on a
// SimClock (or the wall clock with Realtime), one crimp.Member per harness,
// schedules the senders, runs the clock past the last send plus the
// history, and reduces the deliveries and a tap on the network to a Row.
package crimpbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/overworld-p2p/overworld/node/crimp"
)

// Config is the bench setup. Zero fields take Default's values.
type Config struct {
	SideSize    int           // members per side of the bridge
	BridgeDelay time.Duration // one-way delay across the bridge
	LANDelay    time.Duration // one-way delay within a side
	Packets     int           // packets per sender
	Interval    time.Duration // time between a sender's packets
	History     time.Duration // CRIMP history length
	Warmup      time.Duration // session exchange before traffic (delay estimates)
	LossRates   []float64     // bridge loss rates, one row each
	FEC         int           // k for the FEC table; 0 runs only the plain table
	Seed        int64
	Realtime    bool         // wall clock instead of simulated time
	Protocol    crimp.Config // base protocol settings (ID, Peers, History, FEC are set per run)
}

// Default is the paper's setup.
func Default() Config {
	return Config{
		SideSize:    3,
		BridgeDelay: 25 * time.Millisecond,
		LANDelay:    100 * time.Microsecond,
		Packets:     2000,
		Interval:    30 * time.Millisecond,
		History:     time.Second,
		Warmup:      time.Second,
		LossRates:   []float64{0, 0.05, 0.10, 0.15},
		FEC:         2,
		Seed:        1,
	}
}

func (c Config) withDefaults() Config {
	d := Default()
	if c.SideSize == 0 {
		c.SideSize = d.SideSize
	}
	if c.BridgeDelay == 0 {
		c.BridgeDelay = d.BridgeDelay
	}
	if c.LANDelay == 0 {
		c.LANDelay = d.LANDelay
	}
	if c.Packets == 0 {
		c.Packets = d.Packets
	}
	if c.Interval == 0 {
		c.Interval = d.Interval
	}
	if c.History == 0 {
		c.History = d.History
	}
	if c.Warmup == 0 {
		c.Warmup = d.Warmup
	}
	if c.LossRates == nil {
		c.LossRates = d.LossRates
	}
	return c
}

// PaperRow is one row of the paper's table 4.1.
type PaperRow struct {
	Loss              float64 `json:"loss"`
	PerceivedMillis   int     `json:"perceived_ms"`
	Losses            int     `json:"losses"`
	DuplicateRecovery int     `json:"duplicate_recovery"`
	DuplicateRepairs  int     `json:"duplicate_repairs"`
}

// PaperTable41 is the paper's table 4.1, "Performance of Multicast".
var PaperTable41 = []PaperRow{
	{0, 15, 0, 0, 0},
	{0.05, 32, 0, 441, 323},
	{0.10, 78, 0, 1653, 1215},
	{0.15, 161, 2, 2512, 1951},
}

// Row is one measured run.
type Row struct {
	Loss float64 `json:"loss"`
	FEC  int     `json:"fec"`
	// Perceived latency: receive time minus the sender's timestamp, over
	// every (receiver, packet) pair.
	Mean time.Duration `json:"mean_ns"`
	P50  time.Duration `json:"p50_ns"`
	P99  time.Duration `json:"p99_ns"`
	Max  time.Duration `json:"max_ns"`

	Expected      int `json:"expected"`       // senders × packets × receivers
	Delivered     int `json:"delivered"`      // distinct (receiver, packet) deliveries
	Losses        int `json:"losses"`         // expected - delivered
	DupDeliveries int `json:"dup_deliveries"` // a packet delivered twice to one receiver (must be 0)
	ViaFEC        int `json:"via_fec"`
	ViaRepair     int `json:"via_repair"`

	Requests    int `json:"requests"`     // recovery requests sent, all members
	DupRequests int `json:"dup_requests"` // requests beyond the first for a packet
	Repairs     int `json:"repairs"`
	DupRepairs  int `json:"dup_repairs"` // repairs beyond the first for a packet

	Paper *PaperRow     `json:"paper,omitempty"`
	Wall  time.Duration `json:"wall_ns"`
}

// Report is a full bench result.
type Report struct {
	Config Config  `json:"config"`
	Rows   []Row   `json:"rows"`
	Goals  []Check `json:"goals"`
}

// Check is one of the goals and whether the run met it.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	Note string `json:"note"`
}

// Run runs every (FEC, loss) combination in turn.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	rep := &Report{Config: cfg}
	fecs := []int{0}
	if cfg.FEC > 0 {
		fecs = append(fecs, cfg.FEC)
	}
	for _, k := range fecs {
		for i, loss := range cfg.LossRates {
			row, err := RunOne(ctx, cfg, loss, k, cfg.Seed+int64(i)*7919+int64(k)*104729)
			if err != nil {
				return rep, fmt.Errorf("loss %.0f%% fec %d: %w", loss*100, k, err)
			}
			rep.Rows = append(rep.Rows, row)
		}
	}
	rep.Goals = goals(rep.Rows, fecs)
	return rep, nil
}

func goals(rows []Row, fecs []int) []Check {
	var out []Check
	for _, k := range fecs {
		lossless := true
		var base, five time.Duration
		for _, r := range rows {
			if r.FEC != k {
				continue
			}
			if r.Losses != 0 || r.DupDeliveries != 0 {
				lossless = false
			}
			switch r.Loss {
			case 0:
				base = r.Mean
			case 0.05:
				five = r.Mean
			}
		}
		out = append(out, Check{Name: fmt.Sprintf("fec %d: zero losses and no duplicate deliveries at every rate", k), OK: lossless})
		if base > 0 && five > 0 {
			ratio := float64(five) / float64(base)
			out = append(out, Check{
				Name: fmt.Sprintf("fec %d: perceived latency at 5%% within 1.5x of 0%%", k),
				OK:   ratio <= 1.5,
				Note: fmt.Sprintf("%.2fx (paper: %.2fx)", ratio, 32.0/15.0),
			})
		}
	}
	return out
}

// RunOne runs one row: the topology at one loss rate with FEC k.
func RunOne(ctx context.Context, cfg Config, loss float64, k int, seed int64) (Row, error) {
	cfg = cfg.withDefaults()
	row := Row{Loss: loss, FEC: k}
	for _, p := range PaperTable41 {
		if p.Loss == loss {
			p := p
			row.Paper = &p
		}
	}
	start := time.Now()
	var clock crimp.Clock
	var sim *crimp.SimClock
	if cfg.Realtime {
		clock = crimp.WallClock{}
	} else {
		sim = crimp.NewSimClock(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
		clock = sim
	}
	net := crimp.NewMemNetwork(clock, seed)
	defer net.Close()
	net.SetLAN("A", crimp.LinkParams{Delay: cfg.LANDelay})
	net.SetLAN("B", crimp.LinkParams{Delay: cfg.LANDelay})
	net.SetLink("A", "B", crimp.LinkParams{Delay: cfg.BridgeDelay, Loss: loss})

	var mu sync.Mutex // the tap and deliveries run concurrently on the wall clock
	requests := map[crimp.Key]int{}
	repairs := map[crimp.Key]int{}
	net.Tap(func(_ netip.AddrPort, b []byte) {
		p, err := crimp.Decode(b)
		if err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch p.Kind {
		case crimp.KindRequest:
			requests[crimp.Key{Source: p.Source, Seq: p.Seq}]++
		case crimp.KindRepair:
			repairs[crimp.Key{Source: p.Source, Seq: p.Seq}]++
		}
	})

	n := 2 * cfg.SideSize
	ids := make([]crimp.MemberID, n)
	for i := range ids {
		ids[i] = crimp.MemberID(i + 1)
	}
	type seenKey struct {
		to  crimp.MemberID
		key crimp.Key
	}
	seen := map[seenKey]bool{}
	var latencies []time.Duration
	members := make([]*crimp.Member, n)
	for i, id := range ids {
		pc := cfg.Protocol
		pc.ID = id
		pc.Peers = slices.DeleteFunc(slices.Clone(ids), func(x crimp.MemberID) bool { return x == id })
		pc.History = cfg.History
		pc.FEC = k
		node, err := crimp.New(pc, rand.New(rand.NewSource(seed*1000+int64(id))))
		if err != nil {
			return row, err
		}
		site := "A"
		if i >= cfg.SideSize {
			site = "B"
		}
		me := id
		members[i] = crimp.NewMember(node, net.Endpoint(site), clock, crimp.MemberOptions{
			OnDeliver: func(d crimp.Delivery) {
				mu.Lock()
				defer mu.Unlock()
				sk := seenKey{me, d.Key}
				if seen[sk] {
					row.DupDeliveries++
					return
				}
				seen[sk] = true
				latencies = append(latencies, d.ReceivedAt.Sub(d.SentAt))
				switch d.Via {
				case crimp.ViaFEC:
					row.ViaFEC++
				case crimp.ViaRepair:
					row.ViaRepair++
				}
			},
		})
	}
	for _, m := range members {
		if err := m.Start(); err != nil {
			return row, err
		}
		defer m.Close()
	}

	// Senders start after the warm-up, each at its own phase within the
	// interval, and send one packet of 20..100 bytes (the paper's traffic
	// model drops packets over 100 bytes) every Interval.
	rng := rand.New(rand.NewSource(seed))
	for _, m := range members {
		m := m
		phase := time.Duration(rng.Int63n(int64(cfg.Interval)))
		prng := rand.New(rand.NewSource(rng.Int63()))
		sent := 0
		var send func()
		send = func() {
			payload := make([]byte, 20+prng.Intn(81))
			prng.Read(payload)
			_ = m.Send(payload)
			sent++
			if sent < cfg.Packets {
				clock.AfterFunc(cfg.Interval, send)
			}
		}
		clock.AfterFunc(cfg.Warmup+phase, send)
	}
	tail := cfg.Warmup + time.Duration(cfg.Packets)*cfg.Interval + 2*cfg.History
	if sim != nil {
		sim.RunFor(tail)
	} else {
		timer := time.NewTimer(tail)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return row, ctx.Err()
		case <-timer.C:
		}
	}
	for _, m := range members {
		_ = m.Close()
	}

	mu.Lock()
	defer mu.Unlock()
	row.Expected = n * cfg.Packets * (n - 1)
	row.Delivered = len(seen)
	row.Losses = row.Expected - row.Delivered
	for _, c := range requests {
		row.Requests += c
		row.DupRequests += c - 1
	}
	for _, c := range repairs {
		row.Repairs += c
		row.DupRepairs += c - 1
	}
	if len(latencies) > 0 {
		slices.Sort(latencies)
		var sum time.Duration
		for _, l := range latencies {
			sum += l
		}
		row.Mean = sum / time.Duration(len(latencies))
		row.P50 = latencies[len(latencies)/2]
		row.P99 = latencies[len(latencies)*99/100]
		row.Max = latencies[len(latencies)-1]
	}
	row.Wall = time.Since(start)
	return row, nil
}

// WriteText prints the report as tables, the paper's figures beside ours.
func (r *Report) WriteText(w io.Writer) {
	c := r.Config
	mode := "simulated time"
	if c.Realtime {
		mode = "wall clock"
	}
	fmt.Fprintf(w, "CRIMP, table 4.1: 2 sides x %d members, bridge %v one-way, %d packets per sender every %v, history %v, seed %d, %s\n",
		c.SideSize, c.BridgeDelay, c.Packets, c.Interval, c.History, c.Seed, mode)
	fec := -1
	for _, row := range r.Rows {
		if row.FEC != fec {
			fec = row.FEC
			fmt.Fprintln(w)
			if fec == 0 {
				fmt.Fprintln(w, "without FEC")
			} else {
				fmt.Fprintf(w, "with FEC (each packet carries the previous %d payloads)\n", fec)
			}
			fmt.Fprintf(w, "%5s | %9s %7s | %8s %8s | %6s %6s | %9s %6s | %10s %6s | %8s %7s %7s %8s\n",
				"loss", "perceived", "(paper)", "p99", "max", "losses", "(paper)", "dup-recov", "(paper)", "dup-repair", "(paper)",
				"requests", "repairs", "via-fec", "via-repair")
		}
		paper := func(v int, unit string) string {
			if row.Paper == nil {
				return "-"
			}
			return fmt.Sprintf("%d%s", v, unit)
		}
		var p PaperRow
		if row.Paper != nil {
			p = *row.Paper
		}
		fmt.Fprintf(w, "%4.0f%% | %9s %7s | %8s %8s | %6d %6s | %9d %6s | %10d %6s | %8d %7d %7d %8d\n",
			row.Loss*100, ms(row.Mean), paper(p.PerceivedMillis, "ms"), ms(row.P99), ms(row.Max),
			row.Losses, paper(p.Losses, ""), row.DupRequests, paper(p.DuplicateRecovery, ""),
			row.DupRepairs, paper(p.DuplicateRepairs, ""), row.Requests, row.Repairs, row.ViaFEC, row.ViaRepair)
	}
	fmt.Fprintln(w)
	for _, g := range r.Goals {
		mark := "FAIL"
		if g.OK {
			mark = "ok"
		}
		fmt.Fprintf(w, "goal %-4s %s %s\n", mark, g.Name, g.Note)
	}
}

// WriteJSON writes the report as one JSON document.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}
