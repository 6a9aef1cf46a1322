package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/net/connmgr"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"
)

// DHTProtocolPrefix keeps overworld's DHT apart from IPFS's public one.
const DHTProtocolPrefix = "/overworld"

// DHTProtocol is the protocol a peer in DHT server mode answers and
// advertises (through identify); a peer in client mode does not.
const DHTProtocol = DHTProtocolPrefix + "/kad/1.0.0"

// Node is one overworld process's presence on the overlay.
type Node struct {
	host     host.Host
	dht      *dht.IpfsDHT
	pubsub   *pubsub.PubSub
	log      *slog.Logger
	gatherer prometheus.Gatherer
	metrics  *metrics
	cfg      config

	nat      *natWatch     // DHTAuto only
	joined   chan struct{} // closed when the routing table first holds a peer
	joinOnce sync.Once
	join     joinState

	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed sync.Once
	err    error
}

// New builds and starts a node. The node runs until Close; ctx only bounds
// the construction.
func New(ctx context.Context, opts ...Option) (_ *Node, err error) {
	cfg := defaults()
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("node option: %w", err)
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("node config: %w", err)
	}
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	var gatherer prometheus.Gatherer
	if cfg.registerer == nil {
		reg := prometheus.NewRegistry()
		cfg.registerer, gatherer = reg, reg
	} else if g, ok := cfg.registerer.(prometheus.Gatherer); ok {
		gatherer = g
	}

	n := &Node{cfg: cfg, log: cfg.logger, gatherer: gatherer, joined: make(chan struct{})}
	// Whatever New opened is closed again if a later step fails.
	defer func() {
		if err != nil {
			n.closeParts()
		}
	}()

	if cfg.host != nil {
		n.host = cfg.host
	} else if n.host, err = newHost(cfg); err != nil {
		return nil, err
	}

	if cfg.dhtMode == DHTAuto {
		// Before the DHT and the first dial, so that no identification
		// goes unseen.
		if err := n.startNATWatch(); err != nil {
			return nil, fmt.Errorf("nat watch: %w", err)
		}
	}
	mode := dht.ModeAutoServer
	switch cfg.dhtMode {
	case DHTServer:
		mode = dht.ModeServer
	case DHTClient:
		mode = dht.ModeClient
	}
	n.dht, err = dht.New(n.host,
		dht.Mode(mode),
		dht.ProtocolPrefix(DHTProtocolPrefix),
		dht.DisableProviders(),
		dht.DisableValues(),
		dht.BootstrapPeers(cfg.bootstrap...),
		dht.RoutingTableRefreshPeriod(cfg.refresh),
	)
	if err != nil {
		return nil, fmt.Errorf("dht: %w", err)
	}

	n.metrics, err = newMetrics(cfg.registerer, n)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	psOpts := []pubsub.Option{
		pubsub.WithGossipSubParams(cfg.gossip),
		pubsub.WithFloodPublish(true),
		pubsub.WithPeerOutboundQueueSize(pubsubPeerOutboundQueue),
		pubsub.WithValidateQueueSize(pubsubValidateQueue),
		pubsub.WithMaxMessageSize(pubsubMaxMessageSize),
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithRawTracer(n.metrics.tracer()),
	}
	psOpts = append(psOpts, cfg.pubsubOpts...)
	runCtx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	n.pubsub, err = pubsub.NewGossipSub(runCtx, n.host, psOpts...)
	if err != nil {
		return nil, fmt.Errorf("gossipsub: %w", err)
	}

	if n.nat != nil {
		n.nat.running = true
		n.wg.Add(1)
		go n.natLoop(runCtx)
	}
	n.wg.Add(2)
	go n.joinLoop(runCtx)
	go n.metrics.sampleLoop(runCtx, &n.wg)
	n.log.Info("node started", "peer", n.host.ID(), "addrs", n.Addrs(), "dht", cfg.dhtMode)
	return n, nil
}

// Host is the libp2p host.
func (n *Node) Host() host.Host { return n.host }

// ID is the node's peer ID.
func (n *Node) ID() peer.ID { return n.host.ID() }

// DHT is the Kademlia DHT.
func (n *Node) DHT() *dht.IpfsDHT { return n.dht }

// PubSub is the gossipsub router.
func (n *Node) PubSub() *pubsub.PubSub { return n.pubsub }

// Logger is the node's logger, for layers built on it.
func (n *Node) Logger() *slog.Logger { return n.log }

// Gatherer serves the node's metrics when it keeps a private registry
// (no WithRegisterer), or the given registerer if it is also a Gatherer.
func (n *Node) Gatherer() prometheus.Gatherer { return n.gatherer }

// Addrs are the node's listen addresses with its /p2p/ID appended: what
// another peer passes as a bootstrap address.
func (n *Node) Addrs() []ma.Multiaddr {
	info := peer.AddrInfo{ID: n.host.ID(), Addrs: n.host.Addrs()}
	addrs, err := peer.AddrInfoToP2pAddrs(&info)
	if err != nil {
		return nil
	}
	return addrs
}

// AddrInfo is the node's ID and addresses.
func (n *Node) AddrInfo() peer.AddrInfo {
	return peer.AddrInfo{ID: n.host.ID(), Addrs: n.host.Addrs()}
}

// Close stops the node: pubsub and the joiner first, then the DHT, then the
// host. It is safe to call more than once.
func (n *Node) Close() error {
	n.closed.Do(func() {
		n.err = n.closeParts()
		n.log.Info("node stopped", "peer", n.host.ID())
	})
	return n.err
}

func (n *Node) closeParts() error {
	if n.cancel != nil {
		n.cancel()
	}
	n.wg.Wait()
	if n.nat != nil && !n.nat.running { // New failed before the loop that closes them
		n.nat.sub.Close()
		n.nat.emit.Close()
	}
	var errs []error
	if n.dht != nil {
		if err := n.dht.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close dht: %w", err))
		}
	}
	if n.host != nil {
		if err := n.host.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close host: %w", err))
		}
	}
	if n.metrics != nil {
		n.metrics.unregister()
	}
	return errors.Join(errs...)
}

// newHost creates the libp2p host from the config: identity, listeners,
// transports, security, muxers, resource and connection managers.
func newHost(cfg config) (host.Host, error) {
	var err error
	key := cfg.identity
	if key == nil {
		if key, err = LoadOrCreateIdentity(filepath.Join(cfg.dataDir, IdentityFileName)); err != nil {
			return nil, err
		}
	}
	limiter := rcmgr.NewFixedLimiter(rcmgr.DefaultLimits.AutoScale())
	rm, err := rcmgr.NewResourceManager(limiter)
	if err != nil {
		return nil, fmt.Errorf("resource manager: %w", err)
	}
	cm, err := connmgr.NewConnManager(cfg.connLow, cfg.connHigh)
	if err != nil {
		rm.Close()
		return nil, fmt.Errorf("connection manager: %w", err)
	}
	hostOpts := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.ListenAddrs(cfg.listenAddrs...),
		libp2p.DefaultTransports, // TCP, QUIC, WebSocket, WebTransport
		libp2p.DefaultSecurity,   // Noise and TLS; Noise is preferred
		libp2p.DefaultMuxers,     // yamux
		libp2p.ResourceManager(rm),
		libp2p.ConnectionManager(cm),
		libp2p.PrometheusRegisterer(cfg.registerer),
		libp2p.EnableHolePunching(),
		libp2p.UserAgent("overworld/" + Version),
	}
	if len(cfg.bootstrap) > 0 {
		// Players behind NAT reserve a slot on the bootstrap nodes' relays.
		hostOpts = append(hostOpts, libp2p.EnableAutoRelayWithStaticRelays(cfg.bootstrap))
	}
	hostOpts = append(hostOpts, cfg.libp2pOpts...)
	h, err := libp2p.New(hostOpts...)
	if err != nil {
		cm.Close()
		rm.Close()
		return nil, fmt.Errorf("libp2p host: %w", err)
	}
	return h, nil
}
