package finder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/master"
	"github.com/overworld-p2p/overworld/bootstrap/master/probe"
)

// Query says which games to probe.
type Query struct {
	// GameID, if set, probes that game alone; the filters are ignored.
	GameID string
	// World, Mode and MinFree filter the master's list (MinFree 1 is
	// "has space").
	World, Mode string
	MinFree     int
	// MaxGames bounds the games probed, in the master's (ID) order;
	// default 8.
	MaxGames int
}

// Options configures Find. Zero fields take the defaults listed.
type Options struct {
	Probe probe.Options
	// TieWithin is the RTT step within which mirrors tie (default 1 ms).
	TieWithin time.Duration
	// Resolver resolves DNS names in probe addresses (default
	// net.DefaultResolver), within ResolveTimeout (default 2 s).
	Resolver       *net.Resolver
	ResolveTimeout time.Duration
}

// ErrNoGames means the master lists no game that matches.
var ErrNoGames = errors.New("no game matches")

// Candidate is one mirror with what probing it found.
type Candidate struct {
	GameID     string `json:"game_id"`
	GameName   string `json:"game_name,omitempty"`
	World      string `json:"world"`
	Mode       string `json:"mode"`
	Players    int    `json:"players"`
	Capacity   int    `json:"capacity"`
	MirrorID   uint32 `json:"mirror_id"`
	ProbeAddr  string `json:"probe_addr"`
	ClientAddr string `json:"client_addr"`
	// Median RTT and every RTT, smallest first.
	Median time.Duration   `json:"-"`
	RTTs   []time.Duration `json:"-"`
	// The same in milliseconds, for JSON readers.
	MedianMS float64   `json:"rtt_ms"`
	RTTsMS   []float64 `json:"rtts_ms"`
	Load     uint32    `json:"load_permille"`
	Sent     int       `json:"pings"`
	Pongs    int       `json:"pongs"`
	Silent   bool      `json:"silent"`
	// Wrong counts pongs naming another game or mirror (a stale listing).
	Wrong int `json:"wrong_pongs,omitempty"`
	// Err says why a mirror could not be probed (its address).
	Err string `json:"error,omitempty"`
}

// Result is what Find found.
type Result struct {
	// Ranked are the mirrors that answered, best first.
	Ranked []Candidate `json:"ranked"`
	// Silent are the mirrors that did not, by game and mirror ID.
	Silent []Candidate `json:"silent"`
	// Took is the time spent probing.
	Took time.Duration `json:"-"`
}

// Best is the mirror to play on.
func (r Result) Best() (Candidate, bool) {
	if len(r.Ranked) == 0 {
		return Candidate{}, false
	}
	return r.Ranked[0], true
}

func (o *Options) validate() error {
	if o.TieWithin == 0 {
		o.TieWithin = time.Millisecond
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.ResolveTimeout == 0 {
		o.ResolveTimeout = 2 * time.Second
	}
	if o.TieWithin < 0 {
		return fmt.Errorf("tie step %v below 0", o.TieWithin)
	}
	return nil
}

// Find asks the master for the games q selects, probes all their mirrors
// at once and ranks them.
func Find(ctx context.Context, c *master.Client, q Query, o Options) (Result, error) {
	if err := o.validate(); err != nil {
		return Result{}, fmt.Errorf("find: %w", err)
	}
	if q.MaxGames <= 0 {
		q.MaxGames = 8
	}
	var games []master.Game
	if q.GameID != "" {
		g, err := c.Game(ctx, q.GameID)
		if errors.Is(err, master.ErrNotFound) {
			return Result{}, fmt.Errorf("find: game %s: %w", q.GameID, ErrNoGames)
		}
		if err != nil {
			return Result{}, fmt.Errorf("find: ask the master: %w", err)
		}
		games = []master.Game{g}
	} else {
		var err error
		games, err = c.AllGames(ctx, master.Filter{World: q.World, Mode: q.Mode, MinFree: q.MinFree}, q.MaxGames)
		if err != nil {
			return Result{}, fmt.Errorf("find: ask the master: %w", err)
		}
	}
	if len(games) == 0 {
		return Result{}, fmt.Errorf("find: %w", ErrNoGames)
	}

	var cands []Candidate
	var targets []probe.Target
	var probed []int // index in cands of each target
	for _, g := range games {
		for _, m := range g.Mirrors {
			cand := Candidate{GameID: g.ID, GameName: g.Name, World: g.World, Mode: g.Mode, Players: g.Players, Capacity: g.Capacity,
				MirrorID: m.ID, ProbeAddr: m.ProbeAddr, ClientAddr: m.ClientAddr, RTTsMS: []float64{}}
			addr, err := resolve(ctx, o, m.ProbeAddr)
			if err != nil {
				cand.Silent, cand.Err = true, err.Error()
			} else if len(targets) < probe.MaxTargets {
				probed = append(probed, len(cands))
				targets = append(targets, probe.Target{Addr: addr, GameID: g.ID, MirrorID: m.ID})
			} else {
				cand.Silent, cand.Err = true, "not probed: too many mirrors"
			}
			cands = append(cands, cand)
		}
	}
	start := time.Now()
	ms, err := probe.Measure(ctx, targets, o.Probe)
	took := time.Since(start)
	if err != nil {
		return Result{}, fmt.Errorf("find: %w", err)
	}
	for i, m := range ms {
		cand := &cands[probed[i]]
		cand.Sent, cand.Pongs, cand.Load, cand.Wrong = m.Sent, len(m.RTTs), m.Load, m.Wrong
		cand.Silent = m.Silent()
		cand.Median, cand.RTTs = m.Median(), m.RTTs
		cand.MedianMS = ms2(m.Median())
		for _, d := range m.RTTs {
			cand.RTTsMS = append(cand.RTTsMS, ms2(d))
		}
	}
	res := Result{Ranked: []Candidate{}, Silent: []Candidate{}, Took: took}
	for _, cand := range cands {
		if cand.Silent {
			res.Silent = append(res.Silent, cand)
		} else {
			res.Ranked = append(res.Ranked, cand)
		}
	}
	res.Ranked = Rank(res.Ranked, o.TieWithin)
	slices.SortFunc(res.Silent, func(a, b Candidate) int { return compareIDs(a, b) })
	return res, nil
}

// ms2 is d in milliseconds, to the microsecond.
func ms2(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// resolve turns a probe address into an IP and port.
func resolve(ctx context.Context, o Options, hostPort string) (netip.AddrPort, error) {
	if ap, err := netip.ParseAddrPort(hostPort); err == nil {
		return ap, nil
	}
	host, portStr, err := net.SplitHostPort(hostPort)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("probe address %q: %w", hostPort, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("probe address %q: port: %w", hostPort, err)
	}
	ctx, cancel := context.WithTimeout(ctx, o.ResolveTimeout)
	defer cancel()
	ips, err := o.Resolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return netip.AddrPort{}, fmt.Errorf("probe address %q: resolve: %v", hostPort, err)
	}
	return netip.AddrPortFrom(ips[0].Unmap(), uint16(port)), nil
}

// Rank returns the candidates ordered best first: by median RTT in steps
// of tie (0: exact), then load, mirror ID and game ID.
func Rank(cands []Candidate, tie time.Duration) []Candidate {
	out := slices.Clone(cands)
	step := func(d time.Duration) time.Duration {
		if tie <= 0 {
			return d
		}
		return d / tie
	}
	slices.SortStableFunc(out, func(a, b Candidate) int {
		if sa, sb := step(a.Median), step(b.Median); sa != sb {
			return cmpInt(int64(sa), int64(sb))
		}
		if a.Load != b.Load {
			return cmpInt(int64(a.Load), int64(b.Load))
		}
		return compareIDs(a, b)
	})
	return out
}

func compareIDs(a, b Candidate) int {
	if a.MirrorID != b.MirrorID {
		return cmpInt(int64(a.MirrorID), int64(b.MirrorID))
	}
	switch {
	case a.GameID < b.GameID:
		return -1
	case a.GameID > b.GameID:
		return 1
	}
	return 0
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// WriteTable prints the result for a person: the ranked mirrors, best
// first, then the silent ones.
func (r Result) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RANK\tGAME\tWORLD\tMODE\tPLAYERS\tMIRROR\tRTT\tLOAD\tPONGS\tCLIENT ADDRESS")
	row := func(rank string, c Candidate, rtt, load string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\t%d/%d\t%s\n", rank, c.GameID, c.World, c.Mode, c.Players, c.Capacity,
			c.MirrorID, rtt, load, c.Pongs, c.Sent, c.ClientAddr)
	}
	for i, c := range r.Ranked {
		row(strconv.Itoa(i+1), c, c.Median.Round(10*time.Microsecond).String(), fmt.Sprintf("%.1f%%", float64(c.Load)/10))
	}
	for _, c := range r.Silent {
		what := "silent"
		if c.Err != "" {
			what = "unprobed"
		}
		row("-", c, what, "-")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if best, ok := r.Best(); ok {
		_, err := fmt.Fprintf(w, "best: game %s mirror %d at %s (median of %d pongs), client address %s\n",
			best.GameID, best.MirrorID, best.Median.Round(10*time.Microsecond), best.Pongs, best.ClientAddr)
		return err
	}
	_, err := fmt.Fprintln(w, "no mirror answered")
	return err
}

// Report is the JSON form of a result for scripts.
type Report struct {
	Best    *Candidate  `json:"best"`
	Ranked  []Candidate `json:"ranked"`
	Silent  []Candidate `json:"silent"`
	TookMS  float64     `json:"took_ms"`
	Mirrors int         `json:"mirrors"`
}

// WriteJSON prints the result as one JSON Report.
func (r Result) WriteJSON(w io.Writer) error {
	rep := Report{Ranked: r.Ranked, Silent: r.Silent, TookMS: ms2(r.Took), Mirrors: len(r.Ranked) + len(r.Silent)}
	if best, ok := r.Best(); ok {
		rep.Best = &best
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}
