package mirror

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// linkQueue is how many frames may wait for a slow client before updates
// are dropped.
const linkQueue = 64

// Handler serves the mirror's clients and probes: the client WebSocket at
// /ws, /healthz (alive) and /readyz (503 while the mirror has no state, is
// resyncing, or another mirror's clock is off by more than MaxSkew).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", s.serveWebSocket)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.Ready() {
			reason, _ := s.m.notReady.Load().(string)
			http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// serveWebSocket runs one client connection: a reader feeding the
// session, a writer draining the link's queue.
func (s *Server) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	if s.ctx.Err() != nil {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	c.SetReadLimit(MaxClientFrame)
	link := &wsLink{ch: make(chan []byte, linkQueue), done: make(chan struct{})}
	conn := s.Attach(link)
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		link.writeLoop(c)
	}()
	// The reader stops when the client goes, when the writer's close
	// handshake ends (the server closed the session: its final frames go
	// out first), or at shutdown.
	for {
		typ, b, err := c.Read(s.ctx)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				s.m.refuse(refusedOversized)
			}
			break
		}
		if typ != websocket.MessageBinary {
			s.locked(func() {
				if sess := s.sessions[conn.id]; sess != nil {
					s.refuseFrame(sess, refusedTextFrame, "text frames are not part of the protocol")
				}
			})
			continue
		}
		conn.Receive(b)
	}
	conn.Closed()
	link.Close("")
	<-writeDone
}

// wsLink is a Link over a WebSocket: a bounded queue and a writer.
type wsLink struct {
	ch     chan []byte
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	reason string
}

func (l *wsLink) Send(frame []byte) bool {
	select {
	case <-l.done:
		return false
	default:
	}
	select {
	case l.ch <- frame:
		return true
	default:
		return false
	}
}

func (l *wsLink) Close(reason string) {
	l.once.Do(func() {
		l.mu.Lock()
		l.reason = reason
		l.mu.Unlock()
		close(l.done)
	})
}

// writeLoop writes queued frames until the link is closed, then the frames
// still queued (the final error), then the close frame.
func (l *wsLink) writeLoop(c *websocket.Conn) {
	write := func(b []byte) bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Write(ctx, websocket.MessageBinary, b) == nil
	}
	for {
		select {
		case b := <-l.ch:
			if !write(b) {
				l.Close("")
				c.CloseNow()
				return
			}
			continue
		case <-l.done:
		}
		break
	}
	for {
		select {
		case b := <-l.ch:
			if !write(b) {
				c.CloseNow()
				return
			}
			continue
		default:
		}
		break
	}
	l.mu.Lock()
	reason := l.reason
	l.mu.Unlock()
	code := websocket.StatusNormalClosure
	switch reason {
	case "":
	case refusedOversized:
		code = websocket.StatusMessageTooBig
	case "shutdown":
		code = websocket.StatusGoingAway
	default:
		code = websocket.StatusPolicyViolation
	}
	c.Close(code, reason)
}
