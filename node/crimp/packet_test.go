package crimp

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"math/rand"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// testSignature stands in for the authority's signature where only the
// layout matters.
var testSignature = bytes.Repeat([]byte{7}, SignatureSize)

func samplePackets() []*Packet {
	return []*Packet{
		{Kind: KindData, Sender: 3, Time: 42, Seq: 9, Payload: []byte("fire"),
			FEC: []Redundant{{Seq: 8, SentAt: 41, Payload: []byte("move")}, {Seq: 6, SentAt: 40}}},
		{Kind: KindData, Sender: 1, Time: -5, Seq: 1},
		{Kind: KindRequest, Sender: 2, Time: 7, Source: 3, Seq: 77},
		{Kind: KindRepair, Sender: 2, Time: 8, Source: 3, Seq: 77, SentAt: 6, Payload: []byte("x")},
		{Kind: KindSession, Sender: 4, Time: 9, NextSeq: 10, OldestSeq: 3, Echoes: []Echo{{Peer: 1, Time: 5, HoldMicros: 250}}},
		{Kind: KindRequestJoin, Sender: 0, Time: 10, Nonce: 0xdeadbeef},
		{Kind: KindEstablish, Sender: 1, Time: 11, Nonce: 5, Member: 7, StateAddr: "10.0.0.1:7000", Members: []MemberID{1, 2}, Signature: testSignature},
		{Kind: KindDeny, Sender: 1, Time: 12, Nonce: 5, Reason: DenyFull, Signature: testSignature},
		{Kind: KindDrop, Sender: 1, Time: 13, Member: 7, Signature: testSignature},
		{Kind: KindSession, Sender: 4, Time: 9, NextSeq: 1, OldestSeq: 1, Epoch: 3, Follows: true},
		{Kind: KindSession, Sender: 4, Time: 9, NextSeq: 2, OldestSeq: 1, Tails: []Tail{{Source: 2, Next: 5}, {Source: 7, Next: 1}}},
		{Kind: KindRequestJoin, Sender: 0, Time: 10, Nonce: 7, Key: testKey(1), Cert: testSignature},
		{Kind: KindEstablish, Sender: 2, Time: 11, Nonce: 5, Member: 7, Epoch: 4, Key: testKey(7), HolderKey: testKey(2), Cert: testSignature,
			StateAddr: "10.0.0.2:7000", Members: []MemberID{1, 3}, Keys: [][]byte{testKey(1), testKey(3)}, Signature: testSignature},
		{Kind: KindDeny, Sender: 2, Time: 12, Nonce: 5, Reason: DenyFull, Epoch: 4, HolderKey: testKey(2), Signature: testSignature},
		{Kind: KindDrop, Sender: 2, Time: 13, Member: 7, Epoch: 4, Signature: testSignature},
		{Kind: KindHandover, Sender: 2, Time: 14, Authority: &AuthorityState{Epoch: 5, Holder: 3, NextID: 9,
			Members: []MemberKey{{1, testKey(1)}, {3, testKey(3)}}, Dropped: []MemberID{2, 8}}, Signature: testSignature},
		{Kind: KindVote, Sender: 3, Time: 15, Epoch: 6, Member: 3, VoteSig: testSignature},
		{Kind: KindTakeover, Sender: 3, Time: 16, Epoch: 6, NextID: 9, Votes: []Vote{{1, testSignature}, {3, testSignature}}, Signature: testSignature},
		{Kind: KindDatagram, Sender: 3, Time: 17, Payload: []byte("move")},
		{Kind: KindDatagram, Sender: 2, Time: 18},
	}
}

// testKey is a public key for member i in packet samples.
func testKey(i byte) []byte {
	return ed25519.NewKeyFromSeed(bytes.Repeat([]byte{i}, ed25519.SeedSize)).Public().(ed25519.PublicKey)
}

func TestPacketRoundTrip(t *testing.T) {
	for _, p := range samplePackets() {
		b, err := p.Encode(nil)
		if err != nil {
			t.Fatalf("%s: encode: %v", p.Kind, err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: decode: %v", p.Kind, err)
		}
		if !reflect.DeepEqual(got, p) {
			t.Fatalf("%s: round trip\n got %+v\nwant %+v", p.Kind, got, p)
		}
		// Every strict prefix is refused.
		for i := range len(b) {
			if _, err := Decode(b[:i]); err == nil {
				t.Fatalf("%s: %d-byte prefix of %d decoded", p.Kind, i, len(b))
			}
		}
		if _, err := Decode(append(b, 0)); !errors.Is(err, ErrTrailing) {
			t.Fatalf("%s: trailing byte: %v", p.Kind, err)
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	valid, _ := (&Packet{Kind: KindRequest, Sender: 2, Time: 1, Source: 3, Seq: 4}).Encode(nil)
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), valid...)) }
	cases := []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"version", mutate(func(b []byte) []byte { b[0] = Version + 1; return b }), ErrVersion},
		{"kind zero", mutate(func(b []byte) []byte { b[1] = 0; return b }), ErrKind},
		{"kind unknown", mutate(func(b []byte) []byte { b[1] = 200; return b }), ErrKind},
		{"sender zero", mutate(func(b []byte) []byte { copy(b[2:6], []byte{0, 0, 0, 0}); return b }), ErrMalformed},
		{"seq zero", mutate(func(b []byte) []byte { copy(b[18:22], []byte{0, 0, 0, 0}); return b }), ErrMalformed},
		{"oversized", make([]byte, MaxPacketSize+1), ErrTooLarge},
	}
	for _, tc := range cases {
		if _, err := Decode(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	bad := []*Packet{
		{Kind: KindData, Sender: 1, Seq: 5, FEC: []Redundant{{Seq: 5}}},
		{Kind: KindData, Sender: 1, Seq: 500, FEC: []Redundant{{Seq: 2}}},
		{Kind: KindSession, Sender: 1, NextSeq: 3, OldestSeq: 4},
		{Kind: KindSession, Sender: 1, NextSeq: 1, OldestSeq: 1, Tails: []Tail{{Source: 3, Next: 1}, {Source: 2, Next: 1}}}, // tails not ascending
		{Kind: KindSession, Sender: 1, NextSeq: 1, OldestSeq: 1, Tails: []Tail{{Source: 1, Next: 1}}},                       // own tail
		{Kind: KindSession, Sender: 1, NextSeq: 1, OldestSeq: 1, Tails: []Tail{{Source: 2, Next: 0}}},                       // next 0
		{Kind: KindEstablish, Sender: 1, Member: 2, Members: []MemberID{2}},
		{Kind: KindData, Sender: 1, Seq: 1, Payload: make([]byte, MaxPayload+1)},
		{Kind: KindDeny, Sender: 1, Nonce: 1},
		{Kind: KindDrop, Sender: 1, Member: 2},                                      // unsigned
		{Kind: KindDrop, Sender: 1, Member: 2, Signature: testSignature[:10]},       // short signature
		{Kind: KindRequest, Sender: 1, Source: 2, Seq: 1, Signature: testSignature}, // signature where none goes
	}
	for _, p := range bad {
		if _, err := p.Encode(nil); err == nil {
			t.Errorf("encoded invalid %s %+v", p.Kind, p)
		}
	}
}

// FuzzDecode: no input panics; whatever decodes re-encodes to the same
// bytes (the layout is canonical) and within the bounds.
func FuzzDecode(f *testing.F) {
	for _, p := range samplePackets() {
		b, _ := p.Encode(nil)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Decode(b)
		if err != nil {
			return
		}
		if len(p.Payload) > MaxPayload || len(p.FEC) > MaxFEC || len(p.Echoes) > MaxMembers || len(p.Tails) > MaxMembers || len(p.Members) > MaxMembers {
			t.Fatalf("decoded out of bounds: %+v", p)
		}
		again, err := p.Encode(nil)
		if err != nil {
			t.Fatalf("decoded packet does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n in %x\nout %x", b, again)
		}
	})
}

// FuzzStep feeds arbitrary datagrams (and valid ones, mutated) to a member:
// no panics, and the output and state stay bounded.
func FuzzStep(f *testing.F) {
	for _, p := range samplePackets() {
		b, _ := p.Encode(nil)
		f.Add(b, b)
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		n, err := New(Config{ID: 1, Peers: []MemberID{2, 3}, Authority: true, AuthorityKey: testAuthorityKey, FEC: 2}, rand.New(rand.NewSource(1)))
		if err != nil {
			t.Fatal(err)
		}
		from := netip.MustParseAddrPort("127.0.0.1:9")
		now := simStart
		for i, in := range [][]byte{a, b, a} {
			now = now.Add(time.Duration(i) * 7 * time.Millisecond)
			r, _ := n.Step(now, from, in)
			if len(r.Packets) > n.cfg.MaxRequestsPerTick+4 || len(r.Deliveries) > MaxFEC+2 {
				t.Fatalf("one datagram produced %d packets, %d deliveries", len(r.Packets), len(r.Deliveries))
			}
			r = n.Tick(now.Add(time.Second))
			if len(r.Packets) > 4*MaxMembers {
				t.Fatalf("tick produced %d packets", len(r.Packets))
			}
		}
		if st := n.Stats(); st.Pending > n.cfg.MaxWindow*MaxMembers || st.Sources > MaxMembers {
			t.Fatalf("state %+v", st)
		}
	})
}

func TestCollector(t *testing.T) {
	n, err := New(Config{ID: 1, Peers: []MemberID{2}}, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	now := simStart
	b, _ := (&Packet{Kind: KindData, Sender: 2, Time: now.Add(-5 * time.Millisecond).UnixNano(), Seq: 1, Payload: []byte("a")}).Encode(nil)
	if _, err := n.Step(now, netip.AddrPort{}, b); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(n.Metrics().Collector(prometheus.Labels{"member": "1"})); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, mf := range mfs {
		found[mf.GetName()] = true
		if mf.GetName() == "crimp_delivered_total" && mf.GetMetric()[0].GetCounter().GetValue() != 1 {
			t.Fatalf("delivered = %v", mf.GetMetric()[0].GetCounter().GetValue())
		}
		if mf.GetName() == "crimp_perceived_latency_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 1 || h.GetSampleSum() < 0.004 || h.GetSampleSum() > 0.006 {
				t.Fatalf("latency histogram %v", h)
			}
		}
	}
	for _, name := range []string{"crimp_delivered_total", "crimp_requests_sent_total", "crimp_repairs_heard_duplicate_total", "crimp_perceived_latency_seconds"} {
		if !found[name] {
			t.Errorf("metric %s missing", name)
		}
	}
	if n.Metrics().MeanLatency() != 5*time.Millisecond {
		t.Fatalf("mean latency %v", n.Metrics().MeanLatency())
	}
	if !strings.Contains(KindRepair.String(), "repair") {
		t.Fatal("kind names")
	}
}
