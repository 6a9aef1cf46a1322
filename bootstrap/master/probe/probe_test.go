package probe

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/overworld-p2p/overworld/bootstrap/master/probe/probetest"
	"github.com/overworld-p2p/overworld/bootstrap/master/ratelimit"
	"github.com/overworld-p2p/overworld/node/await"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// serveResponder runs a responder on 127.0.0.1 until the test ends.
func serveResponder(t *testing.T, cfg ResponderConfig) (*Responder, netip.AddrPort) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet()
	}
	r, err := NewResponder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, conn) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("responder: %v", err)
		}
		conn.Close()
	})
	return r, conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

func addrPort(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	a, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestWireBounds(t *testing.T) {
	ping := EncodePing(42)
	if len(ping) != MinPingSize {
		t.Fatalf("ping is %d bytes, want %d", len(ping), MinPingSize)
	}
	p, err := DecodePing(ping)
	if err != nil || p.Nonce != 42 {
		t.Fatalf("ping round trip: %v %v", p, err)
	}
	biggest := &Pong{Nonce: ^uint64(0), GameId: strings.Repeat("g", MaxGameIDLen), MirrorId: ^uint32(0), LoadPermille: ^uint32(0)}
	pong, err := EncodePong(biggest)
	if err != nil {
		t.Fatalf("largest pong: %v", err)
	}
	if len(pong) > MinPingSize {
		t.Fatalf("largest pong is %d bytes, above the ping's %d: the responder would amplify", len(pong), MinPingSize)
	}
	back, err := DecodePong(pong)
	if err != nil || back.GameId != biggest.GameId || back.MirrorId != biggest.MirrorId {
		t.Fatalf("pong round trip: %v %v", back, err)
	}
	if _, err := EncodePong(&Pong{GameId: strings.Repeat("g", MaxGameIDLen+1)}); err == nil {
		t.Fatal("oversized game id encoded")
	}
	for name, b := range map[string][]byte{
		"unpadded ping":  ping[:MinPingSize-1],
		"header only":    ping[:headerSize],
		"oversize":       append(bytes.Clone(ping), make([]byte, MaxPacketSize)...),
		"other protocol": append([]byte("GET / HTTP/1.1\r\n"), make([]byte, MinPingSize)...),
		"pong as ping":   append(bytes.Clone(pong), make([]byte, MinPingSize)...),
		"bad protobuf":   append(header(kindPing), bytes.Repeat([]byte{0xff}, MinPingSize)...),
	} {
		if _, err := DecodePing(b); err == nil {
			t.Errorf("%s decoded as a ping", name)
		}
	}
}

// aliveOptions is for measuring responders that all answer: Measure
// returns once every ping has its pong, so the silence only bounds a hang
// (the default 1 s would count a pong of a responder starved that long on
// a loaded machine as missing).
var aliveOptions = Options{Silence: time.Minute}

func TestMeasureTimesEveryPing(t *testing.T) {
	_, addr := serveResponder(t, ResponderConfig{GameID: "g1", MirrorID: 7, Load: func() uint32 { return 250 }})
	ms, err := Measure(context.Background(), []Target{{Addr: addr, GameID: "g1", MirrorID: 7}}, aliveOptions)
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0]
	if m.Sent != 5 || len(m.RTTs) != 5 || m.Load != 250 || m.Wrong != 0 || m.Silent() {
		t.Fatalf("measurement %+v: want 5 pings timed at load 250", m)
	}
	for i := 1; i < len(m.RTTs); i++ {
		if m.RTTs[i] < m.RTTs[i-1] {
			t.Fatalf("RTTs not sorted: %v", m.RTTs)
		}
	}
	if m.Median() != m.RTTs[2] {
		t.Fatalf("median %v of %v", m.Median(), m.RTTs)
	}
	t.Logf("loopback RTTs %v", m.RTTs)
}

func TestMeasureSkipsSilentAndWrongMirrors(t *testing.T) {
	sink, err := probetest.NewSink()
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	resp, addr := serveResponder(t, ResponderConfig{GameID: "g1", MirrorID: 1})
	_, other := serveResponder(t, ResponderConfig{GameID: "g2", MirrorID: 1})
	targets := []Target{
		{Addr: addrPort(t, sink.Addr()), GameID: "g1", MirrorID: 2}, // dead
		{Addr: addr, GameID: "g1", MirrorID: 1},
		{Addr: other, GameID: "g1", MirrorID: 3}, // answers for another game
	}
	// The live responders must answer within the silence: 3 s rides out a
	// machine stalled for a second or two (1 s left no room for that).
	const silence = 3 * time.Second
	start := time.Now()
	ms, err := Measure(context.Background(), targets, Options{Silence: silence})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if !ms[0].Silent() || ms[0].Sent != 5 {
		t.Fatalf("dead mirror: %+v", ms[0])
	}
	if len(ms[1].RTTs) != 5 {
		t.Fatalf("live mirror: %+v", ms[1])
	}
	if !ms[2].Silent() || ms[2].Wrong != 5 {
		t.Fatalf("mirror of another game: %+v, want 5 wrong pongs and no RTT", ms[2])
	}
	// One Silence for the whole call, not one per ping or per mirror.
	if took >= 2*silence {
		t.Fatalf("a dead mirror cost %v with a silence of %v", took, silence)
	}
	t.Logf("with a dead mirror Measure took %v (silence %v)", took, silence)

	// The responder learns its real identity: now it times.
	if err := resp.SetIdentity("g1", 2); err != nil {
		t.Fatal(err)
	}
	ms, err = Measure(context.Background(), []Target{{Addr: addr, GameID: "g1", MirrorID: 2}}, aliveOptions)
	if err != nil || len(ms[0].RTTs) != 5 {
		t.Fatalf("after SetIdentity: %+v %v", ms, err)
	}
}

func TestMeasureStopsWithContext(t *testing.T) {
	sink, err := probetest.NewSink()
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	ms, err := Measure(ctx, []Target{{Addr: addrPort(t, sink.Addr()), GameID: "g"}}, Options{Silence: time.Minute})
	if err == nil || len(ms) != 1 {
		t.Fatalf("cancelled measure: %v %v", ms, err)
	}
}

func TestRelayAddsItsDelay(t *testing.T) {
	_, addr := serveResponder(t, ResponderConfig{GameID: "g", MirrorID: 1})
	relay, err := probetest.NewRelay(addr.String(), 30*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	ms, err := Measure(context.Background(), []Target{{Addr: addrPort(t, relay.Addr()), GameID: "g", MirrorID: 1}}, aliveOptions)
	if err != nil {
		t.Fatal(err)
	}
	// A timer never fires early: every RTT is at least the delay.
	if len(ms[0].RTTs) != 5 || ms[0].RTTs[0] < 30*time.Millisecond {
		t.Fatalf("through a 30 ms relay: %v", ms[0].RTTs)
	}
}

func counter(t *testing.T, reg *prometheus.Registry, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if reason == "" || labelIs(m, "reason", reason) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func labelIs(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func TestResponderRefusesAndCounts(t *testing.T) {
	reg := prometheus.NewRegistry()
	_, addr := serveResponder(t, ResponderConfig{GameID: "g", MirrorID: 1, Registerer: reg,
		PerSource: ratelimit.Rate{Every: time.Hour, Burst: 3}})
	conn, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ping := EncodePing(1)
	for _, b := range [][]byte{ping[:40], make([]byte, 400), append([]byte("xxxxx"), make([]byte, 200)...), append(header(kindPing), bytes.Repeat([]byte{0xff}, 150)...)} {
		conn.Write(b)
	}
	for range 5 {
		conn.Write(ping)
	}
	want := map[string]float64{refusedShort: 1, refusedOversize: 1, refusedNotProbe: 1, refusedMalformed: 1, refusedRateLimited: 2}
	if err := await.UntilErr(30*time.Second, "the probe to count every datagram", func() bool {
		ok := counter(t, reg, "overworld_probe_pongs_total", "") == 3
		for reason, n := range want {
			ok = ok && counter(t, reg, "overworld_probe_refused_total", reason) == n
		}
		return ok
	}); err != nil {
		t.Fatalf("%v: pongs %v, refused short %v oversize %v not_probe %v malformed %v rate_limited %v", err,
			counter(t, reg, "overworld_probe_pongs_total", ""), counter(t, reg, "overworld_probe_refused_total", refusedShort),
			counter(t, reg, "overworld_probe_refused_total", refusedOversize), counter(t, reg, "overworld_probe_refused_total", refusedNotProbe),
			counter(t, reg, "overworld_probe_refused_total", refusedMalformed), counter(t, reg, "overworld_probe_refused_total", refusedRateLimited))
	}
	// The three pongs came back, none larger than a ping. The responder
	// counts a pong after writing it, and pongs_total is 3: no other is on
	// its way, and these three are already in the socket's buffer.
	conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // a hang guard
	buf := make([]byte, 1024)
	for i := range 3 {
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatalf("pong %d of the 3 counted: %v", i+1, err)
		}
		if n > len(ping) {
			t.Fatalf("pong of %d bytes for a ping of %d", n, len(ping))
		}
	}
}
