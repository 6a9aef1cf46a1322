package crimp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

func TestStateTransfer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	state := bytes.Repeat([]byte("world state "), 10000)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- ServeState(ctx, ln, StateServerConfig{Snapshot: func(_ context.Context, member MemberID, w io.Writer) error {
			if member == 99 {
				return errors.New("no state for you")
			}
			_, err := w.Write(state)
			return err
		}})
	}()
	var got []byte
	err = FetchState(context.Background(), ln.Addr().String(), 7, func(r io.Reader) error {
		var err error
		got, err = io.ReadAll(r)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, state) {
		t.Fatalf("got %d bytes, want %d", len(got), len(state))
	}
	err = FetchState(context.Background(), ln.Addr().String(), 99, func(io.Reader) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "no state for you") {
		t.Fatalf("authority error not reported: %v", err)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("ServeState: %v", err)
	}
}

func TestListenUDPValidates(t *testing.T) {
	for _, cfg := range []UDPConfig{
		{Interface: "lo"},
		{Group: mustAddrPort("127.0.0.1:7000"), Interface: "lo"},
		{Group: mustAddrPort("239.1.2.3:7000")},
		{Group: mustAddrPort("239.1.2.3:7000"), Interface: "no-such-if0"},
		{Group: mustAddrPort("239.1.2.3:7000"), Interface: "lo", ReceiveLoss: 1},
	} {
		if tr, err := ListenUDP(cfg); err == nil {
			tr.Close()
			t.Errorf("ListenUDP(%+v) accepted", cfg)
		}
	}
}
