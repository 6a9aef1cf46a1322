package master

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/overworld-p2p/overworld/bootstrap/master/ratelimit"
)

// Config configures a Master. Zero fields take the defaults listed.
type Config struct {
	// OperatorTokens may register and deregister games. Each is one
	// operator: a game belongs to the token that registered it first, and
	// another token can neither replace nor remove it. At least one, each
	// at least 16 characters.
	OperatorTokens []string
	// Interval is the keep-alive interval: every Interval the master
	// polls each game that gave a status URL, and a game that neither
	// answered a poll nor registered again during MaxMissed intervals in
	// a row is dropped. Defaults 5s and 3 (as Agones' health checks).
	Interval  time.Duration
	MaxMissed int
	// PollTimeout bounds one poll; below Interval. Default Interval/2,
	// at most 3s. PollConcurrency bounds polls in flight (default 32).
	PollTimeout     time.Duration
	PollConcurrency int
	// MaxGames bounds the registry (default 10,000); registrations of
	// new games beyond it get 503.
	MaxGames int
	// MaxBodyBytes bounds request bodies and poll answers (default
	// 64 KiB).
	MaxBodyBytes int64
	// ReadsPerSource limits queries per source address (default 100,
	// then 50/s); WritesPerSource limits registrations and
	// deregistrations (default 40, then 20/s: enough for 100 games behind
	// one NAT pushing every 5s). MaxSources bounds the limiters' tables
	// (default 65,536 addresses each).
	ReadsPerSource  ratelimit.Rate
	WritesPerSource ratelimit.Rate
	MaxSources      int
	// Now is the clock of stored times. Default time.Now.
	Now func() time.Time
	// Logger; default slog.Default(). Tokens and status keys are never
	// logged.
	Logger *slog.Logger
	// Registry receives the metrics and is served on /metrics. Default: a
	// new registry with Go and process collectors.
	Registry *prometheus.Registry
	// TLSCertFile and TLSKeyFile, if both set, make Serve speak HTTPS.
	TLSCertFile, TLSKeyFile string
	// ShutdownTimeout bounds the drain in Serve (default 10s).
	ShutdownTimeout time.Duration
	// PollClient polls games; default a client that follows no redirects
	// and uses no proxy, with PollTimeout.
	PollClient *http.Client
	// OnRound, if set, is called after every keep-alive round, from the
	// keep-alive goroutine, before the next round starts.
	OnRound func(RoundReport)
}

// RoundReport says what one keep-alive round did.
type RoundReport struct {
	Round   uint64   // 1 for the first round since the master started
	Polled  int      // games polled
	Answers int      // valid answers
	Changed []string // games whose info a poll changed, by ID
	Dropped []string // games dropped for missed keep-alives, by ID
	Games   int      // games left in the registry
}

// Validate fills in defaults and checks the values, naming any it refuses.
func (c *Config) Validate() error {
	if c.Interval == 0 {
		c.Interval = 5 * time.Second
	}
	if c.MaxMissed == 0 {
		c.MaxMissed = 3
	}
	if c.PollTimeout == 0 {
		c.PollTimeout = min(c.Interval/2, 3*time.Second)
	}
	if c.PollConcurrency == 0 {
		c.PollConcurrency = 32
	}
	if c.MaxGames == 0 {
		c.MaxGames = 10_000
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 64 << 10
	}
	if c.ReadsPerSource == (ratelimit.Rate{}) {
		c.ReadsPerSource = ratelimit.Rate{Every: 20 * time.Millisecond, Burst: 100}
	}
	if c.WritesPerSource == (ratelimit.Rate{}) {
		c.WritesPerSource = ratelimit.Rate{Every: 50 * time.Millisecond, Burst: 40}
	}
	if c.MaxSources == 0 {
		c.MaxSources = 1 << 16
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = 10 * time.Second
	}
	if len(c.OperatorTokens) == 0 {
		return errors.New("config: no operator token: nobody could register a game")
	}
	for i, t := range c.OperatorTokens {
		if len(t) < 16 {
			return fmt.Errorf("config: operator token %d has %d characters, want at least 16", i+1, len(t))
		}
	}
	switch {
	case c.Interval < 10*time.Millisecond:
		return fmt.Errorf("config: interval %v below 10ms", c.Interval)
	case c.MaxMissed < 1:
		return fmt.Errorf("config: max missed %d below 1", c.MaxMissed)
	case c.PollTimeout <= 0 || c.PollTimeout >= c.Interval:
		return fmt.Errorf("config: poll timeout %v: want above 0 and below the interval %v", c.PollTimeout, c.Interval)
	case c.PollConcurrency < 1:
		return fmt.Errorf("config: poll concurrency %d below 1", c.PollConcurrency)
	case c.MaxGames < 1:
		return fmt.Errorf("config: max games %d below 1", c.MaxGames)
	case c.MaxBodyBytes < 4096:
		return fmt.Errorf("config: max body %d bytes below 4096", c.MaxBodyBytes)
	case c.MaxSources < 1:
		return fmt.Errorf("config: max sources %d below 1", c.MaxSources)
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return fmt.Errorf("config: TLS needs both a certificate (%q) and a key (%q)", c.TLSCertFile, c.TLSKeyFile)
	}
	if err := c.ReadsPerSource.Validate(); err != nil {
		return fmt.Errorf("config: reads per source: %w", err)
	}
	if err := c.WritesPerSource.Validate(); err != nil {
		return fmt.Errorf("config: writes per source: %w", err)
	}
	return nil
}

// Master is the master server: the registry of running games and their
// mirrors, kept alive by polls and pushes, queried over HTTP/JSON.
type Master struct {
	cfg        Config
	store      *Store
	log        *slog.Logger
	metrics    *metrics
	operators  map[[sha256.Size]byte]string // token digest → owner ID
	reads      *ratelimit.PerKey
	writes     *ratelimit.PerKey
	pollClient *http.Client
	handler    http.Handler
	ready      atomic.Bool
	// started counts keep-alive rounds begun.
	started atomic.Uint64
}

// New builds a master on store, which stays the caller's to close.
func New(cfg Config, store *Store) (*Master, error) {
	if store == nil {
		return nil, errors.New("master: no store")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
		cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	met, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("master: metrics: %w", err)
	}
	reads, err := ratelimit.New(cfg.ReadsPerSource, cfg.MaxSources)
	if err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	writes, err := ratelimit.New(cfg.WritesPerSource, cfg.MaxSources)
	if err != nil {
		return nil, fmt.Errorf("master: %w", err)
	}
	m := &Master{
		cfg: cfg, store: store, log: cfg.Logger, metrics: met,
		operators: map[[sha256.Size]byte]string{}, reads: reads, writes: writes,
		pollClient: cfg.PollClient,
	}
	for _, t := range cfg.OperatorTokens {
		d := sha256.Sum256([]byte(t))
		m.operators[d] = hex.EncodeToString(d[:8])
	}
	if m.pollClient == nil {
		m.pollClient = &http.Client{
			Timeout: cfg.PollTimeout,
			Transport: &http.Transport{
				Proxy:                 nil,
				DialContext:           (&net.Dialer{Timeout: cfg.PollTimeout, KeepAlive: cfg.Interval}).DialContext,
				MaxIdleConnsPerHost:   2,
				IdleConnTimeout:       3 * cfg.Interval,
				ResponseHeaderTimeout: cfg.PollTimeout,
				TLSHandshakeTimeout:   cfg.PollTimeout,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	m.handler = m.routes()
	m.ready.Store(true)
	return m, nil
}

// Handler serves the API, /metrics, /healthz and /readyz, for embedding;
// the keep-alive rounds then need RunKeepAlive.
func (m *Master) Handler() http.Handler { return m.handler }

// Store is the master's store.
func (m *Master) Store() *Store { return m.store }

// Serve answers on ln and runs the keep-alive rounds until ctx ends, then
// stops taking requests, drains those in flight (up to ShutdownTimeout)
// and returns nil.
func (m *Master) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           m.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(m.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	serveErr := make(chan error, 1)
	go func() {
		if m.cfg.TLSCertFile != "" {
			serveErr <- srv.ServeTLS(ln, m.cfg.TLSCertFile, m.cfg.TLSKeyFile)
		} else {
			serveErr <- srv.Serve(ln)
		}
	}()
	kaCtx, stopKeepAlive := context.WithCancel(ctx)
	var kaWG sync.WaitGroup
	kaErr := make(chan error, 1)
	kaWG.Go(func() { kaErr <- m.RunKeepAlive(kaCtx) })
	m.ready.Store(true)
	m.log.Info("master server listening", "addr", ln.Addr().String(), "tls", m.cfg.TLSCertFile != "",
		"store", m.store.Dialect(), "interval", m.cfg.Interval, "max_missed", m.cfg.MaxMissed)

	var err error
	select {
	case err = <-serveErr:
		err = fmt.Errorf("master server: %w", err)
	case err = <-kaErr:
		err = fmt.Errorf("master server: keep-alive: %w", err)
	case <-ctx.Done():
	}
	m.ready.Store(false)
	stopKeepAlive()
	kaWG.Wait()
	shutCtx, cancel := context.WithTimeout(context.Background(), m.cfg.ShutdownTimeout)
	defer cancel()
	if shutErr := srv.Shutdown(shutCtx); shutErr != nil && err == nil {
		err = fmt.Errorf("master server shutdown: %w", shutErr)
	}
	m.log.Info("master server stopped")
	return err
}

func (m *Master) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, limit *ratelimit.PerKey, h func(http.ResponseWriter, *http.Request) error) {
		mux.Handle(pattern, m.instrument(pattern, limit, h))
	}
	handle("POST /v1/games", m.writes, m.handleRegister)
	handle("DELETE /v1/games/{id}", m.writes, m.handleDeregister)
	handle("GET /v1/games", m.reads, m.handleList)
	handle("GET /v1/games/{id}", m.reads, m.handleGame)
	handle("GET /healthz", nil, m.handleHealth)
	handle("GET /readyz", nil, m.handleReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.cfg.Registry, promhttp.HandlerOpts{}))
	handle("/", nil, func(w http.ResponseWriter, r *http.Request) error {
		return apiErr(CodeNotFound, "no such endpoint: %s %s", r.Method, truncate(r.URL.Path, 100))
	})
	return mux
}

// httpError is an error with an API code; handlers return it.
type httpError struct {
	code  string
	msg   string
	cause error // internal, logged, never sent
}

func (e *httpError) Error() string { return e.code + ": " + e.msg }

func apiErr(code, format string, args ...any) error {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

func internalErr(err error) error {
	return &httpError{code: CodeInternal, msg: "internal error", cause: err}
}

// instrument rate-limits (if limit is set), runs h, writes its error,
// recovers a panic and counts the request.
func (m *Master) instrument(route string, limit *ratelimit.PerKey, h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			if p := recover(); p != nil {
				m.log.Error("handler panic", "route", route, "panic", p)
				if !sw.wrote {
					m.writeError(sw, r, internalErr(fmt.Errorf("panic: %v", p)))
				}
			}
			m.metrics.requests.WithLabelValues(route, strconv.Itoa(sw.status)).Inc()
			m.metrics.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}()
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		var err error
		if limit != nil && !limit.Allow(sourceAddr(r), m.cfg.Now()) {
			err = apiErr(CodeRateLimited, "too many requests from your address; retry later")
		} else {
			err = h(sw, r)
		}
		if err != nil {
			m.writeError(sw, r, err)
		}
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusRecorder) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (m *Master) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		he = internalErr(err).(*httpError)
	}
	status := statusOf(he.code)
	if status >= 500 {
		m.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", errors.Join(he.cause, err))
	} else {
		m.metrics.refusals.WithLabelValues(he.code).Inc()
		m.log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "source", sourceAddr(r), "code", he.code, "msg", he.msg)
	}
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	var body ErrorBody
	body.Error.Code, body.Error.Message = he.code, he.msg
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// readBody decodes the request body into dst: JSON only, at most
// MaxBodyBytes, strictly.
func (m *Master) readBody(w http.ResponseWriter, r *http.Request, dst any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			return apiErr(CodeUnsupportedMT, "content type %q: send application/json", truncate(ct, 60))
		}
	}
	if r.ContentLength > m.cfg.MaxBodyBytes {
		return apiErr(CodeTooLarge, "request body of %d bytes is over %d", r.ContentLength, m.cfg.MaxBodyBytes)
	}
	return decodeStrict(http.MaxBytesReader(w, r.Body, m.cfg.MaxBodyBytes), dst)
}

// decodeStrict reads exactly one JSON value into dst: unknown fields and
// trailing data are refused, and a body over a MaxBytesReader's limit is
// 413. Every error it returns is an *httpError with a 4xx code.
func decodeStrict(body io.Reader, dst any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(dst)
	if err == nil {
		if _, err = dec.Token(); errors.Is(err, io.EOF) {
			return nil
		}
		if err == nil {
			err = errors.New("data after the JSON value")
		}
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return apiErr(CodeTooLarge, "body over %d bytes", tooBig.Limit)
	case errors.Is(err, io.EOF):
		return apiErr(CodeBadRequest, "empty body")
	}
	return apiErr(CodeBadRequest, "malformed JSON: %s", truncate(err.Error(), 200))
}

// operator returns the owner ID of the request's bearer operator token.
// Every configured token is compared, in constant time, whatever matches.
func (m *Master) operator(r *http.Request) (string, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return "", apiErr(CodeUnauthorized, "operator token required (Authorization: Bearer …)")
	}
	got := sha256.Sum256([]byte(tok))
	owner := ""
	for d, id := range m.operators {
		if subtle.ConstantTimeCompare(got[:], d[:]) == 1 {
			owner = id
		}
	}
	if owner == "" {
		m.log.Warn("operator token refused", "source", sourceAddr(r), "path", r.URL.Path)
		return "", apiErr(CodeUnauthorized, "operator token not accepted")
	}
	return owner, nil
}

func (m *Master) handleRegister(w http.ResponseWriter, r *http.Request) error {
	owner, err := m.operator(r)
	if err != nil {
		return err
	}
	var reg Registration
	if err := m.readBody(w, r, &reg); err != nil {
		return err
	}
	if err := reg.Validate(); err != nil {
		return apiErr(CodeBadRequest, "%v", err)
	}
	created, err := m.store.Register(r.Context(), owner, reg, m.now(), m.cfg.MaxGames)
	switch {
	case errors.Is(err, errOwner):
		return apiErr(CodeForbidden, "game %s belongs to another operator", reg.Game.ID)
	case errors.Is(err, errStoreFull):
		return apiErr(CodeRegistryFull, "registry holds its maximum of %d games", m.cfg.MaxGames)
	case err != nil:
		return internalErr(err)
	}
	resp := RegisterResponse{GameID: reg.Game.ID, Created: created, KeepAlive: KeepAlivePush,
		IntervalMS: m.cfg.Interval.Milliseconds(), MaxMissed: m.cfg.MaxMissed}
	if reg.StatusURL != "" {
		resp.KeepAlive = KeepAlivePoll
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		m.metrics.registrations.WithLabelValues("created").Inc()
		m.log.Info("game registered", "game", reg.Game.ID, "world", reg.Game.World, "mode", reg.Game.Mode,
			"mirrors", len(reg.Game.Mirrors), "keepalive", resp.KeepAlive, "owner", owner, "source", sourceAddr(r))
	} else {
		m.metrics.registrations.WithLabelValues("refreshed").Inc()
		m.log.Debug("game registered again", "game", reg.Game.ID, "version", reg.Version, "keepalive", resp.KeepAlive)
	}
	writeJSON(w, status, resp)
	return nil
}

func (m *Master) handleDeregister(w http.ResponseWriter, r *http.Request) error {
	owner, err := m.operator(r)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	if err := ValidID(id); err != nil {
		return apiErr(CodeBadRequest, "%v", err)
	}
	q := r.URL.Query()
	instance := q.Get("instance")
	if len(q) > 1 || len(q["instance"]) > 1 || (len(q) == 1 && !q.Has("instance")) {
		return apiErr(CodeBadRequest, "the only parameter is one instance")
	}
	if instance != "" {
		if err := validLabel("instance", instance); err != nil {
			return apiErr(CodeBadRequest, "%v", err)
		}
	}
	err = m.store.Deregister(r.Context(), owner, id, instance)
	switch {
	case errors.Is(err, errNoGame):
		return apiErr(CodeNotFound, "no game %s", id)
	case errors.Is(err, errOwner):
		return apiErr(CodeForbidden, "game %s belongs to another operator", id)
	case errors.Is(err, errInstance):
		return apiErr(CodeConflict, "game %s was registered again by another instance; left in place", id)
	case err != nil:
		return internalErr(err)
	}
	m.metrics.dropped.WithLabelValues("deregistered").Inc()
	m.log.Info("game deregistered", "game", id, "source", sourceAddr(r))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (m *Master) handleList(w http.ResponseWriter, r *http.Request) error {
	f, err := ParseFilter(r.URL.Query())
	if err != nil {
		return apiErr(CodeBadRequest, "%v", err)
	}
	games, next, err := m.store.List(r.Context(), f)
	if err != nil {
		return internalErr(err)
	}
	writeJSON(w, http.StatusOK, GameList{Games: games, Next: next})
	return nil
}

func (m *Master) handleGame(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := ValidID(id); err != nil {
		return apiErr(CodeBadRequest, "%v", err)
	}
	g, err := m.store.Game(r.Context(), id)
	if errors.Is(err, errNoGame) {
		return apiErr(CodeNotFound, "no game %s", id)
	}
	if err != nil {
		return internalErr(err)
	}
	writeJSON(w, http.StatusOK, g)
	return nil
}

func (m *Master) handleHealth(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := m.store.Ping(ctx); err != nil {
		m.log.Warn("health check: store unreachable", "err", err)
		http.Error(w, "store unreachable", http.StatusServiceUnavailable)
		return nil
	}
	io.WriteString(w, "ok\n")
	return nil
}

func (m *Master) handleReady(w http.ResponseWriter, r *http.Request) error {
	if !m.ready.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return nil
	}
	return m.handleHealth(w, r)
}

// sourceAddr is the client's IP, the key of the rate limits.
func sourceAddr(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// now is the master's clock at the microsecond precision it stores.
func (m *Master) now() time.Time { return m.cfg.Now().Truncate(time.Microsecond) }
