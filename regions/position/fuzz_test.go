package position

import (
	"bufio"
	"bytes"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node/pbframe"
)

func FuzzDecodeEnvelope(f *testing.F) {
	u := &Update{Player: []byte("\x00\x04abcd"), Seq: 1, X: 10, Y: 10}
	for _, m := range []proto.Message{
		&Envelope{Body: &Envelope_Update{Update: u}},
		&Envelope{Body: &Envelope_Batch{Batch: &Batch{Coordinator: u.Player, Updates: []*Update{u, u}}}},
	} {
		b, _ := proto.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte{})
	tr := NewTracker(testLimits())
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := DecodeEnvelope(data)
		if err != nil {
			return
		}
		if len(data) > MaxBatchBytes {
			t.Fatalf("accepted %d bytes", len(data))
		}
		if b := env.GetBatch(); b != nil && len(b.Updates) > MaxBatchUpdates {
			t.Fatalf("accepted a batch of %d", len(b.Updates))
		}
		// Whatever decodes, the tracker judges without panicking.
		for _, u := range append(env.GetBatch().GetUpdates(), env.GetUpdate()) {
			if u != nil {
				tr.Observe("p", u, time.Unix(0, 0))
			}
		}
	})
}

func FuzzStreamMessages(f *testing.F) {
	var buf bytes.Buffer
	_, _ = pbframe.WriteMessage(&buf, &StreamMessage{Body: &StreamMessage_Join{Join: &Join{RegionX: 1}}}, maxStreamMessageBytes)
	f.Add(buf.Bytes())
	buf.Reset()
	_, _ = pbframe.WriteMessage(&buf, &Members{Members: []*Member{{Id: []byte("\x00\x04abcd")}}}, maxMembersBytes)
	f.Add(buf.Bytes())
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = decodeStreamMessage(bufio.NewReader(bytes.NewReader(data)))
		if m, err := decodeMembers(bufio.NewReader(bytes.NewReader(data))); err == nil && len(m.Members) > MaxMembers {
			t.Fatalf("accepted %d members", len(m.Members))
		}
	})
}
