// Package probetest gives probe tests slow and dead links on 127.0.0.1:
// a Relay forwards datagrams to a target after a fixed delay, as a longer
// path would; a Sink takes datagrams and never answers, as a dead mirror.
package probetest

import (
	"errors"
	"net"
	"sync"
	"time"
)

// maxClients bounds the upstream sockets one relay opens.
const maxClients = 64

// Relay forwards each datagram a client sends it to the target after
// Delay, and each answer back to the client at once: the client measures
// the target's RTT plus Delay.
type Relay struct {
	conn   *net.UDPConn
	target *net.UDPAddr
	delay  time.Duration

	mu      sync.Mutex
	up      map[string]*net.UDPConn // client address → socket towards the target
	order   []string                // clients, oldest first
	closed  bool
	pending sync.WaitGroup
	wg      sync.WaitGroup
}

// NewRelay listens on 127.0.0.1 and relays to target ("host:port").
func NewRelay(target string, delay time.Duration) (*Relay, error) {
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, err
	}
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	r := &Relay{conn: conn, target: ta, delay: delay, up: map[string]*net.UDPConn{}}
	r.wg.Go(r.forward)
	return r, nil
}

// Addr is the relay's address, to list in place of the target's.
func (r *Relay) Addr() string { return r.conn.LocalAddr().String() }

func (r *Relay) forward() {
	buf := make([]byte, 2048)
	for {
		n, from, err := r.conn.ReadFromUDP(buf)
		if err != nil {
			return
		}
		up := r.upstream(from)
		if up == nil {
			continue
		}
		pkt := append([]byte(nil), buf[:n]...)
		r.pending.Add(1)
		time.AfterFunc(r.delay, func() {
			defer r.pending.Done()
			up.Write(pkt)
		})
	}
}

// upstream returns the socket that carries from's datagrams to the
// target, opening it (and the goroutine that carries answers back) on
// first use.
func (r *Relay) upstream(from *net.UDPAddr) *net.UDPConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	if c, ok := r.up[from.String()]; ok {
		return c
	}
	if len(r.up) >= maxClients {
		// Each run of a prober is a new client: forget the oldest.
		oldest := r.order[0]
		r.order = r.order[1:]
		r.up[oldest].Close()
		delete(r.up, oldest)
	}
	c, err := net.DialUDP("udp", nil, r.target)
	if err != nil {
		return nil
	}
	r.up[from.String()] = c
	r.order = append(r.order, from.String())
	r.wg.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, err := c.Read(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue // ICMP unreachable while the target is down
			}
			r.conn.WriteToUDP(buf[:n], from)
		}
	})
	return c
}

// Close stops the relay and waits for its goroutines.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	err := r.conn.Close()
	r.pending.Wait()
	r.mu.Lock()
	for _, c := range r.up {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return err
}

// Sink is a UDP socket on 127.0.0.1 that reads and never answers.
type Sink struct {
	conn *net.UDPConn
	done chan struct{}
}

// NewSink opens a sink.
func NewSink() (*Sink, error) {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, err
	}
	s := &Sink{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 2048)
		for {
			if _, _, err := conn.ReadFromUDP(buf); err != nil {
				return
			}
		}
	}()
	return s, nil
}

// Addr is the sink's address.
func (s *Sink) Addr() string { return s.conn.LocalAddr().String() }

// Close closes the sink.
func (s *Sink) Close() error {
	err := s.conn.Close()
	<-s.done
	return err
}
