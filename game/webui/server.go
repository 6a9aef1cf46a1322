package webui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/game"
)

//go:embed static
var staticFiles embed.FS

// Options configures a Server.
type Options struct {
	// Logger receives connection-level logs; nil discards them.
	Logger *slog.Logger
	// ViewInterval is the gap between two views pushed to a page
	// (default 80 ms, 12.5 per second).
	ViewInterval time.Duration
	// AllowedHosts lists extra Host header values to accept besides the
	// loopback names (127.0.0.1, localhost, [::1], any port). The check
	// stops DNS-rebinding pages from driving the player.
	AllowedHosts []string
	// MaxBadMessages is how many invalid frames a page may send before the
	// connection is closed (default 16).
	MaxBadMessages int
	// Secret, if set, is demanded of every request: once in the page's
	// address (?k=SECRET, see PageURL), which sets a cookie that the page's
	// assets and WebSocket then carry. Serve on an address other hosts can
	// reach only with a secret (NeedsSecret): the Host check alone does
	// not stop a neighbour who sends "Host: 127.0.0.1" from driving the
	// player. With a secret the Host check is left out (the secret is the
	// stronger test, and a page served under another name still works).
	Secret string
	// Registerer receives overworld_webui_refusals_total; nil: a private
	// registry.
	Registerer prometheus.Registerer
}

// secretCookie carries Options.Secret once the page's address gave it.
const secretCookie = "overworld_page_key"

// minSecretLen bounds how short a secret may be (16 bytes of hex).
const minSecretLen = 32

// NewSecret returns a random secret for Options.Secret: 128 bits, hex.
func NewSecret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NeedsSecret reports whether a page listening on addr (host:port) can be
// reached from other hosts and so must be served with a Secret: any
// address but a loopback one (an empty host or 0.0.0.0 means every
// interface).
func NeedsSecret(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if host == "localhost" {
		return false
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip == nil || !ip.IsLoopback()
}

// PageURL is the address to open for a page served on listen with secret
// ("" for none).
func PageURL(listen net.Addr, secret string) string {
	u := "http://" + listen.String() + "/"
	if secret != "" {
		u += "?k=" + url.QueryEscape(secret)
	}
	return u
}

// Server serves the page and its WebSocket for one Session.
type Server struct {
	session Session
	opts    Options
	log     *slog.Logger
	mux     *http.ServeMux

	refusals *prometheus.CounterVec

	mu     sync.Mutex
	conns  sync.WaitGroup
	ctx    context.Context // cancelled by Close; every connection ends with it
	cancel context.CancelFunc
}

// NewServer returns a server for session.
func NewServer(session Session, opts Options) (*Server, error) {
	if session == nil {
		return nil, errors.New("webui: nil session")
	}
	if opts.ViewInterval == 0 {
		opts.ViewInterval = 80 * time.Millisecond
	}
	if opts.ViewInterval < 10*time.Millisecond {
		return nil, fmt.Errorf("webui: view interval %v below 10ms", opts.ViewInterval)
	}
	if opts.MaxBadMessages == 0 {
		opts.MaxBadMessages = 16
	}
	if opts.Secret != "" && len(opts.Secret) < minSecretLen {
		return nil, fmt.Errorf("webui: secret of %d characters: want at least %d (NewSecret makes one)", len(opts.Secret), minSecretLen)
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	static, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return nil, fmt.Errorf("webui: %w", err)
	}
	refusals := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "overworld_webui_refusals_total",
		Help: "Page requests refused, by reason: forbidden_host, no_secret, bad_secret.",
	}, []string{"reason"})
	if err := opts.Registerer.Register(refusals); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, fmt.Errorf("webui metrics: %w", err)
		}
		refusals = are.ExistingCollector.(*prometheus.CounterVec)
	}
	s := &Server{session: session, opts: opts, log: log, mux: http.NewServeMux(), refusals: refusals}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mux.Handle("GET /", http.FileServerFS(static))
	s.mux.HandleFunc("GET /ws", s.serveWebSocket)
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	return s, nil
}

// Handler returns the HTTP handler: the page at /, the WebSocket at /ws.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.opts.Secret != "" {
			if reason := s.checkSecret(w, r); reason != "" {
				s.refusals.WithLabelValues(reason).Inc()
				s.log.Warn("page request without the page's secret", "remote", r.RemoteAddr, "reason", reason)
				http.Error(w, "open the address the player printed at start (with its ?k=…)", http.StatusUnauthorized)
				return
			}
		} else if !s.hostAllowed(r.Host) {
			s.refusals.WithLabelValues("forbidden_host").Inc()
			http.Error(w, "forbidden host", http.StatusForbidden)
			return
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-cache")
		s.mux.ServeHTTP(w, r)
	})
}

// checkSecret is "" if r carries the secret, in its query (then a cookie
// is set for the page's assets and WebSocket) or in the cookie; else why
// not.
func (s *Server) checkSecret(w http.ResponseWriter, r *http.Request) string {
	want := []byte(s.opts.Secret)
	if k := r.URL.Query().Get("k"); k != "" {
		if subtle.ConstantTimeCompare([]byte(k), want) != 1 {
			return "bad_secret"
		}
		http.SetCookie(w, &http.Cookie{Name: secretCookie, Value: s.opts.Secret, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
		return ""
	}
	c, err := r.Cookie(secretCookie)
	if err != nil {
		return "no_secret"
	}
	if subtle.ConstantTimeCompare([]byte(c.Value), want) != 1 {
		return "bad_secret"
	}
	return ""
}

func (s *Server) hostAllowed(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.Trim(name, "[]")
	if name == "localhost" {
		return true
	}
	if ip := net.ParseIP(name); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, a := range s.opts.AllowedHosts {
		if strings.EqualFold(a, host) || strings.EqualFold(a, name) {
			return true
		}
	}
	return false
}

// Serve serves HTTP on ln until ctx is cancelled, then closes every page
// connection and returns once they are gone.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return s.ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err := <-errc:
		s.Close()
		return fmt.Errorf("webui: serve: %w", err)
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdownCtx)
	s.Close()
	<-errc
	return err
}

// Close ends every page connection and waits for their goroutines.
func (s *Server) Close() {
	s.cancel()
	s.conns.Wait()
}

func (s *Server) serveWebSocket(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.ctx.Err() != nil {
		s.mu.Unlock()
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	s.conns.Add(1)
	s.mu.Unlock()
	defer s.conns.Done()

	c, err := websocket.Accept(w, r, nil) // same-origin only
	if err != nil {
		s.log.Debug("websocket accept failed", "remote", r.RemoteAddr, "err", err)
		return
	}
	c.SetReadLimit(MaxClientMessageBytes)
	s.log.Info("page connected", "remote", r.RemoteAddr)

	// The reader has its own context: cancelling a read context makes the
	// library drop the connection at once, and on shutdown we first want
	// to send a proper close frame.
	readCtx, cancelRead := context.WithCancel(context.Background())
	defer cancelRead()
	var readErr error
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		readErr = s.readLoop(readCtx, c)
	}()

	err = s.writeLoop(s.ctx, c, readDone)
	switch {
	case errors.Is(err, errReaderDone):
		err = readErr
		c.CloseNow()
	case s.ctx.Err() != nil:
		c.Close(websocket.StatusGoingAway, "server shutting down")
	default:
		c.CloseNow()
	}
	cancelRead()
	<-readDone
	s.log.Info("page disconnected", "remote", r.RemoteAddr, "err", err)
}

var (
	errTooManyBad = errors.New("too many invalid messages")
	errReaderDone = errors.New("page stopped reading")
)

// readLoop decodes page frames and applies them to the session. Invalid
// frames get an error frame, and after MaxBadMessages of them the
// connection ends; an error from the session (say, no route to the region
// coordinator yet) is reported to the page but is not the page's fault.
func (s *Server) readLoop(ctx context.Context, c *websocket.Conn) error {
	bad := 0
	for {
		typ, b, err := c.Read(ctx)
		if err != nil {
			return err
		}
		var m clientMessage
		if typ != websocket.MessageText {
			err = errors.New("binary frames are not accepted")
		} else {
			m, err = decodeClientMessage(b)
		}
		if err != nil {
			bad++
		} else if m.Control != nil {
			err = s.session.Input(*m.Control)
		} else if m.Chat != nil {
			err = s.session.Chat(m.Chat.Text, m.Chat.To)
		}
		if err == nil {
			continue
		}
		if werr := writeJSON(context.Background(), c, errorFrame{Type: "error", Error: err.Error()}); werr != nil {
			return werr
		}
		if bad >= s.opts.MaxBadMessages {
			c.Close(websocket.StatusPolicyViolation, "too many invalid messages")
			return errTooManyBad
		}
	}
}

// writeLoop sends the hello frame, then a view every ViewInterval, with the
// maps and messages this page has not had yet. It stops when stop is
// cancelled, between frames: writes themselves run on their own timeout,
// because cancelling a write's context makes the library drop the
// connection without a close frame.
func (s *Server) writeLoop(stop context.Context, c *websocket.Conn, readDone <-chan struct{}) error {
	ctx := context.Background()
	first := s.session.Snapshot()
	if err := writeJSON(ctx, c, helloFrame{Type: "hello", Self: first.Self.ID, World: first.World}); err != nil {
		return err
	}
	sentMaps := map[game.RegionCoord]uint64{}
	var lastSeq uint64
	tick := time.NewTicker(s.opts.ViewInterval)
	defer tick.Stop()
	v := first
	for {
		frame := viewFrame{Type: "view", View: v}
		for _, ref := range v.Regions {
			rc := game.RegionCoord{X: ref.X, Y: ref.Y}
			if rev, ok := sentMaps[rc]; ok && rev == ref.Revision {
				continue
			}
			if m, ok := s.session.Map(rc); ok {
				frame.Maps = append(frame.Maps, m)
				sentMaps[rc] = ref.Revision
			}
		}
		fresh := frame.View.Messages[:0:0]
		for _, m := range v.Messages {
			if m.Seq > lastSeq {
				fresh = append(fresh, m)
				lastSeq = m.Seq
			}
		}
		frame.View.Messages = fresh
		if err := writeJSON(ctx, c, frame); err != nil {
			return err
		}
		select {
		case <-stop.Done():
			return stop.Err()
		case <-readDone:
			return errReaderDone
		case <-tick.C:
		}
		v = s.session.Snapshot()
	}
}

func writeJSON(ctx context.Context, c *websocket.Conn, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode frame: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.Write(ctx, websocket.MessageText, b)
}
