package node

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
)

// DHTMode says whether the node answers DHT queries (server) or only asks
// them (client, for players behind NAT that others cannot dial).
type DHTMode int

const (
	// DHTAuto is the default: the node serves the keyspace unless it finds
	// itself behind a NAT, and then runs as a client. It looks at its first
	// connection to a bootstrap node (which sees it at a translated
	// address) and listens to AutoNAT (whose dial-back fails); AutoNAT's
	// verdict rules, both ways. On a network where neither can tell
	// (loopback, a private LAN, the in-memory network) it stays a server.
	// See natWatch.
	DHTAuto DHTMode = iota
	// DHTServer always serves the keyspace (bootstrap nodes).
	DHTServer
	// DHTClient queries the DHT without joining other peers' tables.
	DHTClient
)

func (m DHTMode) String() string {
	switch m {
	case DHTAuto:
		return "auto"
	case DHTServer:
		return "server"
	case DHTClient:
		return "client"
	}
	return fmt.Sprintf("dhtmode(%d)", int(m))
}

// ParseDHTMode reads "auto", "server" or "client".
func ParseDHTMode(s string) (DHTMode, error) {
	for _, m := range []DHTMode{DHTAuto, DHTServer, DHTClient} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("dht mode %q: want auto, server or client", s)
}

// Option configures a Node. Options are applied in order to one config and
// checked together by validate, so their order does not change the result.
type Option func(*config) error

type config struct {
	dataDir     string
	identity    crypto.PrivKey
	listenAddrs []ma.Multiaddr
	bootstrap   []peer.AddrInfo
	dhtMode     DHTMode
	logger      *slog.Logger
	registerer  prometheus.Registerer
	connLow     int
	connHigh    int
	retry       Backoff
	gossip      pubsub.GossipSubParams
	pubsubOpts  []pubsub.Option
	libp2pOpts  []libp2p.Option
	refresh     time.Duration
	host        host.Host

	everyPeerReachable bool

	set map[string]bool // options given, to refuse duplicates
}

// Backoff is the schedule for re-dialing bootstrap peers: Initial doubles
// up to Max, with up to Jitter (a fraction, 0..1) added at random.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Jitter  float64
}

func (b Backoff) validate() error {
	if b.Initial <= 0 || b.Max < b.Initial {
		return fmt.Errorf("backoff initial %s and max %s: want 0 < initial <= max", b.Initial, b.Max)
	}
	if b.Jitter < 0 || b.Jitter > 1 {
		return fmt.Errorf("backoff jitter %v: want 0..1", b.Jitter)
	}
	return nil
}

// defaults holds every default in one place.
func defaults() config {
	return config{
		listenAddrs: []ma.Multiaddr{
			ma.StringCast("/ip4/0.0.0.0/tcp/4001"),
			ma.StringCast("/ip4/0.0.0.0/udp/4001/quic-v1"),
		},
		dhtMode:  DHTAuto,
		connLow:  160,
		connHigh: 400,
		retry:    Backoff{Initial: 250 * time.Millisecond, Max: 30 * time.Second, Jitter: 0.2},
		gossip:   GameGossipSubParams(),
		refresh:  5 * time.Minute,
		set:      map[string]bool{},
	}
}

func (c *config) once(name string) error {
	if c.set[name] {
		return fmt.Errorf("option %s given twice", name)
	}
	c.set[name] = true
	return nil
}

func (c *config) validate() error {
	var errs []error
	if c.host != nil && (c.dataDir != "" || c.identity != nil || c.set["WithListenAddrs"] || len(c.libp2pOpts) > 0) {
		errs = append(errs, errors.New("WithHost excludes WithDataDir, WithIdentity, WithListenAddrs and WithLibp2pOptions: the host already has them"))
	}
	if c.host == nil && c.dataDir == "" && c.identity == nil {
		errs = append(errs, errors.New("no identity: give WithDataDir or WithIdentity"))
	}
	if len(c.listenAddrs) == 0 {
		errs = append(errs, errors.New("no listen addresses"))
	}
	if c.connLow <= 0 || c.connHigh < c.connLow {
		errs = append(errs, fmt.Errorf("connection limits low %d, high %d: want 0 < low <= high", c.connLow, c.connHigh))
	}
	if err := c.retry.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.refresh <= 0 {
		errs = append(errs, fmt.Errorf("routing table refresh period %s: want > 0", c.refresh))
	}
	return errors.Join(errs...)
}

// WithDataDir keeps the node's identity key (and nothing else yet) in dir.
func WithDataDir(dir string) Option {
	return func(c *config) error {
		if dir == "" {
			return errors.New("data dir is empty")
		}
		if err := c.once("WithDataDir"); err != nil {
			return err
		}
		c.dataDir = filepath.Clean(dir)
		return nil
	}
}

// WithIdentity uses key instead of the data dir's key file.
func WithIdentity(key crypto.PrivKey) Option {
	return func(c *config) error {
		if key == nil {
			return errors.New("identity key is nil")
		}
		if err := c.once("WithIdentity"); err != nil {
			return err
		}
		c.identity = key
		return nil
	}
}

// WithHost builds the node on an existing host (libp2p's mocknet in tests
// and the simulator) instead of creating one. The node takes ownership and
// closes it.
func WithHost(h host.Host) Option {
	return func(c *config) error {
		if h == nil {
			return errors.New("host is nil")
		}
		if err := c.once("WithHost"); err != nil {
			return err
		}
		c.host = h
		return nil
	}
}

// WithListenAddrs replaces the default listeners (TCP and QUIC on port 4001
// of every interface).
func WithListenAddrs(addrs ...ma.Multiaddr) Option {
	return func(c *config) error {
		if err := c.once("WithListenAddrs"); err != nil {
			return err
		}
		if len(addrs) == 0 {
			return errors.New("listen addresses: none given")
		}
		c.listenAddrs = addrs
		return nil
	}
}

// WithBootstrapPeers sets the peers dialed to join the overlay.
func WithBootstrapPeers(peers ...peer.AddrInfo) Option {
	return func(c *config) error {
		if err := c.once("WithBootstrapPeers"); err != nil {
			return err
		}
		c.bootstrap = append([]peer.AddrInfo(nil), peers...)
		return nil
	}
}

// WithDHTMode picks the DHT mode: auto (default), server or client.
func WithDHTMode(m DHTMode) Option {
	return func(c *config) error {
		if m != DHTAuto && m != DHTServer && m != DHTClient {
			return fmt.Errorf("dht mode %d: unknown", m)
		}
		if err := c.once("WithDHTMode"); err != nil {
			return err
		}
		c.dhtMode = m
		return nil
	}
}

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("logger is nil")
		}
		if err := c.once("WithLogger"); err != nil {
			return err
		}
		c.logger = l
		return nil
	}
}

// WithRegisterer registers the node's and libp2p's metrics with r. Without
// it each node keeps a private registry (see Node.Gatherer), so many nodes
// can live in one process.
func WithRegisterer(r prometheus.Registerer) Option {
	return func(c *config) error {
		if r == nil {
			return errors.New("registerer is nil")
		}
		if err := c.once("WithRegisterer"); err != nil {
			return err
		}
		c.registerer = r
		return nil
	}
}

// WithConnLimits sets the connection manager's low and high water marks.
func WithConnLimits(low, high int) Option {
	return func(c *config) error {
		if err := c.once("WithConnLimits"); err != nil {
			return err
		}
		c.connLow, c.connHigh = low, high
		return nil
	}
}

// WithBootstrapBackoff sets the re-dial schedule for bootstrap peers.
func WithBootstrapBackoff(b Backoff) Option {
	return func(c *config) error {
		if err := c.once("WithBootstrapBackoff"); err != nil {
			return err
		}
		c.retry = b
		return nil
	}
}

// WithGossipSubParams replaces GameGossipSubParams.
func WithGossipSubParams(p pubsub.GossipSubParams) Option {
	return func(c *config) error {
		if err := c.once("WithGossipSubParams"); err != nil {
			return err
		}
		c.gossip = p
		return nil
	}
}

// WithPubSubOptions adds options to the gossipsub router (peer scoring,
// tracers); the node's own options come first.
func WithPubSubOptions(opts ...pubsub.Option) Option {
	return func(c *config) error {
		c.pubsubOpts = append(c.pubsubOpts, opts...)
		return nil
	}
}

// WithLibp2pOptions adds host options (the bootstrap service adds the relay
// and AutoNAT services this way).
func WithLibp2pOptions(opts ...libp2p.Option) Option {
	return func(c *config) error {
		c.libp2pOpts = append(c.libp2pOpts, opts...)
		return nil
	}
}

// WithEveryPeerReachable declares that every peer of the network can dial
// every other, so that CanCoordinate need not tell peers behind NAT by
// their DHT client mode: for libp2p's in-memory network in the simulator,
// whose peers run the DHT in client mode to save memory, not because of a
// NAT. Never for a real network.
func WithEveryPeerReachable() Option {
	return func(c *config) error {
		if err := c.once("WithEveryPeerReachable"); err != nil {
			return err
		}
		c.everyPeerReachable = true
		return nil
	}
}

// WithRoutingTableRefresh sets how often the DHT refreshes its table.
func WithRoutingTableRefresh(d time.Duration) Option {
	return func(c *config) error {
		if err := c.once("WithRoutingTableRefresh"); err != nil {
			return err
		}
		c.refresh = d
		return nil
	}
}

// GameGossipSubParams are gossipsub's parameters tuned for position traffic:
// small messages at 5-10 Hz per player where a late update is worthless.
//
//   - Heartbeat 300 ms (default 1 s): meshes repair and grafts of players who
//     just crossed into a region happen within two update intervals.
//   - History 4 heartbeats kept, 2 gossiped (1.2 s / 0.6 s): gossip can still
//     fill a gap while the update matters; older positions are superseded.
//   - Fanout TTL 10 s: a peer publishing into a neighbour region it does
//     not subscribe to keeps its fanout peers across short pauses.
//
// Flood publishing stays on (see New): a player's own update goes straight
// to every subscriber it knows, one hop, which matters more for latency than
// the extra copies cost in a region of tens of players.
func GameGossipSubParams() pubsub.GossipSubParams {
	p := pubsub.DefaultGossipSubParams()
	p.HeartbeatInterval = 300 * time.Millisecond
	p.HeartbeatInitialDelay = 50 * time.Millisecond
	p.HistoryLength = 4
	p.HistoryGossip = 2
	p.FanoutTTL = 10 * time.Second
	return p
}

// Queue sizes of the pubsub router. A player in a busy region receives a
// burst of updates each interval from every neighbour region; the defaults
// (32) drop messages silently at around 30 players per interest area.
const (
	pubsubPeerOutboundQueue = 512
	pubsubValidateQueue     = 1024
	pubsubMaxMessageSize    = 256 << 10
)
