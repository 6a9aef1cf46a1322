package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/overworld-p2p/overworld/bootstrap/master/ratelimit"
)

// ResponderConfig configures a Responder. Zero fields take the defaults
// listed.
type ResponderConfig struct {
	// GameID and MirrorID name the mirror in the master's registry; the
	// finder refuses pongs that name another. SetIdentity changes them
	// (a mirror learns its ID when the authority admits it).
	GameID   string
	MirrorID uint32
	// Load reports the mirror's load in permille (0 idle, 1000 full); nil
	// reports 0. It is called once per pong and must be cheap.
	Load func() uint32
	// PerSource limits pongs per source address (default 100, then 50/s:
	// a finder sends 5 pings a run, and players behind one NAT share an
	// address); MaxSources bounds that table (default 4096). Total caps
	// all pongs (default 2000, then 2000/s).
	PerSource  ratelimit.Rate
	MaxSources int
	Total      ratelimit.Rate
	// Logger; default slog.Default().
	Logger *slog.Logger
	// Registerer, if set, receives the responder's metrics.
	Registerer prometheus.Registerer
}

// Validate fills in defaults and checks the values.
func (c *ResponderConfig) Validate() error {
	if c.PerSource == (ratelimit.Rate{}) {
		c.PerSource = ratelimit.Rate{Every: 20 * time.Millisecond, Burst: 100}
	}
	if c.MaxSources == 0 {
		c.MaxSources = 4096
	}
	if c.Total == (ratelimit.Rate{}) {
		c.Total = ratelimit.Rate{Every: 500 * time.Microsecond, Burst: 2000}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if err := validIdentity(c.GameID); err != nil {
		return err
	}
	if err := c.PerSource.Validate(); err != nil {
		return fmt.Errorf("per-source limit: %w", err)
	}
	if err := c.Total.Validate(); err != nil {
		return fmt.Errorf("total limit: %w", err)
	}
	if c.MaxSources < 1 {
		return fmt.Errorf("max sources %d below 1", c.MaxSources)
	}
	return nil
}

func validIdentity(gameID string) error {
	if len(gameID) > MaxGameIDLen {
		return fmt.Errorf("game id of %d bytes over %d", len(gameID), MaxGameIDLen)
	}
	return nil
}

// Responder answers pings for one mirror: every mirror runs one so that
// finders can measure their RTT to it. It answers at once, never with more
// bytes than the ping had, and within per-source and total rate limits.
type Responder struct {
	cfg       ResponderConfig
	identity  atomic.Pointer[identity]
	perSource *ratelimit.PerKey
	total     *rate.Limiter
	log       *slog.Logger
	pongs     prometheus.Counter
	refused   *prometheus.CounterVec
}

type identity struct {
	gameID   string
	mirrorID uint32
}

// NewResponder checks cfg and returns a responder; Serve runs it.
func NewResponder(cfg ResponderConfig) (*Responder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("probe responder: %w", err)
	}
	per, err := ratelimit.New(cfg.PerSource, cfg.MaxSources)
	if err != nil {
		return nil, fmt.Errorf("probe responder: %w", err)
	}
	r := &Responder{
		cfg: cfg, perSource: per, total: rate.NewLimiter(rate.Every(cfg.Total.Every), cfg.Total.Burst), log: cfg.Logger,
		pongs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "overworld_probe_pongs_total",
			Help: "Pings answered by this mirror's probe responder.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "overworld_probe_refused_total",
			Help: "Datagrams the probe responder did not answer, by reason: short, oversize, not_probe, malformed, rate_limited, overloaded.",
		}, []string{"reason"}),
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{r.pongs, r.refused} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("probe responder metrics: %w", err)
			}
		}
	}
	r.identity.Store(&identity{cfg.GameID, cfg.MirrorID})
	return r, nil
}

// SetIdentity changes the game and mirror the pongs name.
func (r *Responder) SetIdentity(gameID string, mirrorID uint32) error {
	if err := validIdentity(gameID); err != nil {
		return fmt.Errorf("probe responder: %w", err)
	}
	r.identity.Store(&identity{gameID, mirrorID})
	return nil
}

// Refusal reasons of answer, as the metric labels them.
const (
	refusedShort       = "short"
	refusedOversize    = "oversize"
	refusedNotProbe    = "not_probe"
	refusedMalformed   = "malformed"
	refusedRateLimited = "rate_limited"
	refusedOverloaded  = "overloaded"
)

// answer is the whole protocol of a responder: one datagram from source
// at now in, the pong to send back or the reason for silence out.
func (r *Responder) answer(datagram []byte, source string, now time.Time) ([]byte, string) {
	ping, err := DecodePing(datagram)
	switch {
	case errors.Is(err, ErrShort):
		return nil, refusedShort
	case errors.Is(err, ErrOversize):
		return nil, refusedOversize
	case errors.Is(err, ErrNotProbe):
		return nil, refusedNotProbe
	case err != nil:
		return nil, refusedMalformed
	}
	if !r.perSource.Allow(source, now) {
		return nil, refusedRateLimited
	}
	if !r.total.AllowN(now, 1) {
		return nil, refusedOverloaded
	}
	id := r.identity.Load()
	var load uint32
	if r.cfg.Load != nil {
		load = min(r.cfg.Load(), 1000)
	}
	pong, err := EncodePong(&Pong{Nonce: ping.Nonce, GameId: id.gameID, MirrorId: id.mirrorID, LoadPermille: load})
	if err != nil || len(pong) > len(datagram) {
		// Cannot happen with a valid identity; silence beats amplifying.
		return nil, refusedMalformed
	}
	return pong, ""
}

// Serve answers pings on conn until ctx ends, then returns nil; the caller
// closes conn. A read error other than the stop returns it.
func (r *Responder) Serve(ctx context.Context, conn net.PacketConn) error {
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	r.log.Info("probe responder listening", "addr", conn.LocalAddr().String(), "game", r.identity.Load().gameID, "mirror", r.identity.Load().mirrorID)
	buf := make([]byte, MaxPacketSize+1) // one byte more shows an oversized datagram
	for {
		n, from, err := conn.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("probe responder: %w", err)
		}
		pong, refused := r.answer(buf[:n], sourceKey(from), time.Now())
		if refused != "" {
			r.refused.WithLabelValues(refused).Inc()
			continue
		}
		if _, err := conn.WriteTo(pong, from); err != nil {
			r.log.Debug("probe pong not sent", "to", from.String(), "err", err)
			continue
		}
		r.pongs.Inc()
	}
}

// sourceKey is the rate-limit key of a datagram's source: its IP, so
// that hopping ports gains nothing.
func sourceKey(a net.Addr) string {
	if u, ok := a.(*net.UDPAddr); ok {
		return u.IP.String()
	}
	return a.String()
}
