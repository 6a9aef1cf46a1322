package sim

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
)

// twoHosts builds two latencyHosts on one in-memory network, not linked
// yet, with a one-way latency of d.
func twoHosts(t *testing.T, d time.Duration) (*latencyHost, *latencyHost, *linker) {
	t.Helper()
	mn := mocknet.New()
	links := newLinker(mn)
	var hs []*latencyHost
	for i := range 2 {
		key, err := keyFor(99, i)
		if err != nil {
			t.Fatal(err)
		}
		h, err := mn.AddPeer(key, mockAddr(i+1))
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, newLatencyHost(h, func(peer.ID) time.Duration { return d }, links))
	}
	t.Cleanup(func() {
		for _, h := range hs {
			_ = h.Close()
		}
		_ = mn.Close()
	})
	return hs[0], hs[1], links
}

const testProto = protocol.ID("/overworld/sim-test/1.0.0")

// TestMemStreamDeliversAfterTheLatency: a stream opened through the
// simulator's host links the peers on first contact, picks the protocol
// the other side serves, carries writes in order no earlier than the
// link's latency after they were written, and ends with EOF after the
// data when the writer closes; the answer comes back the same way.
func TestMemStreamDeliversAfterTheLatency(t *testing.T) {
	const latency = 30 * time.Millisecond
	a, b, _ := twoHosts(t, latency)
	type arrival struct {
		data []byte
		at   time.Time
	}
	got := make(chan arrival, 16)
	b.SetStreamHandler(testProto, func(s network.Stream) {
		defer s.Close()
		buf := make([]byte, 64)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				got <- arrival{append([]byte(nil), buf[:n]...), time.Now()}
			}
			if err != nil {
				close(got)
				if err == io.EOF {
					_, _ = s.Write([]byte("bye"))
				}
				return
			}
		}
	})
	s, err := a.NewStream(context.Background(), b.ID(), "/not/served/1.0.0", testProto)
	if err != nil {
		t.Fatal(err)
	}
	if s.Protocol() != testProto || s.Conn().RemotePeer() != b.ID() {
		t.Fatalf("stream protocol %s to %s", s.Protocol(), s.Conn().RemotePeer())
	}
	sent := map[string]time.Time{}
	for _, m := range []string{"one", "two", "three"} {
		sent[m] = time.Now()
		if _, err := s.Write([]byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	var all []byte
	for a := range got {
		all = append(all, a.data...)
		for m, at := range sent {
			if bytes.Contains(a.data, []byte(m)) && a.at.Sub(at) < latency {
				t.Errorf("%q arrived %s after it was written, before the latency %s", m, a.at.Sub(at), latency)
			}
		}
	}
	if string(all) != "onetwothree" {
		t.Fatalf("received %q", all)
	}
	reply, err := io.ReadAll(s)
	if err != nil || string(reply) != "bye" {
		t.Fatalf("reply %q, %v", reply, err)
	}
	_ = s.Close()
	if _, err := a.NewStream(context.Background(), b.ID(), "/not/served/1.0.0"); !errors.Is(err, errNoProtocol) {
		t.Errorf("stream for a protocol nobody serves: %v", err)
	}
}

// TestMemStreamResetAndDisconnect: a reset ends both ends at once, and a
// connection that closes (as a crash closes them) resets its streams on
// both sides; a peer cut off by the linker cannot be dialled again.
func TestMemStreamResetAndDisconnect(t *testing.T) {
	a, b, links := twoHosts(t, 10*time.Millisecond)
	inbound := make(chan network.Stream, 4)
	b.SetStreamHandler(testProto, func(s network.Stream) { inbound <- s })
	open := func() (network.Stream, network.Stream) {
		s, err := a.NewStream(context.Background(), b.ID(), testProto)
		if err != nil {
			t.Fatal(err)
		}
		return s, <-inbound
	}
	mine, theirs := open()
	_ = theirs.Reset()
	if _, err := mine.Read(make([]byte, 1)); !errors.Is(err, network.ErrReset) {
		t.Errorf("read after the other end reset: %v", err)
	}
	if _, err := mine.Write([]byte("x")); !errors.Is(err, network.ErrReset) {
		t.Errorf("write after the other end reset: %v", err)
	}

	mine, theirs = open()
	links.cut(b.ID())
	for _, c := range b.Network().Conns() {
		_ = c.Close()
	}
	for _, s := range []network.Stream{mine, theirs} {
		if _, err := s.Read(make([]byte, 1)); !errors.Is(err, network.ErrReset) {
			t.Errorf("read after the connection closed: %v", err)
		}
	}
	// Gone by the linker, or, while the host still counts the closing
	// connection, without one.
	if _, err := a.NewStream(context.Background(), b.ID(), testProto); !errors.Is(err, errGone) && !errors.Is(err, network.ErrNoConn) {
		t.Errorf("stream to a peer that is gone: %v", err)
	}
	if a.openStreams() != 0 || b.openStreams() != 0 {
		t.Errorf("streams still tracked: %d and %d", a.openStreams(), b.openStreams())
	}
}
