package regions

import (
	"bufio"
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	"google.golang.org/protobuf/proto"

	"github.com/overworld-p2p/overworld/node"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

// fuzzService is one region peer on an in-memory network, with signed
// lease grants, for fuzzing what it does with what peers send.
func fuzzService(f *testing.F) (*Service, *testLeases) {
	mn := mocknet.New()
	h, err := mn.GenPeer()
	if err != nil {
		f.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := node.New(ctx, node.WithHost(h), node.WithLogger(testLogger()))
	if err != nil {
		f.Fatal(err)
	}
	cfg := testConfig(2, 2)
	cfg.Logger = testLogger()
	book := newTestLeases(cfg.World)
	book.install(&cfg, n.ID())
	svc, err := New(n, cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { svc.Close(); n.Close(); mn.Close() })
	return svc, book
}

// signedEntry is a valid entry of region c signed by svc's own key under
// its lease grant.
func signedEntry(svc *Service, book *testLeases, c Coord) *pb.SignedEntry {
	book.grant(c, svc.h.ID())
	e := &pb.Entry{Seq: 3, LeaseId: 1, Object: &pb.Object{Id: "apple", Value: []byte("2"), Version: 2},
		Done: &pb.Done{RequestId: reqID(7), Status: pb.Status_STATUS_OK, Version: 2}}
	return &pb.SignedEntry{Epoch: 2, Entry: e, Grant: book.proof(c), Author: []byte(svc.h.ID()),
		Signature: svc.sign(entryDigest(svc.cfg.World, c, 2, e))}
}

// FuzzVerifySignedEntry: a cached entry is taken only if it decodes within
// bounds and its author's signature over it checks out; nothing panics.
func FuzzVerifySignedEntry(f *testing.F) {
	svc, book := fuzzService(f)
	c := Coord{1, 1}
	good := signedEntry(svc, book, c)
	if reason := svc.verifySignedEntry(c, good); reason != "" {
		f.Fatalf("a valid entry refused: %s", reason)
	}
	b, _ := proto.Marshal(good)
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var se pb.SignedEntry
		if proto.Unmarshal(data, &se) != nil || validateSignedEntry(&se) != nil {
			return
		}
		if svc.verifySignedEntry(c, &se) != "" {
			return
		}
		author, err := peer.IDFromBytes(se.Author)
		if err != nil || !svc.verifySig(author, entryDigest(svc.cfg.World, c, se.Epoch, se.Entry), se.Signature) {
			t.Fatal("an entry taken without its author's signature")
		}
	})
}

// FuzzServeFrame: whatever a peer writes on a region stream is answered
// with one valid message, and nothing panics.
func FuzzServeFrame(f *testing.F) {
	svc, book := fuzzService(f)
	for _, m := range seedMessages() {
		var buf bytes.Buffer
		m.World = svc.cfg.World
		m.X, m.Y = 1, 1
		_ = writeRequest(&buf, nil, m)
		f.Add(buf.Bytes())
	}
	var buf bytes.Buffer
	se := signedEntry(svc, book, Coord{1, 1})
	_ = writeRequest(&buf, nil, &pb.Message{World: svc.cfg.World, X: 1, Y: 1, Body: &pb.Message_Replicate{Replicate: &pb.Replicate{
		Epoch: 3, Grant: se.Grant, Snapshot: &pb.Snapshot{Epoch: 3, Seq: 1, Objects: []*pb.Object{se.Entry.Object}}}}})
	f.Add(buf.Bytes())
	from := peer.ID(peerB)
	f.Fuzz(func(t *testing.T, data []byte) {
		reply := svc.serveFrame(from, bufio.NewReader(bytes.NewReader(data)))
		if err := validateMessage(reply); err != nil {
			t.Fatalf("invalid reply %v: %v", reply, err)
		}
	})
}
