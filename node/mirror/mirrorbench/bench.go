// Package mirrorbench measures mirror mode's bandwidth the way Cronin et
// al. (2001, §2.6, table 2.3) measured mirrored Quake's: n = 1…5 clients
// on one mirror of two, playing for a minute, and the rates of the three
// streams of their model:
//
//	a      client → mirror commands, per client
//	b      mirror → mirror (CRIMP multicast) commands, per client
//	c + n·(d+e)  mirror → client state updates, per client; c and d+e by
//	       linear regression over n
//
// The mirrors are real (node/mirror servers over CRIMP on the in-memory
// network), the clients speak the real client protocol (LocalClient: the
// same protobuf frames as the WebSocket), bots play, and everything runs in
// simulated time. The clients play on mirror 2; mirror 1 is the authority.
//
// Each client count is measured under every protocol asked for, the
// command protocol and the event protocol (node/mirror event.go), side by
// side: the bytes both mirrors put on the mirror link (every CRIMP packet
// but the hash checkpoints), the rollbacks of their synchronizers, and the
// consistent-event delay — under the command protocol the CRIMP delivery
// latency of the clients' commands at the authority (from then on every
// mirror computes the same outcome), under the event protocol the time
// from an action's stamp to the authority's decision reaching the clients'
// mirror. Rates are given both for the payload (what the protocol
// encodes) and "on the wire", adding per-datagram UDP/IPv4 headers (28
// bytes) to CRIMP packets and per-frame WebSocket (2-4 bytes, plus a 4-byte
// mask from clients) and TCP/IPv4 (40 bytes) headers to client frames, one
// segment per frame: the paper measured the transport layer.
package mirrorbench

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand"
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/mirror"
	"github.com/overworld-p2p/overworld/node/mirror/mirrorpb"
)

// Config is one bench run.
type Config struct {
	// Clients lists the client counts to measure (the paper: 1…5).
	Clients []int
	// Duration each count plays (the paper analysed 60 s of two-minute
	// games); Warmup is played before and not counted.
	Duration, Warmup time.Duration
	// FEC is CRIMP's redundancy (0 gives the plain command stream the
	// paper's b measures).
	FEC int
	// Link is the network between the two mirrors.
	Link crimp.LinkParams
	// FrameTicks spaces the updates (1: every tick, 30 Hz).
	FrameTicks int
	Seed       int64
	World      game.Config
	// Protocols lists the protocols to measure (default both).
	Protocols []mirror.Protocol
	// MoveRedundancy is the event protocol's (mirror.Config; 0: its
	// default).
	MoveRedundancy int
	// Delays are the synchronizers' (default mirror.DefaultDelays); on a
	// lossy link the last must cover CRIMP's recovery.
	Delays []time.Duration
}

// Default is the paper's setup.
func Default() Config {
	w := game.DefaultConfig()
	w.RegionsX, w.RegionsY = 3, 3
	return Config{
		Clients: []int{1, 2, 3, 4, 5}, Duration: time.Minute, Warmup: 5 * time.Second,
		Link: crimp.LinkParams{Delay: 2 * time.Millisecond}, FrameTicks: 1, Seed: 1, World: w,
		Protocols: []mirror.Protocol{mirror.ProtocolCommand, mirror.ProtocolEvent},
	}
}

// Rates are kilobits per second.
type Rates struct {
	A, B, Update float64
}

// Row is one client count under one protocol.
type Row struct {
	Protocol string
	Clients  int
	Payload  Rates // per client
	Wire     Rates // per client, with transport headers
	// CommandsPerSecond and UpdatesPerSecond are per client.
	CommandsPerSecond, UpdatesPerSecond float64
	UpdateBytes                         float64 // mean payload of an update
	// Link is what both mirrors put on the mirror link, per client, in
	// kbps (every CRIMP packet but the hash checkpoints).
	LinkPayload, LinkWire float64
	// Rollbacks and LeadingRollbacks are per minute, both mirrors
	// together; Resyncs counts states installed after a hash mismatch.
	Rollbacks, LeadingRollbacks float64
	Resyncs                     uint64
	// EventDelay is the consistent-event delay (see the package doc).
	EventDelay time.Duration
}

// Summary is one protocol over every client count: the coefficients and
// the means of the comparison.
type Summary struct {
	Protocol              string
	PayloadFit, WireFit   Fit
	A, B, WireA, WireB    float64
	LinkPayload, LinkWire float64
	Rollbacks             float64
	Resyncs               uint64
	EventDelay            time.Duration
}

// Fit is c + (d+e)·n fitted to the per-client update rates.
type Fit struct {
	C, DE, R float64
}

// Report is the bench's result.
type Report struct {
	Config      Config
	Rows        []Row
	Summaries   []Summary
	ElapsedReal time.Duration
}

// Paper is table 2.3.
var Paper = struct{ A, B, C, DE, R float64 }{A: 5.68, B: 10.6, C: 1.16, DE: 5.36, R: 0.8682}

// Run measures every client count under every protocol.
func Run(ctx context.Context, cfg Config) (Report, error) {
	start := time.Now()
	rep := Report{Config: cfg}
	if len(cfg.Protocols) == 0 {
		cfg.Protocols = Default().Protocols
	}
	for _, p := range cfg.Protocols {
		var rows []Row
		for _, n := range cfg.Clients {
			if ctx.Err() != nil {
				return rep, ctx.Err()
			}
			row, err := runOne(cfg, n, p)
			if err != nil {
				return rep, fmt.Errorf("%s protocol, %d clients: %w", p, n, err)
			}
			rows = append(rows, row)
		}
		rep.Rows = append(rep.Rows, rows...)
		rep.Summaries = append(rep.Summaries, summarize(p, rows))
	}
	rep.ElapsedReal = time.Since(start)
	return rep, nil
}

// summarize fits the update rates and averages the rest over the rows.
func summarize(p mirror.Protocol, rows []Row) Summary {
	s := Summary{Protocol: p.String()}
	var xs, payload, wire []float64
	var delay time.Duration
	n := float64(len(rows))
	for _, r := range rows {
		xs = append(xs, float64(r.Clients))
		payload = append(payload, r.Payload.Update)
		wire = append(wire, r.Wire.Update)
		s.A += r.Payload.A / n
		s.B += r.Payload.B / n
		s.WireA += r.Wire.A / n
		s.WireB += r.Wire.B / n
		s.LinkPayload += r.LinkPayload / n
		s.LinkWire += r.LinkWire / n
		s.Rollbacks += r.Rollbacks / n
		s.Resyncs += r.Resyncs
		delay += r.EventDelay / time.Duration(len(rows))
	}
	s.EventDelay = delay
	s.PayloadFit, s.WireFit = fit(xs, payload), fit(xs, wire)
	return s
}

// fit is the least-squares line y = c + de·x and the correlation r.
func fit(xs, ys []float64) Fit {
	n := float64(len(xs))
	if n < 2 {
		return Fit{}
	}
	var sx, sy, sxx, syy, sxy float64
	for i := range xs {
		sx, sy = sx+xs[i], sy+ys[i]
		sxx, syy, sxy = sxx+xs[i]*xs[i], syy+ys[i]*ys[i], sxy+xs[i]*ys[i]
	}
	de := (n*sxy - sx*sy) / (n*sxx - sx*sx)
	c := (sy - de*sx) / n
	r := (n*sxy - sx*sy) / math.Sqrt((n*sxx-sx*sx)*(n*syy-sy*sy))
	return Fit{C: c, DE: de, R: r}
}

const (
	udpIPv4Header = 28
	tcpIPv4Header = 40
)

// wsHeader is a WebSocket frame header for a payload of n bytes (masked
// from clients).
func wsHeader(n int, fromClient bool) int {
	h := 2
	switch {
	case n >= 1<<16:
		h += 8
	case n >= 126:
		h += 2
	}
	if fromClient {
		h += 4
	}
	return h
}

// counter counts one stream's bytes and frames.
type counter struct{ payload, wire, frames float64 }

func (c *counter) add(n, extra int) {
	c.payload += float64(n)
	c.wire += float64(n + extra)
	c.frames++
}

func runOne(cfg Config, n int, protocol mirror.Protocol) (Row, error) {
	clock := crimp.NewSimClock(time.Unix(1_700_000_000, 0))
	rng := rand.New(rand.NewSource(cfg.Seed + int64(n)))
	pub, signer, err := ed25519.GenerateKey(rng)
	if err != nil {
		return Row{}, err
	}
	authPub, authKey, err := ed25519.GenerateKey(rng)
	if err != nil {
		return Row{}, err
	}
	chars := &mirror.MemoryCharacters{Key: pub}
	mnet := crimp.NewMemNetwork(clock, cfg.Seed)
	defer mnet.Close()
	mnet.SetLink("m1", "m2", cfg.Link)
	log := slog.New(slog.DiscardHandler)
	var mirrors []*mirror.Server
	var eps []*crimp.MemEndpoint
	defer func() {
		for _, m := range mirrors {
			m.Close()
		}
	}()
	for i := range 2 {
		cc := crimp.DefaultConfig()
		cc.FEC = cfg.FEC
		if len(cfg.Delays) > 0 {
			cc.History = max(time.Second, cfg.Delays[len(cfg.Delays)-1])
		}
		ep := mnet.Endpoint(fmt.Sprintf("m%d", i+1))
		var key ed25519.PrivateKey
		if i == 0 {
			key = authKey
		}
		m, err := mirror.New(mirror.Config{
			Game: cfg.World, Protocol: protocol, MoveRedundancy: cfg.MoveRedundancy, Delays: cfg.Delays, Authority: i == 0, AuthorityKey: key, AuthorityPublicKey: authPub, CRIMP: cc, Transport: ep, Clock: clock,
			Spawn: func(f func()) { clock.AfterFunc(0, f) }, AccountKey: pub, Characters: chars,
			FrameTicks: cfg.FrameTicks, Logger: log, Seed: cfg.Seed*10 + int64(i) + 1,
		})
		if err != nil {
			return Row{}, err
		}
		if err := m.Start(); err != nil {
			return Row{}, err
		}
		mirrors, eps = append(mirrors, m), append(eps, ep)
		if !runUntil(clock, 10*time.Second, m.Ready) {
			return Row{}, fmt.Errorf("mirror %d not ready", i+1)
		}
	}
	// The clients' mirror's command stream (b), and everything both
	// mirrors put on the link but the hash checkpoints.
	var multicast, link counter
	counting := false
	from := eps[1].LocalAddr()
	mnet.Tap(func(src netip.AddrPort, b []byte) {
		if !counting || len(b) < 2 {
			return
		}
		p, err := crimp.Decode(b)
		if err != nil {
			return
		}
		if p.Kind == crimp.KindData || p.Kind == crimp.KindDatagram {
			if isCheckpoint(p.Payload) {
				return
			}
			if src == from {
				multicast.add(len(b), udpIPv4Header)
			}
		}
		link.add(len(b), udpIPv4Header)
	})

	// Every client starts in the middle region, in sight of the others.
	w, err := game.NewWorld(cfg.World)
	if err != nil {
		return Row{}, err
	}
	middle := game.RegionCoord{X: cfg.World.RegionsX / 2, Y: cfg.World.RegionsY / 2}
	var clients []*mirror.LocalClient
	for i := range n {
		key, _, err := crypto.GenerateEd25519Key(rng)
		if err != nil {
			return Row{}, err
		}
		id, _ := peer.IDFromPrivateKey(key)
		name := fmt.Sprintf("player%d", i+1)
		now := clock.Now()
		tok, err := token.Sign(signer, token.Claims{Session: "s" + name, Account: "a" + name, Player: name, Peer: id,
			IssuedAt: now.Add(-time.Second), Expiry: now.Add(time.Hour)})
		if err != nil {
			return Row{}, err
		}
		pos := w.SpawnPoint(game.PlayerID(name), middle, 0)
		if _, err := chars.Save(context.Background(), tok, game.Character{Pos: pos, Health: game.MaxHealth, Skill: game.StartingSkill}, 0); err != nil {
			return Row{}, err
		}
		lc := mirror.ConnectLocal(mirrors[1], key, tok, clock, time.Millisecond)
		lc.StartBot(uint64(cfg.Seed)+uint64(i), time.Second/time.Duration(cfg.World.TickRate))
		clients = append(clients, lc)
	}
	if !runUntil(clock, 10*time.Second, func() bool {
		for _, c := range clients {
			if !c.View().HasSelf {
				return false
			}
		}
		return true
	}) {
		return Row{}, fmt.Errorf("clients not playing")
	}
	clock.RunFor(cfg.Warmup)
	// Client frames: the totals before and after, headers sized from the
	// mean frame (updates vary little in size).
	var up, down counter
	before := make([][4]uint64, len(clients))
	for i, c := range clients {
		before[i] = c.Counters()
	}
	stats0 := []mirror.Stats{mirrors[0].Metrics(), mirrors[1].Metrics()}
	lat0 := crimpLatency(mirrors[0])
	counting = true
	clock.RunFor(cfg.Duration)
	counting = false
	stats1 := []mirror.Stats{mirrors[0].Metrics(), mirrors[1].Metrics()}
	for i, c := range clients {
		after := c.Counters()
		in, out := after[0]-before[i][0], after[1]-before[i][1]
		fin, fout := after[2]-before[i][2], after[3]-before[i][3]
		if fin > 0 {
			mean := int(in / fin)
			down.payload += float64(in)
			down.wire += float64(in) + float64(fin)*float64(wsHeader(mean, false)+tcpIPv4Header)
			down.frames += float64(fin)
		}
		if fout > 0 {
			mean := int(out / fout)
			up.payload += float64(out)
			up.wire += float64(out) + float64(fout)*float64(wsHeader(mean, true)+tcpIPv4Header)
			up.frames += float64(fout)
		}
	}
	secs := cfg.Duration.Seconds()
	kbps := func(bytes float64) float64 { return bytes * 8 / 1000 / secs / float64(n) }
	row := Row{
		Clients:           n,
		Payload:           Rates{A: kbps(up.payload), B: kbps(multicast.payload), Update: kbps(down.payload)},
		Wire:              Rates{A: kbps(up.wire), B: kbps(multicast.wire), Update: kbps(down.wire)},
		CommandsPerSecond: multicast.frames / secs / float64(n),
		UpdatesPerSecond:  down.frames / secs / float64(n),
	}
	if down.frames > 0 {
		row.UpdateBytes = down.payload / down.frames
	}
	row.Protocol = protocol.String()
	row.LinkPayload, row.LinkWire = kbps(link.payload), kbps(link.wire)
	minutes := cfg.Duration.Minutes()
	for i := range stats1 {
		row.Rollbacks += float64(stats1[i].TSS["rollbacks"]-stats0[i].TSS["rollbacks"]) / minutes
		row.LeadingRollbacks += float64(stats1[i].LeadingRollbacks-stats0[i].LeadingRollbacks) / minutes
		row.Resyncs += stats1[i].Resyncs - stats0[i].Resyncs
	}
	if protocol == mirror.ProtocolEvent {
		e0, e1 := stats0[1].Event, stats1[1].Event
		if d := e1.Applied - e0.Applied; d > 0 {
			// The mean over the window, from the running means.
			sum := int64(e1.DecisionDelay)*int64(e1.Applied) - int64(e0.DecisionDelay)*int64(e0.Applied)
			row.EventDelay = time.Duration(sum / int64(d))
		}
	} else {
		row.EventDelay = crimpLatency(mirrors[0]).since(lat0)
	}
	return row, nil
}

// latencySample is a CRIMP member's delivery latency so far: a count and
// a sum, so that the mean of a window can be taken.
type latencySample struct {
	n   uint64
	sum time.Duration
}

func crimpLatency(m *mirror.Server) latencySample {
	st := m.Metrics()
	n := st.CRIMP["delivered"]
	return latencySample{n: n, sum: time.Duration(n) * st.CRIMPMeanLatency}
}

func (l latencySample) since(before latencySample) time.Duration {
	if l.n <= before.n {
		return 0
	}
	return (l.sum - before.sum) / time.Duration(l.n-before.n)
}

// isCheckpoint reports whether a CRIMP payload is a hash checkpoint (the
// authority's comes signed).
func isCheckpoint(payload []byte) bool {
	var m mirrorpb.PeerMessage
	if proto.Unmarshal(payload, &m) != nil {
		return false
	}
	if s := m.GetSigned(); s != nil {
		var inner mirrorpb.PeerMessage
		return proto.Unmarshal(s.Message, &inner) == nil && inner.GetCheckpoint() != nil
	}
	return m.GetCheckpoint() != nil
}

func runUntil(clock *crimp.SimClock, limit time.Duration, cond func() bool) bool {
	end := clock.Now().Add(limit)
	for !cond() {
		if !clock.Now().Before(end) {
			return false
		}
		clock.RunFor(20 * time.Millisecond)
	}
	return true
}

// Print writes the report beside table 2.3, and the protocols side by
// side.
func (r Report) Print(w io.Writer) {
	c := r.Config
	fmt.Fprintf(w, "Mirror-mode bandwidth (Cronin et al. 2001, §2.6, table 2.3): n clients on one of two mirrors, bots, %v per n in simulated time,\n", c.Duration)
	delays := c.Delays
	if len(delays) == 0 {
		delays = mirror.DefaultDelays()
	}
	fmt.Fprintf(w, "updates every %d tick(s) at %d Hz, CRIMP FEC %d, mirror link %v ± %v, %.0f%% loss, delays %v. kbps per client.\n", c.FrameTicks, c.World.TickRate, c.FEC, c.Link.Delay, c.Link.Jitter, c.Link.Loss*100, delays)
	for _, sum := range r.Summaries {
		fmt.Fprintf(w, "\n%s protocol\n", sum.Protocol)
		fmt.Fprintf(w, "%3s  %9s %9s %11s   %9s %9s %11s   %8s %8s %10s   %9s %8s %9s\n", "n", "a", "b", "update", "a wire", "b wire", "update wire",
			"cmd/s", "upd/s", "upd bytes", "link wire", "rb/min", "ev delay")
		for _, row := range r.Rows {
			if row.Protocol != sum.Protocol {
				continue
			}
			fmt.Fprintf(w, "%3d  %9.2f %9.2f %11.2f   %9.2f %9.2f %11.2f   %8.1f %8.1f %10.0f   %9.2f %8.1f %9s\n", row.Clients,
				row.Payload.A, row.Payload.B, row.Payload.Update, row.Wire.A, row.Wire.B, row.Wire.Update,
				row.CommandsPerSecond, row.UpdatesPerSecond, row.UpdateBytes, row.LinkWire, row.Rollbacks, row.EventDelay.Round(time.Microsecond))
		}
	}
	fmt.Fprintf(w, "\n%-32s %8s %8s %8s %8s %8s\n", "", "a", "b", "c", "d+e", "r")
	fmt.Fprintf(w, "%-32s %8.2f %8.2f %8.2f %8.2f %8.4f\n", "paper (table 2.3)", Paper.A, Paper.B, Paper.C, Paper.DE, Paper.R)
	for _, sum := range r.Summaries {
		fmt.Fprintf(w, "%-32s %8.2f %8.2f %8.2f %8.2f %8.4f\n", "overworld "+sum.Protocol+", payload", sum.A, sum.B, sum.PayloadFit.C, sum.PayloadFit.DE, sum.PayloadFit.R)
		fmt.Fprintf(w, "%-32s %8.2f %8.2f %8.2f %8.2f %8.4f\n", "overworld "+sum.Protocol+", with headers", sum.WireA, sum.WireB, sum.WireFit.C, sum.WireFit.DE, sum.WireFit.R)
	}
	if len(r.Summaries) > 1 {
		fmt.Fprintf(w, "\nProtocols compared (means over n): mirror-link kbps per client (both mirrors, no checkpoints), rollbacks per minute\n")
		fmt.Fprintf(w, "(both mirrors), states installed after a mismatch, consistent-event delay (command: commands reach the authority;\n")
		fmt.Fprintf(w, "event: the authority's decision reaches the clients' mirror).\n")
		fmt.Fprintf(w, "%-10s %10s %10s %10s %8s %10s\n", "protocol", "link", "link wire", "rb/min", "resyncs", "ev delay")
		for _, sum := range r.Summaries {
			fmt.Fprintf(w, "%-10s %10.2f %10.2f %10.1f %8d %10s\n", sum.Protocol, sum.LinkPayload, sum.LinkWire, sum.Rollbacks, sum.Resyncs, sum.EventDelay.Round(time.Microsecond))
		}
	}
	fmt.Fprintf(w, "\n(%v of real time)\n", r.ElapsedReal.Round(time.Millisecond))
}

// JSON writes the report as JSON.
func (r Report) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
