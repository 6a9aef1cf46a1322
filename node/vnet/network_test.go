package vnet

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// echo serves testProto on h: it writes back what it reads until EOF.
func echo(h *Host) {
	h.SetStreamHandler(testProto, func(s network.Stream) {
		defer s.Close()
		_, _ = io.Copy(s, s)
	})
}

// roundTrip writes msg on a new stream from a to b and reads the echo.
func roundTrip(a, b *Host, msg string) error {
	s, err := a.NewStream(context.Background(), b.ID(), testProto)
	if err != nil {
		return err
	}
	defer s.Close()
	if _, err := s.Write([]byte(msg)); err != nil {
		return err
	}
	_ = s.CloseWrite()
	got, err := io.ReadAll(s)
	if err != nil {
		return err
	}
	if string(got) != msg {
		return errors.New("echo " + string(got) + ", sent " + msg)
	}
	return nil
}

// TestLatencyIsExactInVirtualTime: in a synctest bubble a round trip takes
// exactly twice the link's one-way latency, the default or the one set for
// the pair.
func TestLatencyIsExactInVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, nw := twoHosts(t, 10*time.Millisecond)
		echo(b)
		start := time.Now()
		if err := roundTrip(a, b, "ping"); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 20*time.Millisecond {
			t.Errorf("round trip at the default latency took %s, want 20ms", got)
		}
		nw.SetLatency(a.ID(), b.ID(), 75*time.Millisecond)
		start = time.Now()
		if err := roundTrip(a, b, "ping"); err != nil {
			t.Fatal(err)
		}
		if got := time.Since(start); got != 150*time.Millisecond {
			t.Errorf("round trip at a set latency took %s, want 150ms", got)
		}
		if out, in := a.Bytes(); out != 8 || in != 8 {
			t.Errorf("a counted %d bytes out, %d in; want 8 and 8", out, in)
		}
	})
}

// TestCutAndHeal: a cut link ends the streams on it and refuses new ones
// until it is healed; a partition cuts every link across it.
func TestCutAndHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b, nw := twoHosts(t, time.Millisecond)
		echo(b)
		if err := roundTrip(a, b, "before"); err != nil {
			t.Fatal(err)
		}
		s, err := a.NewStream(context.Background(), b.ID(), testProto)
		if err != nil {
			t.Fatal(err)
		}
		nw.Partition([]peer.ID{a.ID()}, []peer.ID{b.ID()})
		synctest.Wait()
		if _, err := s.Read(make([]byte, 1)); !errors.Is(err, network.ErrReset) {
			t.Errorf("read on a stream across the cut: %v", err)
		}
		if nw.Connected(a.ID(), b.ID()) {
			t.Error("still connected across the cut")
		}
		if err := roundTrip(a, b, "during"); !errors.Is(err, ErrCut) {
			t.Errorf("stream across the cut: %v", err)
		}
		nw.HealAll()
		if err := roundTrip(a, b, "after"); err != nil {
			t.Errorf("stream after the heal: %v", err)
		}
	})
}

// TestCrashAndRestart: a crashed host's streams end at once, nobody can
// dial it, and a host with the same identity added again is reachable.
func TestCrashAndRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := New(time.Millisecond)
		defer nw.Close()
		keys := make([]crypto.PrivKey, 2)
		hosts := make([]*Host, 2)
		for i := range keys {
			var err error
			if keys[i], _, err = crypto.GenerateEd25519Key(rand.Reader); err != nil {
				t.Fatal(err)
			}
			if hosts[i], err = nw.AddHost(keys[i], Addr(i+1), HostOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		a, b := hosts[0], hosts[1]
		defer a.Close()
		echo(b)
		s, err := a.NewStream(context.Background(), b.ID(), testProto)
		if err != nil {
			t.Fatal(err)
		}
		nw.Crash(b.ID())
		synctest.Wait()
		if _, err := s.Read(make([]byte, 1)); !errors.Is(err, network.ErrReset) {
			t.Errorf("read from a crashed host: %v", err)
		}
		if err := roundTrip(a, b, "x"); !errors.Is(err, ErrDown) {
			t.Errorf("stream to a crashed host: %v", err)
		}
		if b.OpenStreams() != 0 {
			t.Errorf("crashed host still holds %d streams", b.OpenStreams())
		}
		_ = b.Close()

		b2, err := nw.AddHost(keys[1], Addr(2), HostOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer b2.Close()
		if b2.ID() != b.ID() {
			t.Fatalf("restarted as %s, was %s", b2.ID(), b.ID())
		}
		echo(b2)
		if err := roundTrip(a, b2, "again"); err != nil {
			t.Errorf("stream to the restarted host: %v", err)
		}
	})
}
