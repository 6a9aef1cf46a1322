package regions

import (
	"bufio"
	"bytes"
	"fmt"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node/pbframe"
	"github.com/overworld-p2p/overworld/regions/memnet"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// describe renders a queued message for a scenario's output: its kind and
// the fields that show what the protocol does, never request IDs,
// signatures or times. name turns a peer ID into its scenario name.
func describe(m *memnet.Message, name func([]byte) string) string {
	switch m.Kind {
	case memnet.KindEvent:
		var ev pb.Event
		if err := proto.Unmarshal(m.Data, &ev); err != nil {
			return "event (undecodable)"
		}
		return fmt.Sprintf("event epoch=%d %s", ev.Epoch, entries(ev.Entries))
	case memnet.KindCall:
		r := bufio.NewReader(bytes.NewReader(m.Data))
		if _, err := pbframe.Read(r, MaxTokenSize); err != nil {
			return "call (no token frame)"
		}
		msg, err := readMessage(r)
		if err != nil {
			return "call (undecodable)"
		}
		return describeBody(msg, name)
	default:
		msg, err := decodeMessage(m.Data)
		if err != nil {
			return "reply (undecodable)"
		}
		return describeBody(msg, name)
	}
}

func describeBody(msg *pb.Message, name func([]byte) string) string {
	switch b := msg.Body.(type) {
	case *pb.Message_Request:
		r := b.Request
		s := fmt.Sprintf("request %s", opName(r.Op))
		if r.ObjectId != "" {
			s += " " + r.ObjectId
		}
		if len(r.Value) > 0 {
			s += "=" + string(r.Value)
		}
		if r.Op == pb.Op_OP_READ_WRITE {
			s += fmt.Sprintf(" read=%d", r.ReadVersion)
		}
		if r.Forwarded {
			s += " forwarded for " + name(r.Origin)
		}
		if len(r.Suspects) > 0 {
			var ss []string
			for _, p := range r.Suspects {
				ss = append(ss, name(p))
			}
			s += " suspects=" + strings.Join(ss, ",")
		}
		return s
	case *pb.Message_Reply:
		r := b.Reply
		s := "reply " + strings.TrimPrefix(r.Status.String(), "STATUS_")
		if r.Status == pb.Status_STATUS_REDIRECT {
			s += " to " + name(r.Redirect)
		}
		if r.Object != nil && r.Object.Id != "" {
			s += fmt.Sprintf(" %s@%d", r.Object.Id, r.Object.Version)
		}
		if len(r.Objects) > 0 {
			s += " " + objectList(r.Objects)
		}
		if r.Epoch > 0 {
			s += fmt.Sprintf(" epoch=%d", r.Epoch)
		}
		if r.SingleCopy {
			s += " single-copy"
		}
		if r.Error != "" {
			s += fmt.Sprintf(" (%s)", r.Error)
		}
		return s
	case *pb.Message_Replicate:
		r := b.Replicate
		s := fmt.Sprintf("replicate epoch=%d", r.Epoch)
		if r.Snapshot != nil {
			s += fmt.Sprintf(" snapshot seq=%d %s", r.Snapshot.Seq, objectList(r.Snapshot.Objects))
		}
		if len(r.Entries) > 0 {
			s += " " + entries(r.Entries)
		}
		return s
	case *pb.Message_ReplicateAck:
		a := b.ReplicateAck
		s := fmt.Sprintf("replicate-ack ok=%t epoch=%d seq=%d", a.Ok, a.Epoch, a.Seq)
		if a.Stale {
			s += " stale coordinator=" + name(a.Coordinator)
		}
		return s
	case *pb.Message_Info:
		return "info"
	case *pb.Message_InfoReply:
		i := b.InfoReply
		s := fmt.Sprintf("info-reply %s epoch=%d seq=%d", roleOf(i.Role), i.Epoch, i.Seq)
		if len(i.Coordinator) > 0 {
			s += " coordinator=" + name(i.Coordinator)
		}
		if len(i.Replica) > 0 {
			s += " replica=" + name(i.Replica)
		}
		if i.SteppingAside {
			s += " stepping-aside"
		}
		return s
	case *pb.Message_Handoff:
		return "handoff"
	case *pb.Message_HandoffReply:
		h := b.HandoffReply
		s := fmt.Sprintf("handoff-reply ok=%t", h.Ok)
		if h.Snapshot != nil {
			s += fmt.Sprintf(" epoch=%d seq=%d %s", h.Snapshot.Epoch, h.Snapshot.Seq, objectList(h.Snapshot.Objects))
		}
		if len(h.Redirect) > 0 {
			s += " redirect=" + name(h.Redirect)
		}
		if h.Error != "" {
			s += fmt.Sprintf(" (%s)", h.Error)
		}
		return s
	case *pb.Message_Retire:
		return fmt.Sprintf("retire epoch=%d", b.Retire.Epoch)
	case *pb.Message_Nudge:
		return "nudge"
	case *pb.Message_CacheQuery:
		return "cache-query"
	case *pb.Message_CacheReply:
		var es []*pb.Entry
		for _, se := range b.CacheReply.Entries {
			es = append(es, se.Entry)
		}
		return "cache-reply " + entries(es)
	case *pb.Message_Ping:
		return "ping"
	case *pb.Message_Ack:
		return "ack"
	default:
		return fmt.Sprintf("%T", b)
	}
}

func opName(op pb.Op) string { return strings.ToLower(strings.TrimPrefix(op.String(), "OP_")) }

// objectList renders objects as [id=value@version ...].
func objectList(objs []*pb.Object) string {
	var ss []string
	for _, o := range objs {
		ss = append(ss, fmt.Sprintf("%s=%s@%d", o.Id, o.Value, o.Version))
	}
	return "[" + strings.Join(ss, " ") + "]"
}

// entries renders entries' objects as [id=value@version ...] (a done
// record alone shows as "done").
func entries(es []*pb.Entry) string {
	var ss []string
	for _, e := range es {
		switch {
		case e.Object != nil:
			ss = append(ss, fmt.Sprintf("%s=%s@%d", e.Object.Id, e.Object.Value, e.Object.Version))
		case e.Done != nil:
			ss = append(ss, "done")
		}
	}
	return "[" + strings.Join(ss, " ") + "]"
}
