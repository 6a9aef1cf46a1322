package regions

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node/vnet/vnettest"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

func seedMessages() []*pb.Message {
	obj := &pb.Object{Id: "food", Value: []byte{1, 2}, Version: 3}
	done := &pb.Done{RequestId: reqID(1), Status: pb.Status_STATUS_OK, Version: 3}
	wrap := func(m *pb.Message) *pb.Message { m.World, m.X, m.Y = "w", 1, 2; return m }
	return []*pb.Message{
		wrap(&pb.Message{Body: &pb.Message_Request{Request: rw(1, "food", 2, "v")}}),
		wrap(&pb.Message{Body: &pb.Message_Request{Request: &pb.Request{RequestId: reqID(2), Op: pb.Op_OP_LOCK, ObjectId: "x", LockTtlMs: 100, Suspects: [][]byte{[]byte(peerA)}}}}),
		wrap(&pb.Message{Body: &pb.Message_Reply{Reply: &pb.Reply{Status: pb.Status_STATUS_CONFLICT, Object: obj}}}),
		wrap(&pb.Message{Body: &pb.Message_Replicate{Replicate: &pb.Replicate{Epoch: 1, Entries: []*pb.Entry{{Seq: 1, Object: obj, Done: done}}}}}),
		wrap(&pb.Message{Body: &pb.Message_Replicate{Replicate: &pb.Replicate{Epoch: 2, Snapshot: &pb.Snapshot{Epoch: 2, Seq: 4, Objects: []*pb.Object{obj}, Done: []*pb.Done{done}}}}}),
		wrap(&pb.Message{Body: &pb.Message_HandoffReply{HandoffReply: &pb.HandoffReply{Ok: true, Snapshot: &pb.Snapshot{Epoch: 1}}}}),
		wrap(&pb.Message{Body: &pb.Message_HandoffReply{HandoffReply: &pb.HandoffReply{Ok: true, Snapshot: &pb.Snapshot{Epoch: 2, Seq: 4, Objects: []*pb.Object{obj}},
			Seal: &pb.Seal{Epoch: 1, LeaseId: 7, Seq: 4, StateHash: make([]byte, 32), Signature: []byte{1, 2, 3}}}}}),
		wrap(&pb.Message{Body: &pb.Message_Replicate{Replicate: &pb.Replicate{Epoch: 1, Entries: []*pb.Entry{{Seq: 1, Object: obj, Done: done}},
			Seal: &pb.Seal{Epoch: 1, LeaseId: 7, Seq: 1, StateHash: make([]byte, 32), Signature: []byte{4, 5}}}}}),
		wrap(&pb.Message{Body: &pb.Message_CacheReply{CacheReply: &pb.CacheReply{Epoch: 1, Objects: []*pb.Object{obj}}}}),
		wrap(&pb.Message{Body: &pb.Message_InfoReply{InfoReply: &pb.InfoReply{Role: pb.Role_ROLE_REPLICA, Coordinator: []byte(peerB)}}}),
		wrap(&pb.Message{Body: &pb.Message_InfoReply{InfoReply: &pb.InfoReply{Role: pb.Role_ROLE_REPLICA, Seq: 3, Coordinator: []byte(peerB),
			Assignment: &pb.Assignment{Epoch: 2, LeaseId: 7, Holder: []byte(peerA), Serial: 1, Signature: []byte{1, 2, 3}}}}}),
		wrap(&pb.Message{Body: &pb.Message_Handoff{Handoff: &pb.Handoff{Grant: []byte{1, 2, 3}}}}),
		wrap(&pb.Message{Body: &pb.Message_Ping{Ping: &pb.Ping{}}}),
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for _, m := range seedMessages() {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeMessage(data)
		if err != nil {
			return
		}
		again, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeMessage(again); err != nil {
			t.Fatalf("a valid message does not survive re-encoding: %v", err)
		}
	})
}

func FuzzReadFrame(f *testing.F) {
	for _, m := range seedMessages() {
		var buf bytes.Buffer
		_ = writeMessage(&buf, m)
		f.Add(buf.Bytes())
	}
	f.Add(binary.AppendUvarint(nil, MaxFrameSize+1))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = readMessage(bufio.NewReader(bytes.NewReader(data)))
	})
}

func FuzzDecodeEvent(f *testing.F) {
	ev := &pb.Event{World: "w", X: 1, Y: 1, Epoch: 1, Entries: []*pb.Entry{{Seq: 1, Object: &pb.Object{Id: "a"}, Done: &pb.Done{RequestId: reqID(1)}}}}
	b, _ := proto.Marshal(ev)
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := decodeEvent(data)
		if err == nil && len(ev.Entries) > MaxEntriesPerSend {
			t.Fatal("event over the entry bound accepted")
		}
	})
}

// FuzzMachineStep feeds decoded messages to a coordinator and a replica:
// nothing panics, the region stays within its bounds, and a coordinator's
// sequence never goes backwards.
func FuzzMachineStep(f *testing.F) {
	for _, m := range seedMessages() {
		b, _ := proto.Marshal(m)
		f.Add(b, int64(0))
	}
	f.Fuzz(func(t *testing.T, data []byte, dt int64) {
		m, err := decodeMessage(data)
		if err != nil {
			return
		}
		now := t0.Add(time.Duration(dt % int64(time.Hour)))
		co, re := newTestMachine(peerA), newTestMachine(peerB)
		co.role, co.epoch = pb.Role_ROLE_COORDINATOR, 1
		co.SetReplica("", now)
		before := co.seq
		switch b := m.Body.(type) {
		case *pb.Message_Request:
			co.Submit(&pending{from: alice, req: b.Request}, now)
			re.Submit(&pending{from: alice, req: b.Request}, now)
		case *pb.Message_Replicate:
			re.Replicate(peerA, b.Replicate, false)
			co.Replicate(peerC, b.Replicate, false)
		case *pb.Message_ReplicateAck:
			co.ReplicaAck(peerB, b.ReplicateAck, true, now)
		}
		if co.role == pb.Role_ROLE_COORDINATOR && co.seq < before {
			t.Fatal("sequence went backwards")
		}
		if len(co.objects) > MaxObjectsInRegion || len(re.objects) > MaxObjectsInRegion {
			t.Fatal("region over its object bound")
		}
	})
}

func TestMalformedFramesGetErrorsAndChangeNothing(t *testing.T) {
	vnettest.Run(t, func(t *testing.T) {
		cl := newCluster(t, 2, 0, testConfig(1, 1))
		cl.settle(t, 20*time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		a, b := cl.members[0], cl.members[1]
		if _, err := a.cl.Initialize(ctx, Coord{}, "food", []byte("full")); err != nil {
			t.Fatal(err)
		}
		co, _ := cl.truth(Coord{})
		target := cl.byID(co)
		sender := a
		if target == a {
			sender = b
		}
		state := func() string {
			sl := target.svc.slot(Coord{})
			var state string
			inspect(target.svc, func() { state = sl.m.snapshot().String() })
			return state
		}
		before := state()
		frame := func(m *pb.Message) []byte {
			var buf bytes.Buffer
			_ = writeMessage(&buf, m)
			return buf.Bytes()
		}
		big := &pb.Message{World: "test", Body: &pb.Message_Request{Request: rw(9, "food", 1, "")}}
		big.GetRequest().Value = make([]byte, MaxValueSize+1)
		cases := map[string][]byte{
			"oversized frame": binary.AppendUvarint(nil, MaxFrameSize+1),
			"garbage":         append(binary.AppendUvarint(nil, 5), 0xff, 0xff, 0xff, 0xff, 0xff),
			"oversized value": frame(big),
			"short request ID": frame(&pb.Message{World: "test", Body: &pb.Message_Request{Request: &pb.Request{
				RequestId: []byte{1}, Op: pb.Op_OP_INITIALIZE, ObjectId: "food", Value: []byte("x")}}}),
			"other world":       frame(&pb.Message{World: "elsewhere", Body: &pb.Message_Request{Request: rw(3, "food", 1, "x")}}),
			"outside the world": frame(&pb.Message{World: "test", X: 5, Body: &pb.Message_Request{Request: rw(4, "food", 1, "x")}}),
			"bogus snapshot": frame(&pb.Message{World: "test", Body: &pb.Message_Replicate{Replicate: &pb.Replicate{Epoch: 1,
				Snapshot: &pb.Snapshot{Epoch: 1, Objects: []*pb.Object{{Id: ""}}}}}}),
		}
		for name, raw := range cases {
			st, err := sender.n.Host().NewStream(ctx, target.id(), protocol.ID(ProtocolID))
			if err != nil {
				t.Fatal(err)
			}
			_, _ = st.Write(append(binary.AppendUvarint(nil, 0), raw...)) // an empty token frame first
			_ = st.CloseWrite()
			reply, err := readMessage(bufio.NewReader(st))
			st.Close()
			if err != nil {
				t.Fatalf("%s: no reply: %v", name, err)
			}
			if r := reply.GetReply(); r == nil || r.Status != pb.Status_STATUS_BAD_REQUEST || r.Error == "" {
				t.Fatalf("%s: reply %v, want BAD_REQUEST with a reason", name, reply)
			}
		}
		if after := state(); after != before {
			t.Fatalf("state changed:\n%s\n%s", before, after)
		}
	})
}
