package crimp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// UDPConfig sets up a UDP IP multicast endpoint.
type UDPConfig struct {
	// Group is the multicast group and port, e.g. 239.77.0.1:7777.
	Group netip.AddrPort
	// Interface is the network interface to join the group on and send
	// from (e.g. "eth0"). Required: picking one silently is how multicast
	// ends up on the wrong network.
	Interface string
	// Loopback delivers our own packets to other sockets on this host
	// (several members on one machine need it). CRIMP ignores its own.
	Loopback bool
	// TTL is the multicast TTL; 0 means 1 (the local network).
	TTL int
	// ReceiveLoss drops each received datagram with this probability,
	// drawn from LossSeed: a test hook to simulate a lossy network.
	ReceiveLoss float64
	LossSeed    int64
	Logger      *slog.Logger
}

// UDPTransport is a Transport on a UDP IP multicast group. The socket is
// bound to the group address itself, with IP_MULTICAST_ALL off, so it only
// ever receives this group's datagrams, whatever other groups the host has
// joined.
type UDPTransport struct {
	cfg   UDPConfig
	conn  net.PacketConn
	pc    *ipv4.PacketConn
	group *net.UDPAddr
	ifi   *net.Interface
	log   *slog.Logger

	mu      sync.Mutex
	started bool
	done    chan struct{}
	rng     *rand.Rand
}

var _ Transport = (*UDPTransport)(nil)

// ListenUDP opens the multicast socket and joins the group on the named
// interface.
func ListenUDP(cfg UDPConfig) (*UDPTransport, error) {
	if !cfg.Group.Addr().Is4() || !cfg.Group.Addr().IsMulticast() {
		return nil, fmt.Errorf("crimp udp: group %v is not an IPv4 multicast address", cfg.Group)
	}
	if cfg.Interface == "" {
		return nil, errors.New("crimp udp: an interface name is required")
	}
	if cfg.ReceiveLoss < 0 || cfg.ReceiveLoss >= 1 {
		return nil, fmt.Errorf("crimp udp: receive loss %g outside [0, 1)", cfg.ReceiveLoss)
	}
	if cfg.TTL == 0 {
		cfg.TTL = 1
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ifi, err := net.InterfaceByName(cfg.Interface)
	if err != nil {
		return nil, fmt.Errorf("crimp udp: interface %q: %w", cfg.Interface, err)
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			// Several members on one host share the group's port.
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1); serr != nil {
				return
			}
			// Only the groups joined on this socket, not the host's others.
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := lc.ListenPacket(context.Background(), "udp4", cfg.Group.String())
	if err != nil {
		return nil, fmt.Errorf("crimp udp: bind %v: %w", cfg.Group, err)
	}
	t := &UDPTransport{
		cfg:   cfg,
		conn:  conn,
		pc:    ipv4.NewPacketConn(conn),
		group: net.UDPAddrFromAddrPort(cfg.Group),
		ifi:   ifi,
		log:   cfg.Logger,
		done:  make(chan struct{}),
		rng:   rand.New(rand.NewSource(cfg.LossSeed)),
	}
	setup := []struct {
		what string
		do   func() error
	}{
		{"join group", func() error { return t.pc.JoinGroup(ifi, &net.UDPAddr{IP: t.group.IP}) }},
		{"set multicast interface", func() error { return t.pc.SetMulticastInterface(ifi) }},
		{"set multicast loopback", func() error { return t.pc.SetMulticastLoopback(cfg.Loopback) }},
		{"set multicast TTL", func() error { return t.pc.SetMulticastTTL(cfg.TTL) }},
	}
	for _, s := range setup {
		if err := s.do(); err != nil {
			conn.Close()
			return nil, fmt.Errorf("crimp udp: %s on %s: %w", s.what, cfg.Interface, err)
		}
	}
	return t, nil
}

// Start runs the receive loop, handing each datagram to h, until Close.
func (t *UDPTransport) Start(h func(b []byte, from netip.AddrPort)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.started {
		return errors.New("crimp udp: already started")
	}
	t.started = true
	go t.readLoop(h)
	return nil
}

func (t *UDPTransport) readLoop(h func([]byte, netip.AddrPort)) {
	defer close(t.done)
	buf := make([]byte, MaxPacketSize+1) // one spare byte reveals oversized datagrams
	for {
		n, _, src, err := t.pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			t.log.Warn("crimp udp: read failed", "err", err)
			continue
		}
		if t.cfg.ReceiveLoss > 0 && t.rng.Float64() < t.cfg.ReceiveLoss {
			continue
		}
		var from netip.AddrPort
		if ua, ok := src.(*net.UDPAddr); ok {
			from = ua.AddrPort()
		}
		h(buf[:n], from)
	}
}

// Send multicasts b to the group.
func (t *UDPTransport) Send(b []byte) error {
	if _, err := t.pc.WriteTo(b, nil, t.group); err != nil {
		return fmt.Errorf("crimp udp: send to %v: %w", t.group, err)
	}
	return nil
}

// LocalAddr is the socket's bound address (the group and port).
func (t *UDPTransport) LocalAddr() netip.AddrPort {
	if ua, ok := t.conn.LocalAddr().(*net.UDPAddr); ok {
		return ua.AddrPort()
	}
	return netip.AddrPort{}
}

// Close leaves the group, closes the socket and waits for the receive loop.
func (t *UDPTransport) Close() error {
	_ = t.pc.LeaveGroup(t.ifi, &net.UDPAddr{IP: t.group.IP})
	err := t.conn.Close()
	t.mu.Lock()
	started := t.started
	t.mu.Unlock()
	if started {
		<-t.done
	}
	return err
}
