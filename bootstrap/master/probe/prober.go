package probe

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"
)

// Target is one mirror to probe, as the master lists it.
type Target struct {
	Addr     netip.AddrPort
	GameID   string
	MirrorID uint32
}

// Measurement is what probing one target found.
type Measurement struct {
	Target
	Sent int
	// RTTs of the pongs that came back, smallest first.
	RTTs []time.Duration
	// Load is the load the latest pong reported, in permille.
	Load uint32
	// Wrong counts pongs from the target's address that named another
	// game or mirror; they are not timed.
	Wrong int
}

// Silent reports whether no pong came back.
func (m Measurement) Silent() bool { return len(m.RTTs) == 0 }

// Median is the median RTT (the mean of the two middle ones for an even
// count); 0 if silent.
func (m Measurement) Median() time.Duration {
	n := len(m.RTTs)
	switch {
	case n == 0:
		return 0
	case n%2 == 1:
		return m.RTTs[n/2]
	}
	return (m.RTTs[n/2-1] + m.RTTs[n/2]) / 2
}

// Options configures Measure. Zero fields take the defaults listed.
type Options struct {
	// Pings per target (default 5), sent Spacing apart (default 15 ms) so
	// that they sample the path at different moments; every target gets
	// its i-th ping at the same time.
	Pings   int
	Spacing time.Duration
	// Silence is how long Measure waits, from its first ping, for pongs
	// (default 1 s): a dead mirror costs at most this.
	Silence time.Duration
}

// MaxTargets bounds one Measure call.
const MaxTargets = 1024

func (o *Options) validate() error {
	if o.Pings == 0 {
		o.Pings = 5
	}
	if o.Spacing == 0 {
		o.Spacing = 15 * time.Millisecond
	}
	if o.Silence == 0 {
		o.Silence = time.Second
	}
	switch {
	case o.Pings < 1 || o.Pings > 100:
		return fmt.Errorf("pings %d: want 1-100", o.Pings)
	case o.Spacing < 0:
		return fmt.Errorf("spacing %v below 0", o.Spacing)
	case o.Silence <= time.Duration(o.Pings-1)*o.Spacing:
		return fmt.Errorf("silence %v: want above the %v it takes to send %d pings %v apart", o.Silence, time.Duration(o.Pings-1)*o.Spacing, o.Pings, o.Spacing)
	}
	return nil
}

// pending is a ping in flight.
type pending struct {
	target int
	sent   time.Time
}

// Measure pings every target from one UDP socket, all in parallel, and
// returns a measurement per target in the order given. It returns once
// every ping has its pong, or Silence after the first ping, or when ctx
// ends (with what came back until then).
func Measure(ctx context.Context, targets []Target, o Options) ([]Measurement, error) {
	if err := o.validate(); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	if len(targets) > MaxTargets {
		return nil, fmt.Errorf("probe: %d targets over %d", len(targets), MaxTargets)
	}
	out := make([]Measurement, len(targets))
	for i, t := range targets {
		out[i].Target = t
	}
	if len(targets) == 0 {
		return out, nil
	}
	conn, err := net.ListenUDP("udp", nil)
	if err != nil {
		return nil, fmt.Errorf("probe: socket: %w", err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	start := time.Now()
	deadline := start.Add(o.Silence)
	conn.SetReadDeadline(deadline)
	// The sender owns inflight until it finishes; pongs go through the
	// reader's channel, so one goroutine (this one) touches the table.
	inflight := make(map[uint64]pending, len(targets)*o.Pings)
	pongs := make(chan received, 64)
	readerDone := make(chan error, 1)
	quit := make(chan struct{})
	go func() { readerDone <- readPongs(conn, pongs, quit) }()
	defer func() {
		// Unblock and wait for the reader: it is this call's goroutine.
		close(quit)
		conn.SetReadDeadline(time.Unix(1, 0))
		for range pongs {
		}
	}()

	nextPing := start
	sentRounds := 0
	answered := 0
	total := len(targets) * o.Pings
	timer := time.NewTimer(0)
	defer timer.Stop()
	for answered < total {
		if sentRounds < o.Pings && !time.Now().Before(nextPing) {
			for i, t := range targets {
				nonce := newNonce()
				inflight[nonce] = pending{target: i, sent: time.Now()}
				if _, err := conn.WriteToUDPAddrPort(EncodePing(nonce), t.Addr); err == nil {
					out[i].Sent++
				} else {
					delete(inflight, nonce)
					total--
				}
			}
			sentRounds++
			nextPing = nextPing.Add(o.Spacing)
			if sentRounds == o.Pings {
				timer.Stop()
			} else {
				timer.Reset(time.Until(nextPing))
			}
			continue
		}
		select {
		case p, ok := <-pongs:
			if !ok {
				// The reader stopped: the deadline passed or ctx ended.
				return finish(out), readerResult(<-readerDone, ctx)
			}
			pend, known := inflight[p.pong.Nonce]
			if !known || !sameAddr(targets[pend.target].Addr, p.from) {
				continue // forged, duplicated or stray
			}
			m := &out[pend.target]
			if p.pong.GameId != m.GameID || p.pong.MirrorId != m.MirrorID {
				m.Wrong++
				continue
			}
			delete(inflight, p.pong.Nonce)
			m.RTTs = append(m.RTTs, p.at.Sub(pend.sent))
			m.Load = min(p.pong.LoadPermille, 1000)
			answered++
		case <-timer.C:
		}
	}
	return finish(out), nil
}

type received struct {
	pong *Pong
	from netip.AddrPort
	at   time.Time
}

// readPongs forwards every decodable pong until the socket's read fails
// (its deadline) or quit closes, then closes pongs.
func readPongs(conn *net.UDPConn, pongs chan<- received, quit <-chan struct{}) error {
	defer close(pongs)
	buf := make([]byte, MaxPacketSize+1)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		at := time.Now()
		if err != nil {
			return err
		}
		p, err := DecodePong(buf[:n])
		if err != nil {
			continue
		}
		select {
		case pongs <- received{p, from, at}:
		case <-quit:
			return nil
		}
	}
}

func readerResult(err error, ctx context.Context) error {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.As(err, &ne) && ne.Timeout():
		return nil
	}
	return fmt.Errorf("probe: read: %w", err)
}

func finish(out []Measurement) []Measurement {
	for i := range out {
		slices.Sort(out[i].RTTs)
	}
	return out
}

func sameAddr(a, b netip.AddrPort) bool {
	return a.Addr().Unmap() == b.Addr().Unmap() && a.Port() == b.Port()
}

func newNonce() uint64 {
	var b [8]byte
	rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])
}
