package position

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"

	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/regions"
)

// TestRendezvousAnswer checks whom a coordinator names at rendezvous: a
// peer in the region gets everyone registered for it, a peer following it
// from around only those in it, and a peer that walks in or out of the
// region is answered by what its latest registration says.
func TestRendezvousAnswer(t *testing.T) {
	mn := mocknet.New()
	t.Cleanup(func() { _ = mn.Close() })
	h, err := mn.GenPeer()
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.New(context.Background(), node.WithHost(h), node.WithDHTMode(node.DHTClient), node.WithRoutingTableRefresh(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	s, err := New(n, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	c := regions.Coord{X: 1, Y: 1}
	in1, in2, out1, out2 := peer.ID("in-1"), peer.ID("in-2"), peer.ID("out-1"), peer.ID("out-2")
	names := func(m *Members) []peer.ID {
		var ids []peer.ID
		for _, mem := range m.GetMembers() {
			ids = append(ids, peer.ID(mem.Id))
		}
		slices.Sort(ids)
		return ids
	}
	steps := []struct {
		who    peer.ID
		member bool
		want   []peer.ID
	}{
		{in1, true, nil},
		{out1, false, []peer.ID{in1}},
		{in2, true, []peer.ID{in1, out1}},
		{out2, false, []peer.ID{in1, in2}},
		{out1, true, []peer.ID{in1, in2, out2}}, // walked in
		{in2, false, []peer.ID{in1, out1}},      // walked out
		{out2, false, []peer.ID{in1, out1}},
	}
	for i, st := range steps {
		if got := names(s.register(c, st.who, st.member)); !slices.Equal(got, st.want) {
			t.Errorf("step %d: %s (member %v) is told %v, want %v", i, st.who, st.member, got, st.want)
		}
	}
}
