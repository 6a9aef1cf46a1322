package position

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	"github.com/overworld-p2p/overworld/regions"
)

// A rendezvous connects to all the members it was told of within its
// timeout even when each connection takes a while: on links of 100 ms a
// connection (with identify) takes a few round trips, and 24 of them one
// after the other would take far longer than the second allowed here.
// Virtual time makes the links' latency exact.
func TestConnectMembersWithinTheRendezvousTimeout(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		mn := mocknet.New()
		defer mn.Close()
		mn.SetLinkDefaults(mocknet.LinkOptions{Latency: 100 * time.Millisecond})
		self, err := mn.GenPeer()
		if err != nil {
			t.Fatal(err)
		}
		var members []*Member
		for range 24 {
			h, err := mn.GenPeer()
			if err != nil {
				t.Fatal(err)
			}
			mem := &Member{Id: []byte(h.ID())}
			for _, a := range h.Addrs() {
				mem.Addrs = append(mem.Addrs, a.Bytes())
			}
			members = append(members, mem)
		}
		if err := mn.LinkAll(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		connectMembers(ctx, self, slog.New(slog.DiscardHandler), regions.Coord{}, members)
		for i, mem := range members {
			if c := self.Network().Connectedness(peer.ID(mem.Id)); c != network.Connected {
				t.Errorf("member %d: %v after the rendezvous", i, c)
			}
		}
	})
}
