package crimp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/await"
)

// startStateServer runs ServeState on 127.0.0.1 until the test ends.
func startStateServer(t *testing.T, cfg StateServerConfig) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- ServeState(ctx, ln, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("ServeState: %v", err)
		}
	})
	return ln.Addr().String()
}

// fetchUntil fetches the state, retrying while the server says it is busy,
// until the deadline.
func fetchUntil(t *testing.T, addr string, member MemberID, limit time.Duration) []byte {
	t.Helper()
	var got []byte
	var last error
	if err := await.UntilErr(limit, "the honest joiner to get the state", func() bool {
		last = FetchState(context.Background(), addr, member, func(r io.Reader) error {
			var err error
			got, err = io.ReadAll(r)
			return err
		})
		return last == nil
	}); err != nil {
		t.Fatalf("%v; last attempt: %v", err, last)
	}
	return got
}

// Idle connections that never send a request cannot keep a joiner out:
// connections beyond MaxConns are told busy at once and counted, and the
// idle ones lose their slot after RequestTimeout.
func TestAdversarialStateServerConnections(t *testing.T) {
	state := bytes.Repeat([]byte("state "), 1000)
	m := &Metrics{}
	// The server accepts the connections one after the other: the ones
	// over the limit are refused only if it reaches them before the first
	// idle slot times out, so the timeout leaves room for an accept loop
	// starved on a loaded machine. (At 300 ms a stall of that long let
	// later attackers into freed slots instead of being refused.)
	addr := startStateServer(t, StateServerConfig{
		Snapshot: func(_ context.Context, _ MemberID, w io.Writer) error {
			_, err := w.Write(state)
			return err
		},
		MaxConns: 3, RequestTimeout: 3 * time.Second, Metrics: m, Logger: slog.New(slog.DiscardHandler),
	})
	const attackers = 20
	var conns []net.Conn
	for range attackers {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	// The attacker's connections beyond the three slots are refused at once.
	if err := await.UntilErr(10*time.Second, "the connections over the limit to be refused", func() bool {
		return m.Refused(RefusedStateConns) >= attackers-3
	}); err != nil {
		t.Fatalf("%v: refused %d, want %d", err, m.Refused(RefusedStateConns), attackers-3)
	}
	if got := fetchUntil(t, addr, 5, 10*time.Second); !bytes.Equal(got, state) {
		t.Fatalf("joiner got %d bytes, want %d", len(got), len(state))
	}
	// The joiner got in once the first idle slot was freed; the other two
	// idle connections lose theirs at about the same time.
	if err := await.UntilErr(10*time.Second, "the idle connections to be dropped", func() bool {
		return m.Refused(RefusedStateRequest) >= 3
	}); err != nil {
		t.Fatalf("%v: idle connections dropped for a late request: %d, want 3", err, m.Refused(RefusedStateRequest))
	}
}

// Many joiners asking at once cannot make the authority hold more than
// MaxBuffered bytes of snapshots: the ones over the budget are told busy
// (and counted), and an honest joiner gets the whole state afterwards.
func TestAdversarialStateServerMemory(t *testing.T) {
	const size = 1 << 20
	state := bytes.Repeat([]byte{0xab}, size)
	m := &Metrics{}
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	defer open()
	var holding atomic.Int64 // snapshots taken and held in memory
	addr := startStateServer(t, StateServerConfig{
		Snapshot: func(ctx context.Context, member MemberID, w io.Writer) error {
			if _, err := w.Write(state); err != nil {
				return err
			}
			if member != 1000 { // the attackers' snapshots stay in memory until the gate opens
				holding.Add(1)
				select {
				case <-gate:
				case <-ctx.Done():
				}
			}
			return nil
		},
		MaxConns: 16, MaxBuffered: 3 * size, Metrics: m,
	})
	const attackers = 10
	errs := make(chan error, attackers)
	for i := range attackers {
		go func() {
			errs <- FetchState(context.Background(), addr, MemberID(i+1), func(r io.Reader) error {
				_, err := io.Copy(io.Discard, r)
				return err
			})
		}()
	}
	// Every request either holds its snapshot or was refused for memory.
	if err := await.UntilErr(20*time.Second, "every request to hold a snapshot or be refused", func() bool {
		return holding.Load()+int64(m.Refused(RefusedStateMemory)) >= attackers
	}); err != nil {
		t.Fatalf("%v: %d snapshots held, %d refused", err, holding.Load(), m.Refused(RefusedStateMemory))
	}
	if h := holding.Load(); h < 1 || h > 3 {
		t.Fatalf("%d snapshots of %d bytes held at once, budget %d", h, size, 3*size)
	}
	if peak := m.StateBufferedPeak.Load(); peak > 3*size {
		t.Fatalf("state server held %d bytes at once, budget %d", peak, 3*size)
	}
	open()
	busy := 0
	for range attackers {
		switch err := <-errs; {
		case errors.Is(err, ErrStateBusy):
			busy++
		case err != nil:
			t.Fatalf("attacker's request: %v", err)
		}
	}
	if got := m.Refused(RefusedStateMemory); got != uint64(busy) || busy < attackers-3 {
		t.Fatalf("%d requests told busy, %d memory refusals counted; want the same, at least %d", busy, got, attackers-3)
	}
	if got := fetchUntil(t, addr, 1000, 10*time.Second); !bytes.Equal(got, state) {
		t.Fatalf("joiner got %d bytes, want %d", len(got), len(state))
	}
	// The server lets go of a snapshot's charge after its last write, which
	// the joiner may have read before the server's goroutine gets there.
	if err := await.UntilErr(10*time.Second, "the snapshots' charge to be let go", func() bool {
		return m.StateBuffered.Load() == 0
	}); err != nil {
		t.Fatalf("%v: %d bytes still charged after every transfer ended", err, m.StateBuffered.Load())
	}
}

// fakeConn is one side of a state exchange: reads come from the canned
// answer, writes are kept.
type fakeConn struct {
	io.Reader
	wrote bytes.Buffer
}

func (f *fakeConn) Write(p []byte) (int, error) { return f.wrote.Write(p) }

// FuzzFetchState plays arbitrary answers to the client: it never panics,
// never reads past the announced size, hands restore at most MaxStateSize
// bytes, and succeeds only on a well-formed complete answer.
func FuzzFetchState(f *testing.F) {
	answer := func(status byte, body []byte) []byte {
		var b []byte
		for _, part := range stateAnswer(status, body) {
			b = append(b, part...)
		}
		return b
	}
	f.Add(answer(stateOK, []byte("world")))
	f.Add(answer(stateFail, []byte("no state")))
	f.Add(answer(stateBusy, nil))
	f.Add(answer(stateOK, nil)[:10])
	huge := answer(stateOK, nil)
	binary.BigEndian.PutUint64(huge[6:], 1<<62)
	f.Add(huge)
	f.Fuzz(func(t *testing.T, in []byte) {
		conn := &fakeConn{Reader: bytes.NewReader(in)}
		var got int64
		err := exchangeState(conn, 7, func(r io.Reader) error {
			n, err := io.Copy(io.Discard, r)
			got = n
			return err
		})
		if got > MaxStateSize {
			t.Fatalf("restore read %d bytes", got)
		}
		if !bytes.HasPrefix(conn.wrote.Bytes(), []byte(stateMagic)) {
			t.Fatalf("request %x", conn.wrote.Bytes())
		}
		if err == nil {
			if len(in) < stateHeaderSize || in[5] != stateOK {
				t.Fatalf("accepted a short or failed answer %x", in)
			}
			if size := binary.BigEndian.Uint64(in[6:]); size != uint64(got) || uint64(len(in)) < uint64(stateHeaderSize)+size {
				t.Fatalf("accepted %d bytes of an answer announcing %d (input %d bytes)", got, size, len(in))
			}
		}
	})
}
