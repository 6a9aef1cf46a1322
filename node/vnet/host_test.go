package vnet

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"testing"
	"testing/synctest"
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

// TestMemStreamKeepsDeadlines: a read waiting past its deadline fails with
// os.ErrDeadlineExceeded exactly at the deadline, a later deadline set
// while a read waits moves the wait, data that arrives in time is read,
// and a writer blocked on a full link gives up at its write deadline.
func TestMemStreamKeepsDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const latency = 50 * time.Millisecond
		a, b, _ := twoHosts(t, latency)
		inbound := make(chan network.Stream, 1)
		b.SetStreamHandler(testProto, func(s network.Stream) { inbound <- s })
		s, err := a.NewStream(context.Background(), b.ID(), testProto)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		far := <-inbound

		// Nothing comes back: the read ends at its deadline.
		start := time.Now()
		_ = s.SetReadDeadline(start.Add(time.Second))
		if _, err := s.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read past the deadline: %v", err)
		}
		if waited := time.Since(start); waited != time.Second {
			t.Fatalf("read gave up after %v, want 1s", waited)
		}

		// A deadline moved while the read waits: the answer, sent 2 s in,
		// arrives before the new deadline of 3 s and is read.
		start = time.Now()
		_ = s.SetReadDeadline(start.Add(time.Second))
		go func() {
			time.Sleep(500 * time.Millisecond)
			_ = s.SetReadDeadline(start.Add(3 * time.Second))
			time.Sleep(1500 * time.Millisecond)
			_, _ = far.Write([]byte("late"))
		}()
		buf := make([]byte, 8)
		n, err := s.Read(buf)
		if err != nil || string(buf[:n]) != "late" {
			t.Fatalf("read %q, %v", buf[:n], err)
		}
		if waited := time.Since(start); waited != 2*time.Second+latency {
			t.Fatalf("answer read after %v, want 2s and the latency", waited)
		}

		// The zero time clears the deadline.
		_ = s.SetReadDeadline(time.Time{})
		go func() {
			time.Sleep(10 * time.Second)
			_, _ = far.Write([]byte("x"))
		}()
		if n, err := s.Read(buf); err != nil || n != 1 {
			t.Fatalf("read without a deadline: %d, %v", n, err)
		}

		// A writer whose reader has gone quiet: once the reader's window
		// and the link are full, the write waiting for room ends at the
		// write deadline.
		start = time.Now()
		_ = s.SetWriteDeadline(start.Add(time.Minute))
		chunk := make([]byte, 64<<10)
		var werr error
		for i := 0; werr == nil && i < maxUnread/len(chunk)+maxInFlight+2; i++ {
			_, werr = s.Write(chunk)
		}
		if !errors.Is(werr, os.ErrDeadlineExceeded) {
			t.Fatalf("write on a full link: %v", werr)
		}
		if waited := time.Since(start); waited != time.Minute {
			t.Fatalf("write gave up after %v, want 1m", waited)
		}
	})
}
