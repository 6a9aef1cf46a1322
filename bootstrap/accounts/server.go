package accounts

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
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

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/bootstrap/leases"
)

// Config configures a Server. Zero fields take the defaults listed.
type Config struct {
	// Key signs access tokens. Required; see LoadOrCreateKey.
	Key ed25519.PrivateKey
	// AdminToken guards /v1/admin/…; empty disables the admin API.
	AdminToken string
	// TokenTTL is the access token lifetime. Default 15m.
	TokenTTL time.Duration
	// RefreshTTL is how long a session may go without a refresh. Default
	// 30 days.
	RefreshTTL time.Duration
	// LeaseTTL is the coordinator lease lifetime. Default 10s.
	LeaseTTL time.Duration
	// LeaseCandidates is the placement check of lease acquires: a region's
	// lease goes only to a peer among the LeaseCandidates peers closest to
	// the region's key (XOR of SHA-256, as the region service places
	// regions) among the peers that hold a live token now, so that a login
	// cannot squat any region it likes. Default 8; negative turns the check
	// off. Why 8: the server's set of logged-in peers is wider than any
	// peer's placement view (players behind NAT log in but never
	// coordinate; a crashed peer's token lives on for up to TokenTTL; a
	// peer that just logged in is not in the routing tables yet), so the
	// honest coordinator's rank among them is often above 0; 8 is the
	// number of peers a region peer asks before it takes a region over, so
	// a peer that may take over honestly is entitled while up to 7 closer
	// logged-in peers are gone or cannot coordinate.
	LeaseCandidates int
	// Hash are the argon2id parameters for new password hashes; default
	// DefaultHashParams. HashConcurrency bounds hashes in flight
	// (default 2).
	Hash            HashParams
	HashConcurrency int
	// MaxBodyBytes bounds request bodies. Default 64 KiB.
	MaxBodyBytes int64
	// Lockout slows password guessing per account and per (account,
	// source address) without letting a guesser lock the owner out
	// (default DefaultLockoutPolicy). LoginPerSource limits login and
	// register attempts per source address (default 20, then one per
	// second).
	Lockout        LockoutPolicy
	LoginPerSource RateLimit
	// MaxPeersPerAccount bounds the peer IDs one account may hold live
	// tokens for at once (default 4): a login from another peer ID past
	// it is refused (409 too_many_peers) until one of the others' tokens
	// expires. One login must not become a swarm of identities near every
	// region's key.
	MaxPeersPerAccount int
	// Characters bounds what a save may store and gain (default
	// DefaultCharacterRules).
	Characters CharacterRules
	// SessionRetention is how long ended (expired or revoked) sessions are
	// kept, for the admin and for recognising addresses the owner logged
	// in from (default 7 days); CleanupEvery is how often Serve deletes
	// older ones (default 10 minutes).
	SessionRetention, CleanupEvery time.Duration
	// Now is the server's clock. Default time.Now.
	Now func() time.Time
	// Logger; default slog.Default(). Passwords and tokens are never
	// logged.
	Logger *slog.Logger
	// Registry receives the server's metrics and is served on /metrics.
	// Default: a new registry with Go and process collectors.
	Registry *prometheus.Registry
	// OnLease, if set, is called with a region's lease record after every
	// acquire, renew or release that changed it (tests and audit logs).
	OnLease func(leases.Record)
	// TLSCertFile and TLSKeyFile, if both set, make Serve speak HTTPS.
	TLSCertFile, TLSKeyFile string
	// ShutdownTimeout bounds the graceful drain in Serve. Default 10s.
	ShutdownTimeout time.Duration
}

func (c *Config) setDefaults() error {
	if len(c.Key) != ed25519.PrivateKeySize {
		return fmt.Errorf("config: signing key has %d bytes, want %d", len(c.Key), ed25519.PrivateKeySize)
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = 15 * time.Minute
	}
	if c.RefreshTTL == 0 {
		c.RefreshTTL = 30 * 24 * time.Hour
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.LeaseCandidates == 0 {
		c.LeaseCandidates = 8
	}
	if c.Hash == (HashParams{}) {
		c.Hash = DefaultHashParams
	}
	if c.HashConcurrency == 0 {
		c.HashConcurrency = 2
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 64 << 10
	}
	if c.Lockout == (LockoutPolicy{}) {
		c.Lockout = DefaultLockoutPolicy
	}
	if c.MaxPeersPerAccount == 0 {
		c.MaxPeersPerAccount = 4
	}
	if c.Characters == (CharacterRules{}) {
		c.Characters = DefaultCharacterRules
	}
	if c.SessionRetention == 0 {
		c.SessionRetention = 7 * 24 * time.Hour
	}
	if c.CleanupEvery == 0 {
		c.CleanupEvery = 10 * time.Minute
	}
	if c.LoginPerSource == (RateLimit{}) {
		c.LoginPerSource = RateLimit{Every: time.Second, Burst: 20}
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
	switch {
	case c.TokenTTL < time.Second:
		return fmt.Errorf("config: token ttl %v below 1s (tokens count whole seconds)", c.TokenTTL)
	case c.RefreshTTL < c.TokenTTL:
		return fmt.Errorf("config: refresh ttl %v shorter than token ttl %v", c.RefreshTTL, c.TokenTTL)
	case c.LeaseTTL < 10*time.Millisecond:
		return fmt.Errorf("config: lease ttl %v below 10ms", c.LeaseTTL)
	case c.MaxBodyBytes < 1024:
		return fmt.Errorf("config: max body %d bytes below 1024", c.MaxBodyBytes)
	case c.LoginPerSource.Every <= 0 || c.LoginPerSource.Burst < 1:
		return fmt.Errorf("config: per-source rate limit %+v needs a positive period and burst", c.LoginPerSource)
	case c.MaxPeersPerAccount < 1:
		return fmt.Errorf("config: max peers per account %d: want at least 1", c.MaxPeersPerAccount)
	case c.SessionRetention < 0 || c.CleanupEvery <= 0:
		return fmt.Errorf("config: session retention %v, cleanup every %v: want >= 0 and > 0", c.SessionRetention, c.CleanupEvery)
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return fmt.Errorf("config: TLS needs both a certificate (%q) and a key (%q)", c.TLSCertFile, c.TLSKeyFile)
	}
	if c.AdminToken != "" && len(c.AdminToken) < 16 {
		return errors.New("config: admin token shorter than 16 characters")
	}
	if err := c.Lockout.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if err := c.Characters.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// Server is the account server: accounts, logins, characters and
// coordinator leases over HTTP/JSON.
type Server struct {
	cfg       Config
	store     *Store
	pub       ed25519.PublicKey
	log       *slog.Logger
	hash      *hasher
	perSource *limiters
	// guesses per (account, source) and per account; see LockoutPolicy.
	sourceGuesses, accountGuesses *backoffs
	// dummyHash is checked for unknown names so that a login for a name
	// that does not exist costs as much as a wrong password.
	dummyHash string
	metrics   *metrics
	handler   http.Handler
	ready     atomic.Bool
	live      livePeers
}

// livePeers caches the peers with live tokens for lease placement checks,
// read from the store at most once per livePeersTTL.
type livePeers struct {
	mu    sync.Mutex
	at    time.Time
	peers []string // binary peer IDs
}

const livePeersTTL = time.Second

// New builds a server on store. The store stays the caller's to close.
func New(cfg Config, store *Store) (*Server, error) {
	if store == nil {
		return nil, errors.New("accounts server: no store")
	}
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("accounts server: %w", err)
	}
	h, err := newHasher(cfg.Hash, cfg.HashConcurrency)
	if err != nil {
		return nil, fmt.Errorf("accounts server: %w", err)
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
		cfg.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, fmt.Errorf("accounts server: %w", err)
	}
	s := &Server{
		cfg:       cfg,
		store:     store,
		pub:       cfg.Key.Public().(ed25519.PublicKey),
		log:       cfg.Logger,
		hash:      h,
		perSource: newLimiters(cfg.LoginPerSource, 100_000),
		sourceGuesses: newBackoffs(cfg.Lockout.SourceFree, cfg.Lockout.FirstWait, cfg.Lockout.MaxSourceWait,
			cfg.Lockout.ResetAfter, 100_000),
		accountGuesses: newBackoffs(cfg.Lockout.AccountFree, cfg.Lockout.FirstWait, cfg.Lockout.MaxAccountWait,
			cfg.Lockout.ResetAfter, 100_000),
		metrics: m,
	}
	s.dummyHash, err = h.Hash(context.Background(), "not a password anyone has")
	if err != nil {
		return nil, fmt.Errorf("accounts server: %w", err)
	}
	s.handler = s.routes()
	s.ready.Store(true)
	return s, nil
}

// PublicKey is the key that verifies the server's tokens.
func (s *Server) PublicKey() ed25519.PublicKey { return s.pub }

// Handler serves the whole API, /metrics and /healthz.
func (s *Server) Handler() http.Handler { return s.handler }

// Serve answers on ln until ctx is cancelled, then stops taking requests,
// drains those in flight (up to ShutdownTimeout) and returns nil. It speaks
// HTTPS if the config names a certificate and key.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() {
		if s.cfg.TLSCertFile != "" {
			errc <- srv.ServeTLS(ln, s.cfg.TLSCertFile, s.cfg.TLSKeyFile)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	s.ready.Store(true)
	janitorDone := make(chan struct{})
	janitorCtx, stopJanitor := context.WithCancel(ctx)
	go func() {
		defer close(janitorDone)
		s.cleanLoop(janitorCtx)
	}()
	defer func() { stopJanitor(); <-janitorDone }()
	s.log.Info("account server listening", "addr", ln.Addr().String(), "tls", s.cfg.TLSCertFile != "", "store", s.store.Dialect())
	select {
	case err := <-errc:
		s.ready.Store(false)
		return fmt.Errorf("account server: %w", err)
	case <-ctx.Done():
	}
	s.ready.Store(false)
	shutCtx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(shutCtx)
	<-errc
	if err != nil {
		return fmt.Errorf("account server shutdown: %w", err)
	}
	s.log.Info("account server stopped")
	return nil
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		mux.Handle(pattern, s.instrument(pattern, h))
	}
	handle("GET /v1/pubkey", s.handlePubkey)
	handle("POST /v1/register", s.handleRegister)
	handle("POST /v1/login", s.handleLogin)
	handle("POST /v1/refresh", s.handleRefresh)
	handle("POST /v1/logout", s.handleLogout)
	handle("POST /v1/tokens/verify", s.handleVerify)
	handle("GET /v1/character", s.handleLoadCharacter)
	handle("PUT /v1/character", s.handleSaveCharacter)
	handle("POST /v1/password", s.handlePassword)
	handle("POST /v1/leases/{region}/acquire", s.handleLeaseAcquire)
	handle("POST /v1/leases/{region}/renew", s.handleLeaseRenew)
	handle("POST /v1/leases/{region}/release", s.handleLeaseRelease)
	handle("POST /v1/admin/accounts/{name}/disable", s.handleAdminDisable(true))
	handle("POST /v1/admin/accounts/{name}/enable", s.handleAdminDisable(false))
	handle("GET /v1/admin/sessions", s.handleAdminSessions)
	handle("GET /v1/admin/leases", s.handleAdminLeases)
	handle("GET /healthz", s.handleHealth)
	handle("GET /readyz", s.handleReady)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.cfg.Registry, promhttp.HandlerOpts{}))
	handle("/", func(w http.ResponseWriter, r *http.Request) error {
		return apiErr(CodeNotFound, "no such endpoint: %s %s", r.Method, truncate(r.URL.Path, 100))
	})
	return mux
}

// httpError is an error with an API code; handlers return it.
type httpError struct {
	code string
	msg  string
	err  error // internal cause, logged, never sent
	// reason labels the refusal in the metrics (default: the code).
	reason string
	// retryAfter, if set, is sent as Retry-After (default 5 s for 429).
	retryAfter time.Duration
}

// refused is an API error with the reason it is counted under.
func refused(reason, code, format string, args ...any) error {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...), reason: reason}
}

func (e *httpError) Error() string { return e.code + ": " + e.msg }

func apiErr(code, format string, args ...any) error {
	return &httpError{code: code, msg: fmt.Sprintf(format, args...)}
}

func internalErr(err error) error {
	return &httpError{code: CodeInternal, msg: "internal error", err: err}
}

// instrument runs h, writes its error as JSON, recovers panics and counts
// the request.
func (s *Server) instrument(route string, h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		var reason string
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("handler panic", "route", route, "panic", p)
				if !rw.wrote {
					s.writeError(rw, r, internalErr(fmt.Errorf("panic: %v", p)))
				}
			}
			s.metrics.requests.WithLabelValues(route, strconv.Itoa(rw.status)).Inc()
			if reason != "" {
				s.metrics.refusals.WithLabelValues(route, reason).Inc()
			}
			s.metrics.latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
		}()
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if err := h(rw, r); err != nil {
			reason = refusalReason(err)
			s.writeError(rw, r, err)
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		he = &httpError{code: CodeInternal, msg: "internal error", err: err}
	}
	status := statusOf(he.code)
	if status >= 500 {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", he.err)
	} else {
		s.log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "code", he.code, "msg", he.msg)
	}
	var body ErrorBody
	body.Error.Code, body.Error.Message = he.code, he.msg
	if status == http.StatusTooManyRequests {
		retry := 5 * time.Second
		if he.retryAfter > 0 {
			retry = he.retryAfter
		}
		w.Header().Set("Retry-After", strconv.FormatInt(int64((retry+time.Second-1)/time.Second), 10))
	}
	writeJSON(w, status, body)
}

// refusalReason is the metric label of a refused request: the error's
// reason, else its code; "" for server errors (counted as requests).
func refusalReason(err error) string {
	var he *httpError
	if !errors.As(err, &he) || statusOf(he.code) >= 500 {
		return ""
	}
	if he.reason != "" {
		return he.reason
	}
	return he.code
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

// decodeBody decodes one JSON value from r's body into dst: sent as
// application/json, bounded in size, unknown fields refused, nothing after
// the value. The content type is required: a web page may send another
// site a body without one (or as text/plain) without asking first, but
// not as application/json, which needs a CORS preflight this server never
// grants, so no page can make a visitor's browser log in, register or
// save here.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, dst any) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return refused("no_content_type", CodeUnsupportedMT, "no content type: send application/json")
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return refused("wrong_content_type", CodeUnsupportedMT, "content type %q: send application/json", truncate(ct, 60))
	}
	return decodeJSON(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), dst)
}

// decodeJSON is the body decoder, separate for fuzzing.
func decodeJSON(body io.Reader, dst any) error {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return apiErr(CodeTooLarge, "request body over %d bytes", tooBig.Limit)
		}
		if errors.Is(err, io.EOF) {
			return apiErr(CodeBadRequest, "empty request body")
		}
		return apiErr(CodeBadRequest, "malformed JSON: %s", truncate(err.Error(), 200))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return apiErr(CodeTooLarge, "request body over %d bytes", tooBig.Limit)
		}
		return apiErr(CodeBadRequest, "malformed JSON: data after the request object")
	}
	return nil
}

// sourceOf is the client's address without port, for rate limits and logs.
func sourceOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// now is the server clock at microsecond precision, as stored.
func (s *Server) now() time.Time { return s.cfg.Now().Truncate(time.Microsecond) }

func randomID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// refresh tokens are 256 random bits; the store keeps only their SHA-256.
const refreshPrefix = "owr1."

func newRefreshToken() string {
	b := make([]byte, 32)
	rand.Read(b)
	return refreshPrefix + base64.RawURLEncoding.EncodeToString(b)
}

func hashRefresh(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

func (s *Server) handlePubkey(w http.ResponseWriter, r *http.Request) error {
	writeJSON(w, http.StatusOK, PublicKeyResponse{Algorithm: "ed25519", PublicKey: s.pub, TokenFormat: "ow1"})
	return nil
}

func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	if err := s.store.Ping(ctx); err != nil {
		s.log.Warn("health check: store unreachable", "err", err)
		http.Error(w, "store unreachable\n", http.StatusServiceUnavailable)
		return nil
	}
	io.WriteString(w, "ok\n")
	return nil
}

func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) error {
	if !s.ready.Load() {
		http.Error(w, "shutting down\n", http.StatusServiceUnavailable)
		return nil
	}
	return s.handleHealth(w, r)
}

func (s *Server) handleRegister(w http.ResponseWriter, r *http.Request) error {
	now := s.now()
	if !s.perSource.Allow(sourceOf(r), now) {
		s.metrics.registrations.WithLabelValues("rate_limited").Inc()
		return apiErr(CodeRateLimited, "too many attempts from your address; retry later")
	}
	var req RegisterRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := ValidName(req.Name); err != nil {
		return apiErr(CodeBadRequest, "%v", err)
	}
	if err := ValidPassword(req.Password); err != nil {
		return apiErr(CodeBadRequest, "%v", err)
	}
	hash, err := s.hash.Hash(r.Context(), req.Password)
	if err != nil {
		return internalErr(err)
	}
	a := Account{ID: randomID(), Name: req.Name, PasswordHash: hash, Created: now}
	if err := s.store.CreateAccount(r.Context(), a); err != nil {
		if errors.Is(err, ErrConflict) {
			s.metrics.registrations.WithLabelValues("name_taken").Inc()
			return apiErr(CodeNameTaken, "name %q is taken", req.Name)
		}
		return internalErr(err)
	}
	s.metrics.registrations.WithLabelValues("ok").Inc()
	s.log.Info("account registered", "account", a.ID, "name", a.Name, "source", sourceOf(r))
	writeJSON(w, http.StatusCreated, RegisterResponse{AccountID: a.ID, Name: a.Name})
	return nil
}

// checkPassword verifies name's password from source under the lockout
// policy (see LockoutPolicy): the (account, source) backoff first, then,
// for a source the account never logged in from, the account's. Every
// failure counts on both; a success clears the source's.
func (s *Server) checkPassword(ctx context.Context, name, password, source string, now time.Time) (Account, error) {
	key := nameKey(name)
	pair := key + "\x00" + source
	if wait := s.sourceGuesses.Wait(pair, now); wait > 0 {
		return Account{}, &httpError{code: CodeRateLimited, reason: "locked_source", retryAfter: wait,
			msg: fmt.Sprintf("too many failed attempts for this account from your address; retry in %s", wait.Round(time.Second))}
	}
	a, err := s.store.AccountByName(ctx, name)
	found := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Account{}, internalErr(err)
	}
	if wait := s.accountGuesses.Wait(key, now); wait > 0 {
		known := false
		if found {
			if known, err = s.store.KnownSource(ctx, a.ID, source); err != nil {
				return Account{}, internalErr(err)
			}
		}
		if !known {
			return Account{}, &httpError{code: CodeRateLimited, reason: "locked_account", retryAfter: wait,
				msg: fmt.Sprintf("too many failed attempts for this account; retry in %s, or from an address you logged in from before", wait.Round(time.Second))}
		}
	}
	ok := false
	if found {
		if ok, err = s.hash.Check(ctx, a.PasswordHash, password); err != nil {
			return Account{}, internalErr(fmt.Errorf("account %s: %w", a.ID, err))
		}
	} else {
		// A name nobody has costs as much as a wrong password.
		s.hash.Check(ctx, s.dummyHash, password)
	}
	if !ok {
		s.sourceGuesses.Fail(pair, now)
		s.accountGuesses.Fail(key, now)
		return Account{}, refused("wrong_password", CodeUnauthorized, "wrong name or password")
	}
	s.sourceGuesses.Clear(pair)
	if a.Disabled {
		return Account{}, apiErr(CodeDisabled, "account %q is disabled", a.Name)
	}
	return a, nil
}

func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) error {
	now := s.now()
	src := sourceOf(r)
	if !s.perSource.Allow(src, now) {
		s.metrics.logins.WithLabelValues("rate_limited").Inc()
		return apiErr(CodeRateLimited, "too many attempts from your address; retry later")
	}
	var req LoginRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := ValidName(req.Name); err != nil {
		return apiErr(CodeBadRequest, "%v", err)
	}
	if len(req.Password) > MaxPasswordLen {
		return apiErr(CodeBadRequest, "password longer than %d bytes", MaxPasswordLen)
	}
	pid, err := peer.Decode(req.PeerID)
	if err != nil {
		return apiErr(CodeBadRequest, "peer_id %q: %v", truncate(req.PeerID, 80), err)
	}
	a, err := s.checkPassword(r.Context(), req.Name, req.Password, src, now)
	if err != nil {
		var he *httpError
		if errors.As(err, &he) {
			s.metrics.logins.WithLabelValues(he.code).Inc()
			if he.code == CodeUnauthorized || he.code == CodeDisabled || he.code == CodeRateLimited {
				s.log.Info("login refused", "name", req.Name, "source", src, "code", he.code, "reason", he.reason)
			}
		}
		return err
	}
	refresh := newRefreshToken()
	ss := Session{ID: randomID(), AccountID: a.ID, PeerID: pid.String(), RefreshHash: hashRefresh(refresh),
		Source: src, Created: now, Expires: now.Add(s.cfg.RefreshTTL)}
	// A token issued before liveSince has expired: its peer no longer
	// counts against the account's cap.
	liveSince := now.Add(-s.cfg.TokenTTL)
	if err := s.store.CreateSessionCapped(r.Context(), ss, liveSince, s.cfg.MaxPeersPerAccount); err != nil {
		if errors.Is(err, ErrTooManyPeers) {
			s.metrics.logins.WithLabelValues(CodeTooManyPeers).Inc()
			s.log.Info("login refused", "name", a.Name, "peer", pid, "source", src, "code", CodeTooManyPeers)
			return refused(CodeTooManyPeers, CodeTooManyPeers,
				"account %q is logged in on %d other peers (the limit): log out on one, or wait up to %s for its token to expire",
				a.Name, s.cfg.MaxPeersPerAccount, s.cfg.TokenTTL)
		}
		return internalErr(err)
	}
	tokens, err := s.issue(a, ss, refresh, now)
	if err != nil {
		return internalErr(err)
	}
	s.metrics.logins.WithLabelValues("ok").Inc()
	s.log.Info("login", "account", a.ID, "name", a.Name, "peer", pid, "session", ss.ID, "source", src)
	writeJSON(w, http.StatusOK, tokens)
	return nil
}

// issue signs an access token for the session.
func (s *Server) issue(a Account, ss Session, refresh string, now time.Time) (Tokens, error) {
	pid, err := peer.Decode(ss.PeerID)
	if err != nil {
		return Tokens{}, fmt.Errorf("session %s peer: %w", ss.ID, err)
	}
	// Whole seconds, as the token carries them; never past the session.
	iat := now.Truncate(time.Second)
	exp := iat.Add(s.cfg.TokenTTL)
	if ss.Expires.Before(exp) {
		exp = ss.Expires.Truncate(time.Second)
	}
	if !exp.After(iat) {
		return Tokens{}, fmt.Errorf("session %s ends before a token could start", ss.ID)
	}
	tok, err := token.Sign(s.cfg.Key, token.Claims{Session: ss.ID, Account: a.ID, Player: a.Name, Peer: pid, IssuedAt: iat, Expiry: exp})
	if err != nil {
		return Tokens{}, err
	}
	return Tokens{AccountID: a.ID, Name: a.Name, PeerID: ss.PeerID, AccessToken: tok, AccessIssuedAt: iat.UTC(), AccessExpiresAt: exp.UTC(),
		RefreshToken: refresh, RefreshExpiresAt: ss.Expires.UTC()}, nil
}

func (s *Server) handleRefresh(w http.ResponseWriter, r *http.Request) error {
	var req RefreshRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if !strings.HasPrefix(req.RefreshToken, refreshPrefix) || len(req.RefreshToken) > 100 {
		return apiErr(CodeUnauthorized, "refresh token malformed")
	}
	now := s.now()
	refresh := newRefreshToken()
	expires := now.Add(s.cfg.RefreshTTL)
	ss, err := s.store.RotateRefresh(r.Context(), hashRefresh(req.RefreshToken), hashRefresh(refresh), now, expires)
	if errors.Is(err, ErrRefreshReused) {
		s.log.Warn("refresh token used twice: session revoked", "session", ss.ID, "source", sourceOf(r))
		return refused("refresh_reused", CodeUnauthorized, "refresh token already used: the session is ended; log in again")
	}
	if errors.Is(err, ErrNotFound) {
		return apiErr(CodeUnauthorized, "refresh token unknown, used, expired or revoked; log in again")
	}
	if err != nil {
		return internalErr(err)
	}
	a, err := s.store.AccountByID(r.Context(), ss.AccountID)
	if err != nil {
		return internalErr(err)
	}
	if a.Disabled {
		return apiErr(CodeDisabled, "account %q is disabled", a.Name)
	}
	ss.Expires = expires
	tokens, err := s.issue(a, ss, refresh, now)
	if err != nil {
		return internalErr(err)
	}
	writeJSON(w, http.StatusOK, tokens)
	return nil
}

// caller is an authenticated request's identity.
type caller struct {
	claims  token.Claims
	account Account
	session Session
}

// authenticate checks the bearer access token and that its session is
// still active and its account enabled: unlike offline verification, the
// server's own endpoints honour logout and disabling at once.
func (s *Server) authenticate(r *http.Request) (caller, error) {
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || tok == "" {
		return caller{}, apiErr(CodeUnauthorized, "missing bearer token")
	}
	now := s.now()
	c, err := token.Check(s.pub, tok, now)
	if err != nil {
		return caller{}, apiErr(CodeUnauthorized, "%v", err)
	}
	ss, err := s.store.SessionByID(r.Context(), c.Session)
	if errors.Is(err, ErrNotFound) {
		return caller{}, apiErr(CodeUnauthorized, "session unknown")
	}
	if err != nil {
		return caller{}, internalErr(err)
	}
	if ss.PeerID != c.Peer.String() || ss.AccountID != c.Account {
		return caller{}, apiErr(CodeUnauthorized, "token does not match its session")
	}
	a, err := s.store.AccountByID(r.Context(), c.Account)
	if err != nil {
		return caller{}, internalErr(err)
	}
	if a.Disabled {
		return caller{}, apiErr(CodeDisabled, "account %q is disabled", a.Name)
	}
	if !ss.Active(now) {
		return caller{}, apiErr(CodeUnauthorized, "session ended; log in again")
	}
	return caller{claims: c, account: a, session: ss}, nil
}

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) error {
	now := s.now()
	if r.Header.Get("Authorization") != "" {
		c, err := s.authenticate(r)
		if err != nil {
			return err
		}
		if err := s.store.RevokeSession(r.Context(), c.claims.Session, now); err != nil {
			return internalErr(err)
		}
		s.log.Info("logout", "account", c.account.ID, "session", c.claims.Session)
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	var req RefreshRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	// Rotating to a value nobody knows, then revoking, ends the session
	// the refresh token names.
	ss, err := s.store.RotateRefresh(r.Context(), hashRefresh(req.RefreshToken), hashRefresh(newRefreshToken()), now, now.Add(time.Microsecond))
	if errors.Is(err, ErrRefreshReused) {
		s.log.Warn("refresh token used twice: session revoked", "session", ss.ID, "source", sourceOf(r))
		return refused("refresh_reused", CodeUnauthorized, "refresh token already used: the session is ended")
	}
	if errors.Is(err, ErrNotFound) {
		return apiErr(CodeUnauthorized, "refresh token unknown, used, expired or revoked")
	}
	if err != nil {
		return internalErr(err)
	}
	if err := s.store.RevokeSession(r.Context(), ss.ID, now); err != nil {
		return internalErr(err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// VerifyRequest is the body of POST /v1/tokens/verify: the online check a
// peer may use instead of (or besides) token.Verify, which also sees logouts
// and disabled accounts.
type VerifyRequest struct {
	Token  string `json:"token"`
	PeerID string `json:"peer_id"`
}

// VerifyResponse answers a successful verification.
type VerifyResponse struct {
	AccountID string    `json:"account_id"`
	Name      string    `json:"name"`
	PeerID    string    `json:"peer_id"`
	Session   string    `json:"session"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (s *Server) handleVerify(w http.ResponseWriter, r *http.Request) error {
	var req VerifyRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	pid, err := peer.Decode(req.PeerID)
	if err != nil {
		return apiErr(CodeBadRequest, "peer_id %q: %v", truncate(req.PeerID, 80), err)
	}
	c, err := token.Verify(s.pub, req.Token, pid, s.now())
	if err != nil {
		return apiErr(CodeUnauthorized, "%v", err)
	}
	// The session and account checks of authenticate, on this token.
	r2 := r.Clone(r.Context())
	r2.Header.Set("Authorization", "Bearer "+req.Token)
	if _, err := s.authenticate(r2); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, VerifyResponse{AccountID: c.Account, Name: c.Player, PeerID: c.Peer.String(), Session: c.Session, ExpiresAt: c.Expiry.UTC()})
	return nil
}

func (s *Server) handleLoadCharacter(w http.ResponseWriter, r *http.Request) error {
	c, err := s.authenticate(r)
	if err != nil {
		return err
	}
	ch, err := s.store.LoadCharacter(r.Context(), c.account.ID)
	if errors.Is(err, ErrNotFound) {
		// Never saved: version 0 tells the game to spawn a new one.
		ch = Character{Inventory: []Item{}}
	} else if err != nil {
		return internalErr(err)
	}
	writeJSON(w, http.StatusOK, ch)
	return nil
}

func (s *Server) handleSaveCharacter(w http.ResponseWriter, r *http.Request) error {
	c, err := s.authenticate(r)
	if err != nil {
		return err
	}
	var req SaveRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := req.Character.Validate(); err != nil {
		s.metrics.saves.WithLabelValues("bad_request").Inc()
		return apiErr(CodeBadRequest, "character: %v", err)
	}
	if req.BaseVersion < 0 {
		return apiErr(CodeBadRequest, "base_version %d is negative", req.BaseVersion)
	}
	now := s.now()
	var outOfBounds error
	v, err := s.store.SaveCharacter(r.Context(), c.account.ID, req.Character, req.BaseVersion, now, func(prev Character) error {
		outOfBounds = s.cfg.Characters.CheckSave(prev, req.Character, c.session.Created, now)
		return outOfBounds
	})
	if outOfBounds != nil {
		s.metrics.saves.WithLabelValues("out_of_bounds").Inc()
		s.log.Warn("character save refused", "account", c.account.ID, "peer", c.claims.Peer, "err", outOfBounds)
		return refused("save_out_of_bounds", CodeBadRequest, "character: %v", outOfBounds)
	}
	if errors.Is(err, ErrConflict) {
		s.metrics.saves.WithLabelValues("conflict").Inc()
		if req.BaseVersion == 0 {
			return refused("save_unconditional", CodeConflict, "%v: base_version 0 only creates a character; send the version you loaded", err)
		}
		return refused("save_conflict", CodeConflict, "%v", err)
	}
	if err != nil {
		s.metrics.saves.WithLabelValues("error").Inc()
		return internalErr(err)
	}
	s.metrics.saves.WithLabelValues("ok").Inc()
	writeJSON(w, http.StatusOK, SaveResponse{Version: v})
	return nil
}

func (s *Server) handlePassword(w http.ResponseWriter, r *http.Request) error {
	c, err := s.authenticate(r)
	if err != nil {
		return err
	}
	var req PasswordRequest
	if err := s.decodeBody(w, r, &req); err != nil {
		return err
	}
	if err := ValidPassword(req.NewPassword); err != nil {
		return apiErr(CodeBadRequest, "new password: %v", err)
	}
	if len(req.OldPassword) > MaxPasswordLen {
		return apiErr(CodeBadRequest, "old password longer than %d bytes", MaxPasswordLen)
	}
	now := s.now()
	if _, err := s.checkPassword(r.Context(), c.account.Name, req.OldPassword, sourceOf(r), now); err != nil {
		return err
	}
	hash, err := s.hash.Hash(r.Context(), req.NewPassword)
	if err != nil {
		return internalErr(err)
	}
	if err := s.store.SetPassword(r.Context(), c.account.ID, hash, c.claims.Session, now); err != nil {
		return internalErr(err)
	}
	s.log.Info("password changed; other sessions revoked", "account", c.account.ID)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// CleanSessions deletes the sessions that ended more than SessionRetention
// ago (Serve does it every CleanupEvery) and returns how many went.
func (s *Server) CleanSessions(ctx context.Context) (int64, error) {
	n, err := s.store.DeleteEndedSessions(ctx, s.now().Add(-s.cfg.SessionRetention))
	if err != nil {
		return 0, err
	}
	s.metrics.sessionsDeleted.Add(float64(n))
	return n, nil
}

// cleanLoop runs CleanSessions every CleanupEvery until ctx ends.
func (s *Server) cleanLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.CleanupEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.CleanSessions(ctx); err != nil {
			if ctx.Err() == nil {
				s.log.Warn("cleaning ended sessions failed", "err", err)
			}
		} else if n > 0 {
			s.log.Info("ended sessions deleted", "count", n)
		}
	}
}

// leaseOp runs one lease rule on the region named in the path, as the
// authenticated caller's peer ID.
func (s *Server) leaseOp(w http.ResponseWriter, r *http.Request, op string, withBody bool,
	rule func(rec leases.Record, holder string, id uint64, now time.Time) (leases.Record, bool, error)) error {
	c, err := s.authenticate(r)
	if err != nil {
		return err
	}
	region := r.PathValue("region")
	if err := leases.ValidRegion(region); err != nil {
		return apiErr(CodeBadRequest, "%v", err)
	}
	var req LeaseRequest
	if withBody {
		if err := s.decodeBody(w, r, &req); err != nil {
			return err
		}
		if req.LeaseID == 0 {
			return apiErr(CodeBadRequest, "lease_id missing")
		}
	}
	holder := c.claims.Peer.String()
	now := s.now()
	if op == "acquire" {
		if err := s.entitled(r.Context(), region, c.claims.Peer, now); err != nil {
			s.metrics.leaseOps.WithLabelValues(op, "not_entitled").Inc()
			return err
		}
	}
	var changed bool
	rec, err := s.store.UpdateLease(r.Context(), region, func(rec leases.Record) (leases.Record, bool, error) {
		next, ch, ruleErr := rule(rec, holder, req.LeaseID, now)
		changed = ch
		return next, ch, ruleErr
	})
	switch {
	case errors.Is(err, leases.ErrHeld):
		s.metrics.leaseOps.WithLabelValues(op, CodeLeaseHeld).Inc()
		return apiErr(CodeLeaseHeld, "%v", err)
	case errors.Is(err, leases.ErrLost):
		s.metrics.leaseOps.WithLabelValues(op, CodeLeaseLost).Inc()
		return apiErr(CodeLeaseLost, "%v", err)
	case errors.Is(err, leases.ErrInvalid):
		return apiErr(CodeBadRequest, "%v", err)
	case err != nil:
		return internalErr(err)
	}
	s.metrics.leaseOps.WithLabelValues(op, "ok").Inc()
	if changed && s.cfg.OnLease != nil {
		s.cfg.OnLease(rec)
	}
	if op == "acquire" {
		s.log.Info("lease granted", "region", region, "lease", rec.LeaseID, "holder", holder, "account", c.account.Name)
	} else if op == "release" && changed {
		s.log.Info("lease released", "region", region, "lease", rec.LeaseID, "holder", holder)
	}
	if op == "release" {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	proof, err := leases.SignProof(s.cfg.Key, leases.Proof{Region: region, Holder: rec.Holder, LeaseID: rec.LeaseID, Expires: rec.Expires})
	if err != nil {
		return internalErr(err)
	}
	writeJSON(w, http.StatusOK, LeaseResponse{Region: region, LeaseID: rec.LeaseID, Holder: rec.Holder, TTLMS: s.cfg.LeaseTTL.Milliseconds(), Proof: proof})
	return nil
}

// entitled checks that holder may acquire a region's lease: it is among
// the LeaseCandidates closest of the peers with live tokens (see
// Config.LeaseCandidates). A lease name that names no region
// (leases.PlacementKey) is not checked: peers take a region's
// coordinator only on a proof of that region's lease name, so such a
// lease proves nothing to them.
func (s *Server) entitled(ctx context.Context, region string, holder peer.ID, now time.Time) error {
	key, ok := leases.PlacementKey(region)
	if !ok || s.cfg.LeaseCandidates < 0 {
		return nil
	}
	peers, err := s.livePeerIDs(ctx, now)
	if err != nil {
		return internalErr(err)
	}
	if rank := leases.Rank(key, string(holder), peers); rank >= s.cfg.LeaseCandidates {
		s.log.Info("lease refused: peer not placed near the region", "region", region, "peer", holder, "rank", rank, "limit", s.cfg.LeaseCandidates)
		return refused("lease_not_entitled", CodeNotEntitled,
			"region %s: %d logged-in peers are closer to it than this peer (limit %d)", region, rank, s.cfg.LeaseCandidates)
	}
	return nil
}

func (s *Server) livePeerIDs(ctx context.Context, now time.Time) ([]string, error) {
	s.live.mu.Lock()
	defer s.live.mu.Unlock()
	if s.live.peers != nil && now.Sub(s.live.at) < livePeersTTL && !now.Before(s.live.at) {
		return s.live.peers, nil
	}
	list, err := s.store.LivePeers(ctx, now.Add(-s.cfg.TokenTTL))
	if err != nil {
		return nil, err
	}
	peers := make([]string, 0, len(list))
	for _, p := range list {
		if id, err := peer.Decode(p); err == nil {
			peers = append(peers, string(id))
		}
	}
	s.live.at, s.live.peers = now, peers
	return peers, nil
}

func (s *Server) handleLeaseAcquire(w http.ResponseWriter, r *http.Request) error {
	return s.leaseOp(w, r, "acquire", false, func(rec leases.Record, holder string, _ uint64, now time.Time) (leases.Record, bool, error) {
		next, err := leases.Acquire(rec, holder, now, s.cfg.LeaseTTL)
		return next, err == nil, err
	})
}

func (s *Server) handleLeaseRenew(w http.ResponseWriter, r *http.Request) error {
	return s.leaseOp(w, r, "renew", true, func(rec leases.Record, holder string, id uint64, now time.Time) (leases.Record, bool, error) {
		next, err := leases.Renew(rec, holder, id, now, s.cfg.LeaseTTL)
		return next, err == nil, err
	})
}

func (s *Server) handleLeaseRelease(w http.ResponseWriter, r *http.Request) error {
	return s.leaseOp(w, r, "release", true, func(rec leases.Record, holder string, id uint64, now time.Time) (leases.Record, bool, error) {
		return leases.Release(rec, holder, id, now)
	})
}

// admin checks the admin bearer token in constant time.
func (s *Server) admin(r *http.Request) error {
	if s.cfg.AdminToken == "" {
		return apiErr(CodeForbidden, "admin API disabled (no admin token configured)")
	}
	got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !bearer {
		s.log.Warn("admin call refused: no bearer token", "source", sourceOf(r), "path", r.URL.Path)
		return refused("admin_no_bearer", CodeForbidden, "admin credential required as \"Authorization: Bearer <token>\"")
	}
	a, b := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(s.cfg.AdminToken))
	if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
		s.log.Warn("admin call refused", "source", sourceOf(r), "path", r.URL.Path)
		return refused("admin_bad_token", CodeForbidden, "admin credential required")
	}
	return nil
}

func (s *Server) handleAdminDisable(disabled bool) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := s.admin(r); err != nil {
			return err
		}
		name := r.PathValue("name")
		if err := ValidName(name); err != nil {
			return apiErr(CodeBadRequest, "%v", err)
		}
		a, err := s.store.SetDisabled(r.Context(), name, disabled, s.now())
		if errors.Is(err, ErrNotFound) {
			return apiErr(CodeNotFound, "no account %q", name)
		}
		if err != nil {
			return internalErr(err)
		}
		s.log.Info("admin: account updated", "account", a.ID, "name", a.Name, "disabled", disabled, "source", sourceOf(r))
		writeJSON(w, http.StatusOK, AccountInfo{AccountID: a.ID, Name: a.Name, Disabled: a.Disabled})
		return nil
	}
}

func (s *Server) handleAdminSessions(w http.ResponseWriter, r *http.Request) error {
	if err := s.admin(r); err != nil {
		return err
	}
	name := r.URL.Query().Get("account")
	if name != "" {
		if err := ValidName(name); err != nil {
			return apiErr(CodeBadRequest, "%v", err)
		}
	}
	limit := 100
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			return apiErr(CodeBadRequest, "limit %q: want 1-1000", truncate(l, 20))
		}
		limit = n
	}
	ss, err := s.store.ListSessions(r.Context(), name, s.now(), limit)
	if err != nil {
		return internalErr(err)
	}
	out := make([]SessionInfo, 0, len(ss))
	for _, x := range ss {
		out = append(out, SessionInfo{ID: x.ID, AccountID: x.AccountID, Name: x.AccountName, PeerID: x.PeerID, Source: x.Source,
			Created: x.Created.UTC(), Refreshed: x.Refreshed.UTC(), Expires: x.Expires.UTC()})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) handleAdminLeases(w http.ResponseWriter, r *http.Request) error {
	if err := s.admin(r); err != nil {
		return err
	}
	recs, err := s.store.ListLeases(r.Context())
	if err != nil {
		return internalErr(err)
	}
	now := s.now()
	out := make([]LeaseInfo, 0, len(recs))
	for _, x := range recs {
		out = append(out, LeaseInfo{Region: x.Region, Holder: x.Holder, LeaseID: x.LeaseID, Granted: x.Granted.UTC(), Expires: x.Expires.UTC(), Active: x.ActiveAt(now)})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
