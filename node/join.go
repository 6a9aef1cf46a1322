package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// ParseBootstrapAddrs parses full multiaddrs (with /p2p/ID) of bootstrap
// peers, merging addresses of the same peer. Empty entries are skipped, so a
// comma-separated flag may end with a comma.
func ParseBootstrapAddrs(addrs []string) ([]peer.AddrInfo, error) {
	var mas []ma.Multiaddr
	for _, s := range addrs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			return nil, fmt.Errorf("bootstrap address %q: %w", s, err)
		}
		if _, err := m.ValueForProtocol(ma.P_P2P); err != nil {
			return nil, fmt.Errorf("bootstrap address %q: no /p2p/<peer ID> part", s)
		}
		mas = append(mas, m)
	}
	infos, err := peer.AddrInfosFromP2pAddrs(mas...)
	if err != nil {
		return nil, fmt.Errorf("bootstrap addresses: %w", err)
	}
	return infos, nil
}

// joinState is what the joiner knows about its attempts, for WaitJoined's
// error and the logs.
type joinState struct {
	mu       sync.Mutex
	attempts int
	lastErr  error
}

// dialTimeout bounds one dial of one bootstrap peer.
const dialTimeout = 10 * time.Second

// joinLoop dials the bootstrap peers until the node has a peer in its
// routing table, backing off between rounds, and dials again whenever the
// node later finds itself without any connection.
func (n *Node) joinLoop(ctx context.Context) {
	defer n.wg.Done()
	delay := n.cfg.retry.Initial
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	isolated := true
	var settle []time.Time // pending follow-up refreshes after a join
	for {
		if n.dht.RoutingTable().Size() > 0 {
			n.joinOnce.Do(func() {
				close(n.joined)
				n.log.Info("joined overlay", "peer", n.host.ID(), "routing_table", n.dht.RoutingTable().Size())
			})
		}
		if len(n.cfg.bootstrap) > 0 && isolated {
			if err := n.dialBootstrap(ctx); err != nil {
				n.join.mu.Lock()
				n.join.attempts++
				n.join.lastErr = err
				attempts := n.join.attempts
				n.join.mu.Unlock()
				if ctx.Err() != nil {
					return
				}
				wait := jittered(delay, n.cfg.retry.Jitter)
				n.log.Warn("bootstrap dial failed; retrying", "attempt", attempts, "retry_in", wait.Round(time.Millisecond), "err", err)
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				delay = min(2*delay, n.cfg.retry.Max)
				continue
			}
			delay = n.cfg.retry.Initial
			isolated = false
			// Fill the table now rather than at the next periodic refresh.
			refreshed := n.dht.RefreshRoutingTable()
			select {
			case <-ctx.Done():
				return
			case <-refreshed:
			}
			settle = settleSchedule(time.Now())
		}
		if len(settle) > 0 && time.Now().After(settle[0]) {
			// Peers that joined just before or after us only learn of us
			// when someone looks us up; a few early refreshes make the
			// tables of a young overlay agree within seconds instead of at
			// the next periodic refresh. The result channel is buffered.
			n.dht.ForceRefresh()
			settle = settle[1:]
		}
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
		}
		isolated = len(n.host.Network().Peers()) == 0
	}
}

// dialBootstrap connects to every bootstrap peer at once and succeeds if
// any connection comes up.
func (n *Node) dialBootstrap(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make([]error, len(n.cfg.bootstrap))
	for i, info := range n.cfg.bootstrap {
		if info.ID == n.host.ID() {
			errs[i] = errSelfBootstrap
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dctx, cancel := context.WithTimeout(ctx, dialTimeout)
			defer cancel()
			if err := n.host.Connect(dctx, info); err != nil {
				errs[i] = fmt.Errorf("dial %s: %w", info.ID, err)
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err == nil {
			n.log.Debug("connected to bootstrap peer", "bootstrap", n.cfg.bootstrap[i].ID)
			return nil
		}
	}
	return errors.Join(errs...)
}

// settleSchedule is when to refresh the routing table again after a join.
func settleSchedule(joined time.Time) []time.Time {
	offsets := []time.Duration{time.Second, 3 * time.Second, 10 * time.Second, 30 * time.Second}
	out := make([]time.Time, len(offsets))
	for i, o := range offsets {
		out[i] = joined.Add(o)
	}
	return out
}

var errSelfBootstrap = errors.New("bootstrap peer is this node itself")

func jittered(d time.Duration, jitter float64) time.Duration {
	return d + time.Duration(rand.Float64()*jitter*float64(d))
}

// Joined is closed once the node's routing table first holds a peer.
func (n *Node) Joined() <-chan struct{} { return n.joined }

// WaitJoined blocks until the node has joined the overlay or ctx ends; then
// it says how many bootstrap rounds failed and why the last one did.
func (n *Node) WaitJoined(ctx context.Context) error {
	select {
	case <-n.joined:
		return nil
	case <-ctx.Done():
	}
	n.join.mu.Lock()
	defer n.join.mu.Unlock()
	if len(n.cfg.bootstrap) == 0 {
		return fmt.Errorf("join overlay: no bootstrap peers configured and no peer found us: %w", ctx.Err())
	}
	if n.join.lastErr == nil {
		return fmt.Errorf("join overlay: connected but the routing table is still empty: %w", ctx.Err())
	}
	return fmt.Errorf("join overlay: %d bootstrap rounds failed, last: %w", n.join.attempts, n.join.lastErr)
}

// JoinAttempts is how many bootstrap rounds have failed so far.
func (n *Node) JoinAttempts() int {
	n.join.mu.Lock()
	defer n.join.mu.Unlock()
	return n.join.attempts
}

// Connectedness reports whether the node is connected to p.
func (n *Node) Connectedness(p peer.ID) network.Connectedness {
	return n.host.Network().Connectedness(p)
}
