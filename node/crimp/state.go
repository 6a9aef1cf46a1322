package crimp

import (
	"bytes"
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
//	server: "CRST" | version u8 | status u8 | length u64 | state
//
// status 0 is success; otherwise the body is a UTF-8 error message.

const stateMagic = "CRST"

// MaxStateSize bounds a transferred state.
const MaxStateSize = 64 << 20

// SnapshotFunc writes the current game state for member to w.
type SnapshotFunc func(ctx context.Context, member MemberID, w io.Writer) error

// ServeState accepts state-transfer connections on ln until ctx is done,
// answering each with a fresh snapshot. It closes ln and waits for the
// connections it started before returning.
func ServeState(ctx context.Context, ln net.Listener, snapshot SnapshotFunc, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
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
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := serveStateConn(ctx, conn, snapshot); err != nil {
				log.Warn("crimp: state transfer failed", "peer", conn.RemoteAddr(), "err", err)
			}
		}()
	}
}

func serveStateConn(ctx context.Context, conn net.Conn, snapshot SnapshotFunc) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	hello := make([]byte, len(stateMagic)+1+4)
	if _, err := io.ReadFull(conn, hello); err != nil {
		return fmt.Errorf("read request: %w", err)
	}
	if string(hello[:4]) != stateMagic || hello[4] != Version {
		return fmt.Errorf("bad request header %q", hello[:5])
	}
	member := MemberID(binary.BigEndian.Uint32(hello[5:]))
	var body bytes.Buffer
	status := byte(0)
	if err := snapshot(ctx, member, &limitedWriter{w: &body, left: MaxStateSize}); err != nil {
		status = 1
		body.Reset()
		body.WriteString(err.Error())
	}
	head := append([]byte(stateMagic), Version, status)
	head = binary.BigEndian.AppendUint64(head, uint64(body.Len()))
	if _, err := conn.Write(append(head, body.Bytes()...)); err != nil {
		return fmt.Errorf("write state for member %d: %w", member, err)
	}
	return nil
}

// FetchState asks the authority at addr for the game state and hands it to
// restore, which reads at most MaxStateSize bytes.
func FetchState(ctx context.Context, addr string, member MemberID, restore func(r io.Reader) error) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("fetch state from %s: %w", addr, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	req := append([]byte(stateMagic), Version)
	req = binary.BigEndian.AppendUint32(req, uint32(member))
	if _, err := conn.Write(req); err != nil {
		return fmt.Errorf("fetch state from %s: %w", addr, err)
	}
	head := make([]byte, len(stateMagic)+2+8)
	if _, err := io.ReadFull(conn, head); err != nil {
		return fmt.Errorf("fetch state from %s: read header: %w", addr, err)
	}
	if string(head[:4]) != stateMagic || head[4] != Version {
		return fmt.Errorf("fetch state from %s: bad header %q", addr, head[:5])
	}
	size := binary.BigEndian.Uint64(head[6:])
	if size > MaxStateSize {
		return fmt.Errorf("fetch state from %s: %d bytes over the %d limit", addr, size, MaxStateSize)
	}
	body := io.LimitReader(conn, int64(size))
	if head[5] != 0 {
		msg, _ := io.ReadAll(body)
		return fmt.Errorf("fetch state from %s: authority failed: %s", addr, msg)
	}
	counted := &countingReader{r: body}
	if err := restore(counted); err != nil {
		return fmt.Errorf("fetch state from %s: restore: %w", addr, err)
	}
	if _, err := io.Copy(io.Discard, counted); err != nil {
		return fmt.Errorf("fetch state from %s: %w", addr, err)
	}
	if counted.n != int64(size) {
		return fmt.Errorf("fetch state from %s: got %d of %d bytes", addr, counted.n, size)
	}
	return nil
}

var errStateTooLarge = errors.New("state over MaxStateSize")

type limitedWriter struct {
	w    io.Writer
	left int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		return 0, errStateTooLarge
	}
	l.left -= int64(len(p))
	return l.w.Write(p)
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
