package crimp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// State transfer (paper, ch. 4.4.2 step 3-4): once established, a joining
// mirror fetches the game state from the authority over TCP, while it keeps
// capturing the group's packets. The exchange is:
//
//	client: "CRST" | version u8 | member u32
//	server: "CRST" | version u8 | status u8 | length u64 | body
//
// status 0 is success and the body the state; status 1 means the snapshot
// failed and status 2 that the server is busy (retry later); their body is a
// UTF-8 message of at most maxStateMessage bytes.
//
// The server takes each snapshot into memory before sending it, so that a
// slow joiner never holds the game's state while it reads. What that costs is
// bounded: at most MaxConns connections at once (more are told busy and
// closed), at most MaxBuffered bytes of snapshots across all of them (a
// snapshot that would go over is abandoned and its joiner told busy), and a
// request that does not arrive within RequestTimeout frees its slot.

const stateMagic = "CRST"

// MaxStateSize bounds a transferred state.
const MaxStateSize = 64 << 20

// Status codes of the state-transfer answer.
const (
	stateOK   = 0
	stateFail = 1
	stateBusy = 2
)

// maxStateMessage bounds the message of a failed or busy answer, which the
// client reads into memory.
const maxStateMessage = 1024

const (
	stateRequestSize = len(stateMagic) + 1 + 4
	stateHeaderSize  = len(stateMagic) + 2 + 8
)

// ErrStateBusy is wrapped by FetchState's error when the authority is
// serving as many joiners as it allows: try again shortly.
var ErrStateBusy = errors.New("crimp: state server busy")

// SnapshotFunc writes the current game state for member to w.
type SnapshotFunc func(ctx context.Context, member MemberID, w io.Writer) error

// StateServerConfig configures ServeState. Zero fields take the defaults.
type StateServerConfig struct {
	// Snapshot writes the state a joiner gets. Required.
	Snapshot SnapshotFunc
	// MaxConns is how many connections are served at once (default 4).
	MaxConns int
	// MaxBuffered bounds the snapshot bytes held in memory across every
	// connection (default MaxStateSize: one full-size state at a time, or
	// several small ones).
	MaxBuffered int64
	// RequestTimeout is how long a connection may take to send its request
	// (default 5 s); TransferTimeout bounds the whole answer (default 1 min).
	RequestTimeout, TransferTimeout time.Duration
	// Metrics counts refusals (connections over MaxConns, snapshots over
	// MaxBuffered, bad or late requests); usually the authority member's.
	// Nil keeps them private.
	Metrics *Metrics
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

func (c StateServerConfig) withDefaults() StateServerConfig {
	if c.MaxConns == 0 {
		c.MaxConns = 4
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = MaxStateSize
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = 5 * time.Second
	}
	if c.TransferTimeout == 0 {
		c.TransferTimeout = time.Minute
	}
	if c.Metrics == nil {
		c.Metrics = &Metrics{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate reports what is wrong with c (after defaults).
func (c StateServerConfig) Validate() error {
	var errs []error
	if c.Snapshot == nil {
		errs = append(errs, errors.New("no Snapshot function"))
	}
	if c.MaxConns < 1 || c.MaxConns > 1024 {
		errs = append(errs, fmt.Errorf("MaxConns %d outside [1, 1024]", c.MaxConns))
	}
	if c.MaxBuffered < 1 {
		errs = append(errs, fmt.Errorf("MaxBuffered %d below 1", c.MaxBuffered))
	}
	if c.RequestTimeout <= 0 || c.TransferTimeout <= 0 {
		errs = append(errs, fmt.Errorf("RequestTimeout %v and TransferTimeout %v must be positive", c.RequestTimeout, c.TransferTimeout))
	}
	return errors.Join(errs...)
}

// ServeState accepts state-transfer connections on ln until ctx is done,
// answering each with a fresh snapshot within the bounds of cfg. It closes
// ln and waits for the connections it started before returning.
func ServeState(ctx context.Context, ln net.Listener, cfg StateServerConfig) error {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		ln.Close()
		return fmt.Errorf("state server config: %w", err)
	}
	srv := &stateServer{cfg: cfg, slots: make(chan struct{}, cfg.MaxConns), budget: cfg.MaxBuffered}
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("state transfer accept: %w", err)
		}
		select {
		case srv.slots <- struct{}{}:
		default:
			cfg.Metrics.Refuse(RefusedStateConns)
			// A header fits any socket buffer: this write does not block.
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			answer := stateAnswer(stateBusy, []byte("too many state transfers at once"))
			_, _ = answer.WriteTo(conn)
			conn.Close()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-srv.slots }()
			if err := srv.serve(ctx, conn); err != nil {
				cfg.Logger.Warn("crimp: state transfer failed", "peer", conn.RemoteAddr(), "err", err)
			}
		}()
	}
}

// stateServer is ServeState's shared state: the connection slots and the
// buffered-bytes budget.
type stateServer struct {
	cfg   StateServerConfig
	slots chan struct{}

	mu       sync.Mutex
	budget   int64 // bytes still free for buffered snapshots
	buffered int64 // bytes buffered now
}

func (s *stateServer) reserve(n int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n > s.budget {
		return false
	}
	s.budget -= n
	s.buffered += n
	s.cfg.Metrics.StateBuffered.Store(s.buffered)
	if s.buffered > s.cfg.Metrics.StateBufferedPeak.Load() {
		s.cfg.Metrics.StateBufferedPeak.Store(s.buffered)
	}
	return true
}

func (s *stateServer) release(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.budget += n
	s.buffered -= n
	s.cfg.Metrics.StateBuffered.Store(s.buffered)
}

func (s *stateServer) serve(ctx context.Context, conn net.Conn) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	_ = conn.SetReadDeadline(time.Now().Add(s.cfg.RequestTimeout))
	hello := make([]byte, stateRequestSize)
	if _, err := io.ReadFull(conn, hello); err != nil {
		s.cfg.Metrics.Refuse(RefusedStateRequest)
		return fmt.Errorf("read request: %w", err)
	}
	if string(hello[:4]) != stateMagic || hello[4] != Version {
		s.cfg.Metrics.Refuse(RefusedStateRequest)
		return fmt.Errorf("bad request header %q", hello[:5])
	}
	member := MemberID(binary.BigEndian.Uint32(hello[5:]))
	_ = conn.SetDeadline(time.Now().Add(s.cfg.TransferTimeout))

	w := &budgetWriter{srv: s, left: MaxStateSize}
	defer func() { s.release(w.charged) }() // once the answer is out
	var answer net.Buffers
	switch err := s.cfg.Snapshot(ctx, member, w); {
	case errors.Is(err, errStateBudget):
		s.cfg.Metrics.Refuse(RefusedStateMemory)
		answer = stateAnswer(stateBusy, []byte("state server memory busy"))
	case err != nil:
		answer = stateAnswer(stateFail, []byte(err.Error()))
	default:
		answer = stateAnswer(stateOK, w.chunks...)
	}
	if _, err := answer.WriteTo(conn); err != nil {
		return fmt.Errorf("write state for member %d: %w", member, err)
	}
	return nil
}

// stateAnswer is a whole answer: header and body, the body not copied.
// Messages are cut to maxStateMessage.
func stateAnswer(status byte, body ...[]byte) net.Buffers {
	if status != stateOK && len(body) == 1 && len(body[0]) > maxStateMessage {
		body[0] = body[0][:maxStateMessage]
	}
	var size int
	for _, b := range body {
		size += len(b)
	}
	head := append([]byte(stateMagic), Version, status)
	head = binary.BigEndian.AppendUint64(head, uint64(size))
	return append(net.Buffers{head}, body...)
}

var (
	errStateTooLarge = errors.New("state over MaxStateSize")
	errStateBudget   = errors.New("state server's snapshot memory is in use")
)

// budgetWriter buffers one snapshot in chunks of stateChunk bytes,
// charging each chunk to the server's budget before allocating it, so that
// what is charged is what is allocated.
type budgetWriter struct {
	srv     *stateServer
	chunks  [][]byte
	left    int64 // of MaxStateSize
	charged int64
}

const stateChunk = 64 << 10

func (b *budgetWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > b.left {
		return 0, errStateTooLarge
	}
	written := 0
	for len(p) > 0 {
		last := len(b.chunks) - 1
		if last < 0 || len(b.chunks[last]) == cap(b.chunks[last]) {
			size := min(int64(stateChunk), b.left) // never past MaxStateSize
			if !b.srv.reserve(size) {
				return written, errStateBudget
			}
			b.charged += size
			b.chunks = append(b.chunks, make([]byte, 0, size))
			last++
		}
		c := b.chunks[last]
		n := min(cap(c)-len(c), len(p))
		b.chunks[last] = append(c, p[:n]...)
		p = p[n:]
		written += n
		b.left -= int64(n)
	}
	return written, nil
}

// FetchState asks the authority at addr for the game state and hands it to
// restore, which reads at most MaxStateSize bytes. An authority that is busy
// answers so: the error wraps ErrStateBusy.
func FetchState(ctx context.Context, addr string, member MemberID, restore func(r io.Reader) error) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("fetch state from %s: %w", addr, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if err := exchangeState(conn, member, restore); err != nil {
		return fmt.Errorf("fetch state from %s: %w", addr, err)
	}
	return nil
}

// exchangeState is the client's side of the exchange over rw: the request,
// then the answer, checked against the bounds before anything is read into
// memory.
func exchangeState(rw io.ReadWriter, member MemberID, restore func(r io.Reader) error) error {
	req := append([]byte(stateMagic), Version)
	req = binary.BigEndian.AppendUint32(req, uint32(member))
	if _, err := rw.Write(req); err != nil {
		return err
	}
	head := make([]byte, stateHeaderSize)
	if _, err := io.ReadFull(rw, head); err != nil {
		return fmt.Errorf("read header: %w", err)
	}
	if string(head[:4]) != stateMagic || head[4] != Version {
		return fmt.Errorf("bad header %q", head[:5])
	}
	status := head[5]
	size := binary.BigEndian.Uint64(head[6:])
	switch {
	case status > stateBusy:
		return fmt.Errorf("unknown status %d", status)
	case status != stateOK && size > maxStateMessage:
		return fmt.Errorf("status %d with a %d-byte message, limit %d", status, size, maxStateMessage)
	case size > MaxStateSize:
		return fmt.Errorf("%d bytes over the %d limit", size, MaxStateSize)
	}
	body := io.LimitReader(rw, int64(size))
	if status != stateOK {
		msg, err := io.ReadAll(body)
		if err != nil {
			return fmt.Errorf("read status %d message: %w", status, err)
		}
		if status == stateBusy {
			return fmt.Errorf("%w: %s", ErrStateBusy, msg)
		}
		return fmt.Errorf("authority failed: %s", msg)
	}
	counted := &countingReader{r: body}
	if err := restore(counted); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	if _, err := io.Copy(io.Discard, counted); err != nil {
		return err
	}
	if counted.n != int64(size) {
		return fmt.Errorf("got %d of %d bytes", counted.n, size)
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
