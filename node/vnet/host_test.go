package vnet

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// twoHosts builds two Hosts on one network, not linked yet, with a
// one-way latency of d.
func twoHosts(t *testing.T, d time.Duration) (*Host, *Host, *Network) {
	t.Helper()
	nw := New(d)
	var hs []*Host
	for i := range 2 {
		key, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		h, err := nw.AddHost(key, Addr(i+1), HostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	t.Cleanup(func() {
		for _, h := range hs {
			_ = h.Close()
		}
		_ = nw.Close()
	})
	return hs[0], hs[1], nw
}

const testProto = protocol.ID("/overworld/vnet-test/1.0.0")

// TestMemStreamDeliversAfterTheLatency: a stream opened through the
// network's host links the peers on first contact, picks the protocol
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
// both sides; a peer the network removed cannot be dialled again.
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
	links.Remove(b.ID())
	for _, c := range b.Network().Conns() {
		_ = c.Close()
	}
	for _, s := range []network.Stream{mine, theirs} {
		if _, err := s.Read(make([]byte, 1)); !errors.Is(err, network.ErrReset) {
			t.Errorf("read after the connection closed: %v", err)
		}
	}
	// Down by the network, or, while the host still counts the closing
	// connection, without one.
	if _, err := a.NewStream(context.Background(), b.ID(), testProto); !errors.Is(err, ErrDown) && !errors.Is(err, network.ErrNoConn) {
		t.Errorf("stream to a peer that is gone: %v", err)
	}
	if a.OpenStreams() != 0 || b.OpenStreams() != 0 {
		t.Errorf("streams still tracked: %d and %d", a.OpenStreams(), b.OpenStreams())
	}
}
