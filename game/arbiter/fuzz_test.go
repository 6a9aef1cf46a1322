package arbiter_test

import (
	"math/rand"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/game/arbiter"
	pb "github.com/overworld-p2p/overworld/game/arbiter/arbiterpb"
)

// sampleMessages runs a short game (joins, claims, chat, a hand-off, a
// leave) and returns every message it sent: the fuzzers' seed corpus.
func sampleMessages(tb testing.TB) [][]byte {
	tb.Helper()
	net := newSimNet(3)
	var out [][]byte
	net.onSend = func(_ *simNode, b []byte) { out = append(out, b) }
	for i := 1; i <= 4; i++ {
		net.add(arbiter.MemberID(i), arbiter.Config{MaxMembers: 3})
	}
	api := func(n *simNode, r arbiter.Ready, err error) {
		if err != nil {
			tb.Fatal(err)
		}
		net.apply(n, r, "api")
	}
	n1, n2, n3, n4 := net.nodes[0], net.nodes[1], net.nodes[2], net.nodes[3]
	r, err := n1.node.Create(net.now)
	api(n1, r, err)
	for _, n := range []*simNode{n2, n3, n4} {
		r, err := n.node.Join(net.now, 2)
		api(n, r, err)
	}
	net.run(net.now.Add(300 * time.Millisecond))
	for i := range 12 {
		r, err := n2.node.Claim(net.now, arbiter.ResourceID(i%7))
		api(n2, r, err)
		net.run(net.now.Add(30 * time.Millisecond))
	}
	r, err = n3.node.Chat(net.now, true, "go left")
	api(n3, r, err)
	if err := n2.node.SetDutyState([]byte("next-id=4")); err == nil {
		net.run(net.now.Add(10 * time.Millisecond))
	}
	r, err = n3.node.Leave(net.now)
	api(n3, r, err)
	net.run(net.now.Add(time.Second))
	n1.frozen = true
	net.run(net.now.Add(2 * time.Second))
	return out
}

// FuzzDecode: any bytes decode to a valid, bounded message or an error;
// never a panic.
func FuzzDecode(f *testing.F) {
	for _, b := range sampleMessages(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := arbiter.Decode(b)
		if err != nil {
			return
		}
		if len(b) > arbiter.MaxMessageBytes {
			t.Fatalf("accepted %d bytes", len(b))
		}
		if v := env.GetAdmit().GetView(); len(v.GetMembers()) > arbiter.MaxMembersLimit {
			t.Fatalf("view of %d members", len(v.GetMembers()))
		}
		if n := len(env.GetPing().GetRepairs()) + len(env.GetPong().GetGrants()); n > arbiter.MaxRepairs {
			t.Fatalf("%d grants carried", n)
		}
		if len(env.GetChat().GetText()) > arbiter.MaxChatBytes || len(env.GetHandoff().GetDutyState()) > arbiter.MaxDutyState {
			t.Fatal("text or duty state over its bound")
		}
		_ = arbiter.FormatMessage(b)
	})
}

// FuzzStep feeds arbitrary messages (and mutated real ones) to the arbiter
// on duty and to a member of a running game: no panic, and output and
// state stay bounded.
func FuzzStep(f *testing.F) {
	for _, b := range sampleMessages(f) {
		f.Add(b, b, uint8(2))
	}
	f.Add([]byte{}, []byte{0xff}, uint8(0))
	f.Fuzz(func(t *testing.T, a, b []byte, from uint8) {
		net := threePlayers(1, arbiter.Config{MaxMembers: 6, NeverDrop: true})
		r, _ := net.nodes[1].node.Claim(net.now, 9)
		net.apply(net.nodes[1], r, "api")
		for _, target := range net.nodes[:2] { // the arbiter, a member
			n := target.node
			now := net.now
			for i, in := range [][]byte{a, b, a} {
				now = now.Add(time.Duration(i) * 7 * time.Millisecond)
				r, _ := n.Step(now, arbiter.MemberID(from%5), in)
				checkReady(t, r)
				checkReady(t, n.Tick(now.Add(time.Second)))
			}
			st := n.Stats()
			c := n.Config()
			if st.View > arbiter.MaxMembersLimit || st.Heard > 2*arbiter.MaxMembersLimit ||
				st.Log > 5*c.LogWindow || st.Queued > c.MaxQueuedClaims || st.OwnClaims > c.MaxOwnClaims {
				t.Fatalf("state out of bounds: %+v", st)
			}
		}
	})
}

// threePlayers returns a running game of three: 1 created it, 2 and 3
// joined, and the arbiter holds its lease.
func threePlayers(seed int64, cfg arbiter.Config) *simNet {
	net := newSimNet(seed)
	for i := 1; i <= 3; i++ {
		net.add(arbiter.MemberID(i), cfg)
	}
	r, _ := net.nodes[0].node.Create(net.now)
	net.apply(net.nodes[0], r, "api")
	for _, n := range net.nodes[1:] {
		r, _ := n.node.Join(net.now, 0)
		net.apply(n, r, "api")
	}
	net.run(net.now.Add(300 * time.Millisecond))
	return net
}

func checkReady(t *testing.T, r arbiter.Ready) {
	t.Helper()
	if len(r.Messages) > 2*arbiter.MaxMembersLimit+64+16 || len(r.Events) > 4*arbiter.MaxMembersLimit+64+16 {
		t.Fatalf("one call produced %d messages and %d events", len(r.Messages), len(r.Events))
	}
	for _, m := range r.Messages {
		if _, err := arbiter.Decode(m); err != nil {
			t.Fatalf("the node sent a message it would refuse: %v", err)
		}
	}
}

// FuzzStepMessages drives a running game's arbiter and a member with
// random but well-formed messages, stamped near the receiver's clock so
// that they reach the protocol's logic instead of the decoder's checks:
// forged and stale stamps, foreign grants, hand-offs, view changes, PONG
// carries, JOINs. No panic, bounded output and state, and the arbiter never
// grants one resource to two members itself.
func FuzzStepMessages(f *testing.F) {
	for seed := range int64(8) {
		f.Add(seed, uint8(40))
	}
	f.Fuzz(func(t *testing.T, seed int64, count uint8) {
		rng := rand.New(rand.NewSource(seed))
		cfg := arbiter.Config{MaxMembers: 5, NeverDrop: true}
		net := threePlayers(seed, cfg)
		granted := map[uint64]uint32{}
		now := net.now
		for range count {
			target := net.nodes[rng.Intn(2)]
			n := target.node
			now = now.Add(time.Duration(rng.Intn(200)) * time.Millisecond)
			b := randomMessage(rng, n.Status())
			r, _ := n.Step(now, 0, b)
			checkReady(t, r)
			if rng.Intn(4) == 0 {
				checkReady(t, n.Tick(now))
			}
			if rng.Intn(3) == 0 && n.Status().Phase == arbiter.PhaseMember {
				r, _ := n.Claim(now, arbiter.ResourceID(rng.Intn(6)))
				checkReady(t, r)
			}
			for _, m := range r.Messages {
				env, _ := arbiter.Decode(m)
				if g := env.GetGrant().GetEntry(); g != nil && stampOfPB(g.GetStamp()) == stampOfPB(env.GetStamp()) {
					if to, ok := granted[g.GetResource()]; ok && to != g.GetTo() && target.id == 1 {
						t.Fatalf("arbiter granted resource %d to %d and to %d", g.GetResource(), to, g.GetTo())
					}
					granted[g.GetResource()] = g.GetTo()
				}
			}
			st := n.Stats()
			if st.View > arbiter.MaxMembersLimit || st.Heard > 2*arbiter.MaxMembersLimit || st.Log > 5*cfg.LogWindow+5*256 {
				t.Fatalf("state out of bounds: %+v", st)
			}
		}
	})
}

// randomMessage builds a well-formed message of a random kind, stamped
// near st.
func randomMessage(rng *rand.Rand, st arbiter.Status) []byte {
	near := func(v uint64) uint64 {
		d := uint64(rng.Intn(3))
		if rng.Intn(2) == 0 && v >= d {
			return v - d
		}
		return v + d
	}
	size := max(len(st.View), 1)
	sender := uint32(1 + rng.Intn(4))
	// Epochs are count<<32 | author.
	epoch := max(near(st.Stamp.Epoch>>32), 1)<<32 | uint64(st.Stamp.Epoch&0xffffffff)
	if rng.Intn(3) == 0 {
		epoch = epoch&^0xffffffff | uint64(1+rng.Intn(4))
	}
	stamp := &pb.Stamp{Epoch: epoch, Lap: near(st.Stamp.Lap), Ts: uint32(rng.Intn(size * arbiter.RangeSize))}
	newEpoch := (epoch>>32+1)<<32 | uint64(sender)
	member := func() uint32 { return uint32(1 + rng.Intn(5)) }
	seq := func() uint64 { return near(st.GrantSeq) + 1 }
	entry := func() *pb.GrantEntry {
		return &pb.GrantEntry{Seq: seq(), Stamp: stamp, Resource: uint64(rng.Intn(6)), To: member()}
	}
	view := func(extra int) *pb.View {
		v := &pb.View{Epoch: newEpoch}
		for _, m := range st.View {
			v.Members = append(v.Members, &pb.Member{Id: uint32(m.ID), Team: uint32(m.Team), Nonce: 1})
		}
		for i := range extra {
			v.Members = append(v.Members, &pb.Member{Id: uint32(10 + i), Team: 1, Nonce: 7})
		}
		if len(v.Members) == 0 {
			v.Members = append(v.Members, &pb.Member{Id: sender, Team: 1, Nonce: 1})
		}
		return v
	}
	env := &pb.Envelope{Game: st.Game, Sender: sender, Stamp: stamp}
	next := &pb.Stamp{Epoch: []uint64{epoch, newEpoch}[rng.Intn(2)], Lap: near(stamp.Lap), Ts: uint32(rng.Intn(size) * arbiter.RangeSize)}
	switch rng.Intn(13) {
	case 0:
		env = &pb.Envelope{Game: st.Game, Body: &pb.Envelope_Join{Join: &pb.Join{Nonce: uint32(1 + rng.Intn(3)), Id: uint32(rng.Intn(6)), Team: uint32(rng.Intn(4))}}}
	case 1:
		env.Body = &pb.Envelope_Admit{Admit: &pb.Admit{Nonce: 1, Id: 10, Team: 1, View: view(1), Next: next, GrantSeq: seq()}}
	case 2:
		env.Body = &pb.Envelope_Leave{Leave: &pb.Leave{}}
	case 3:
		reason := pb.ViewChange_Reason(1 + rng.Intn(4))
		env.Body = &pb.Envelope_View{View: &pb.ViewChange{Reason: reason, Subject: member(), View: view(0), Next: next, GrantSeq: seq(), Leased: rng.Intn(2) == 0}}
	case 4:
		env.Body = &pb.Envelope_ViewRequest{ViewRequest: &pb.ViewRequest{}}
	case 5:
		env.Body = &pb.Envelope_Handoff{Handoff: &pb.Handoff{To: member(), Next: next, GrantSeq: seq(), DutyState: []byte("s")}}
	case 6:
		env.Body = &pb.Envelope_Ack{Ack: &pb.Ack{From: member()}}
	case 7:
		e := entry()
		env.Body = &pb.Envelope_Ping{Ping: &pb.Ping{Seq: uint64(1 + rng.Intn(5)), GrantSeq: e.Seq, GrantHave: e.Seq, RepairFrom: e.Seq - 1, RepairTo: e.Seq, Repairs: []*pb.GrantEntry{e}}}
	case 8:
		e := entry()
		env.Body = &pb.Envelope_Pong{Pong: &pb.Pong{To: member(), Seq: uint64(1 + rng.Intn(5)), GrantSeq: e.Seq, GrantHave: e.Seq, CarryFrom: e.Seq - 1, CarryTo: e.Seq, Grants: []*pb.GrantEntry{e}}}
	case 9:
		env.Body = &pb.Envelope_Claim{Claim: &pb.Claim{Resource: uint64(rng.Intn(6))}}
	case 10:
		env.Body = &pb.Envelope_Grant{Grant: &pb.Grant{Entry: entry()}}
	case 11:
		env.Body = &pb.Envelope_Deny{Deny: &pb.Deny{Resource: uint64(rng.Intn(6)), To: member(), Holder: member()}}
	case 12:
		env.Body = &pb.Envelope_Chat{Chat: &pb.Chat{Team: rng.Intn(2) == 0, Text: "hi"}}
	}
	b, err := proto.Marshal(env)
	if err != nil {
		panic(err)
	}
	return b
}
