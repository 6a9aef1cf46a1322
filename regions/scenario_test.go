package regions

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/regions/memnet"
	pb "github.com/overworld-p2p/overworld/regions/regionpb"
)

var _ Transport = (*memnet.Peer)(nil)

// TestScenarios runs the scripted scenarios of testdata/scenarios, each in
// its own synctest bubble over a memnet network in manual mode: only the
// script moves messages and time, one message at a time, so each run
// prints the same. Regenerate with -rewrite, then read what changed.
//
// Commands (peers are named p1, p2, ... by their distance to the
// scenario's region, p1 closest):
//
//	peers n=N [down=(pX,...)] [leases]  make N peers; start all but down;
//	                            leases: the tests' lease service (signed
//	                            grants, the first peer to ask gets the lease)
//	start pX                    start a peer made down
//	lease holder=pX [id=N]      a scripted commit gate (only pX commits), or
//	                            with leases a new grant to pX
//	subscribe pX [pY ...]       make peers members (event topic, cache)
//	write pX obj=O value=V [ver=N] [as=NAME]   a client write (ReadWrite with ver)
//	read pX [as=NAME]           a client Get
//	deliver [from=pX] [to=pY] [type=T] [n=K]   deliver the matching messages
//	drop [from=pX] [to=pY] [type=T] [n=K]      lose them
//	stabilize [quiet] [hold=(T,...)]  deliver until nothing (but held types) is queued
//	partition pA,pB | pC,pD     cut the network (unlisted peers: one more side)
//	heal                        link every peer again
//	crash pX [pY ...] [linger]  silent for good: its queued messages are
//	                            dropped, its exchanges reset, its service closed;
//	                            linger: the peers linked to it are not told and
//	                            keep listing it (routing, connected and topic
//	                            peers) until forget, while calls to it fail
//	forget pX [pY ...]          end a lingering crash: the peers drop it and
//	                            hear that its connection closed
//	tick D                      advance virtual time by D
//	queue                       the messages queued
//	status                      each peer's role, epoch, seq and objects
//
// A type T is a message's first printed word (request, reply, replicate,
// info, handoff, nudge, ping, event, ...) or its kind (call, reply,
// event). Messages print, are delivered and are dropped sorted by their
// printed line. Every command ends with synctest.Wait and prints the
// client operations that finished meanwhile.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/scenarios", func(t *testing.T, path string) {
		synctest.Test(t, func(t *testing.T) {
			sc := newScenario(t)
			defer sc.close()
			datadriven.RunTest(t, path, sc.run)
		})
	})
}

// scenarioRegion is the region every scenario plays in.
var scenarioRegion = Coord{X: 1, Y: 1}

type scenario struct {
	t     *testing.T
	net   *memnet.Network
	cfg   Config
	peers []*scenarioPeer // by name order
	names map[peer.ID]string
	gate  *scriptGate
	// leases, if set (peers ... leases), is the tests' lease service with
	// signed grants (leases_test.go): gate and proofs of every peer.
	leases *testLeases

	mu       sync.Mutex
	finished []string // client operations' outcomes not yet printed
	ops      sync.WaitGroup
	opCount  int
}

type scenarioPeer struct {
	name    string
	key     crypto.PrivKey
	id      peer.ID
	mp      *memnet.Peer
	svc     *Service
	crashed bool
	subs    []*Subscription
}

func newScenario(t *testing.T) *scenario {
	net := memnet.New()
	net.SetManual(true)
	cfg := Config{World: "scene", Width: 4, Height: 4,
		RequestTimeout: 2 * time.Second, ProbeTimeout: 500 * time.Millisecond,
		MaintainEvery: 500 * time.Millisecond, DeadFor: 30 * time.Second}
	return &scenario{t: t, net: net, cfg: cfg, names: map[peer.ID]string{}, gate: &scriptGate{}}
}

func (sc *scenario) close() {
	for _, p := range sc.peers {
		if p.svc != nil {
			p.svc.Close()
		}
	}
	sc.net.Close()
	sc.ops.Wait()
}

// scriptGate is a commit gate the script sets: with no holder every peer
// may commit; with one, only it, under the lease ID given.
type scriptGate struct {
	mu     sync.Mutex
	holder peer.ID
	id     uint64
}

type peerGate struct {
	g    *scriptGate
	self peer.ID
}

func (pg peerGate) Allowed(Coord) (uint64, bool) {
	pg.g.mu.Lock()
	defer pg.g.mu.Unlock()
	if pg.g.holder == "" {
		return 0, true
	}
	return pg.g.id, pg.g.holder == pg.self
}

// scenarioKey is the deterministic key of the scenario's i-th peer.
func scenarioKey(i int) crypto.PrivKey {
	seed := sha256.Sum256([]byte("overworld scenario peer " + strconv.Itoa(i)))
	k, err := crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(seed[:]))
	if err != nil {
		panic(err)
	}
	return k
}

func (sc *scenario) name(id peer.ID) string {
	if n, ok := sc.names[id]; ok {
		return n
	}
	if id == "" {
		return "-"
	}
	return "?" + id.ShortString()
}

func (sc *scenario) nameBytes(b []byte) string { return sc.name(peer.ID(b)) }

func (sc *scenario) byName(t *testing.T, n string) *scenarioPeer {
	for _, p := range sc.peers {
		if p.name == n {
			return p
		}
	}
	t.Fatalf("no peer %q", n)
	return nil
}

// names replaces the peer IDs in s by the peers' names.
func (sc *scenario) renamed(s string) string {
	for _, p := range sc.peers {
		s = strings.ReplaceAll(s, p.id.String(), p.name)
		s = strings.ReplaceAll(s, p.id.ShortString(), p.name)
	}
	return s
}

func (sc *scenario) run(t *testing.T, d *datadriven.TestData) string {
	var out strings.Builder
	switch d.Cmd {
	case "peers":
		sc.makePeers(t, d, &out)
	case "start":
		for _, a := range d.CmdArgs {
			sc.start(t, sc.byName(t, a.Key))
		}
	case "lease":
		var holder string
		var id uint64
		d.ScanArgs(t, "holder", &holder)
		if d.HasArg("id") {
			d.ScanArgs(t, "id", &id)
		}
		if sc.leases != nil {
			sc.leases.grant(scenarioRegion, sc.byName(t, holder).id)
			break
		}
		sc.gate.mu.Lock()
		sc.gate.holder, sc.gate.id = sc.byName(t, holder).id, id
		sc.gate.mu.Unlock()
	case "subscribe":
		for _, a := range d.CmdArgs {
			p := sc.byName(t, a.Key)
			sub, err := p.svc.Subscribe(scenarioRegion)
			if err != nil {
				t.Fatal(err)
			}
			p.subs = append(p.subs, sub)
		}
	case "write":
		sc.write(t, d)
	case "read":
		sc.read(t, d)
	case "deliver", "drop":
		sc.deliverOrDrop(t, d, &out)
	case "stabilize":
		sc.stabilize(t, d, &out)
	case "partition":
		var groups [][]peer.ID
		var cur []peer.ID
		for _, a := range d.CmdArgs {
			if a.Key == "|" {
				groups, cur = append(groups, cur), nil
				continue
			}
			for _, n := range strings.Split(a.Key, ",") {
				cur = append(cur, sc.byName(t, n).id)
			}
		}
		groups = append(groups, cur)
		sc.net.Partition(groups...)
	case "heal":
		sc.net.Heal()
	case "crash":
		linger := d.HasArg("linger")
		for _, a := range d.CmdArgs {
			if a.Key == "linger" {
				continue
			}
			p := sc.byName(t, a.Key)
			if linger {
				sc.net.CrashLingering(p.id)
			} else {
				sc.net.Crash(p.id)
			}
			p.crashed = true
			p.svc.Close()
		}
	case "forget":
		for _, a := range d.CmdArgs {
			sc.net.Forget(sc.byName(t, a.Key).id)
		}
	case "tick":
		dur, err := time.ParseDuration(d.CmdArgs[0].Key)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(dur)
	case "queue":
		for _, m := range sc.sorted(sc.net.Pending()) {
			fmt.Fprintln(&out, sc.line(m))
		}
	case "status":
		sc.status(&out)
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
	synctest.Wait()
	sc.flushOps(&out)
	return out.String()
}

func (sc *scenario) makePeers(t *testing.T, d *datadriven.TestData, out *strings.Builder) {
	var n int
	d.ScanArgs(t, "n", &n)
	down := map[string]bool{}
	if a, ok := d.Arg("down"); ok {
		for _, v := range a.Vals {
			down[v] = true
		}
	}
	if d.HasArg("leases") {
		sc.leases = newTestLeases(sc.cfg.World)
	}
	var ids []peer.ID
	keys := map[peer.ID]crypto.PrivKey{}
	for i := range n {
		k := scenarioKey(i)
		id, err := peer.IDFromPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		keys[id] = k
	}
	ids = sortByDistance(Key(sc.cfg.World, scenarioRegion), ids)
	for i, id := range ids {
		p := &scenarioPeer{name: fmt.Sprintf("p%d", i+1), key: keys[id], id: id}
		sc.peers = append(sc.peers, p)
		sc.names[id] = p.name
	}
	fmt.Fprintf(out, "region %s, closest first:", scenarioRegion)
	for _, p := range sc.peers {
		fmt.Fprintf(out, " %s", p.name)
		if down[p.name] {
			fmt.Fprint(out, "(down)")
		}
	}
	fmt.Fprintln(out)
	for _, p := range sc.peers {
		if !down[p.name] {
			sc.start(t, p)
		}
	}
}

func sortByDistance(key string, ids []peer.ID) []peer.ID {
	var h hashCache
	return h.sortByDistance(key, ids)
}

func (sc *scenario) start(t *testing.T, p *scenarioPeer) {
	mp, err := sc.net.Add(p.key)
	if err != nil {
		t.Fatal(err)
	}
	cfg := sc.cfg
	cfg.Logger = testLogger().With("peer", p.name)
	cfg.Registerer = prometheus.NewRegistry()
	if sc.leases != nil {
		sc.leases.install(&cfg, p.id)
	} else {
		cfg.Gate = peerGate{sc.gate, p.id}
	}
	svc, err := NewWithTransport(mp, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.mp, p.svc = mp, svc
}

// op runs a client operation on its own goroutine (it waits for messages
// the script delivers) and records its outcome under name.
func (sc *scenario) op(name string, f func(ctx context.Context) string) {
	sc.ops.Add(1)
	go func() {
		defer sc.ops.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res := f(ctx)
		sc.mu.Lock()
		sc.finished = append(sc.finished, name+": "+res)
		sc.mu.Unlock()
	}()
}

func (sc *scenario) opName(d *datadriven.TestData, what string) string {
	sc.opCount++
	name := fmt.Sprintf("%s%d", what, sc.opCount)
	if a, ok := d.Arg("as"); ok {
		name = a.Vals[0]
	}
	return name
}

func (sc *scenario) write(t *testing.T, d *datadriven.TestData) {
	p := sc.byName(t, d.CmdArgs[0].Key)
	var obj, value string
	d.ScanArgs(t, "obj", &obj)
	d.ScanArgs(t, "value", &value)
	ver := -1
	if d.HasArg("ver") {
		d.ScanArgs(t, "ver", &ver)
	}
	name := sc.opName(d, "w")
	cl := p.svc.Client()
	sc.op(name, func(ctx context.Context) string {
		var o Object
		var err error
		if ver >= 0 {
			o, err = cl.ReadWrite(ctx, scenarioRegion, obj, uint64(ver), []byte(value))
		} else {
			o, err = cl.Initialize(ctx, scenarioRegion, obj, []byte(value))
		}
		if err != nil {
			return "error: " + sc.renamed(err.Error())
		}
		s := fmt.Sprintf("ok %s=%s@%d", o.ID, o.Value, o.Version)
		if o.SingleCopy {
			s += " single-copy"
		}
		return s
	})
}

func (sc *scenario) read(t *testing.T, d *datadriven.TestData) {
	p := sc.byName(t, d.CmdArgs[0].Key)
	name := sc.opName(d, "r")
	cl := p.svc.Client()
	sc.op(name, func(ctx context.Context) string {
		st, err := cl.Get(ctx, scenarioRegion)
		if err != nil {
			return "error: " + sc.renamed(err.Error())
		}
		return fmt.Sprintf("epoch=%d %s", st.Epoch, objects(st.Objects))
	})
}

func objects(objs []Object) string {
	objs = slices.Clone(objs)
	sort.Slice(objs, func(i, j int) bool { return objs[i].ID < objs[j].ID })
	var ss []string
	for _, o := range objs {
		ss = append(ss, fmt.Sprintf("%s=%s@%d", o.ID, o.Value, o.Version))
	}
	return "[" + strings.Join(ss, " ") + "]"
}

func (sc *scenario) flushOps(out *strings.Builder) {
	sc.mu.Lock()
	done := sc.finished
	sc.finished = nil
	sc.mu.Unlock()
	slices.Sort(done) // operations finishing in one step finish together
	for _, s := range done {
		fmt.Fprintln(out, s)
	}
}

// line renders one queued message.
func (sc *scenario) line(m *memnet.Message) string {
	return fmt.Sprintf("%s->%s %s", sc.name(m.From), sc.name(m.To), describe(m, sc.nameBytes))
}

// sorted orders messages by sender, receiver and content, then sending
// order: a goroutine schedule can change the sending order of messages
// sent in one step, never the names or contents.
func (sc *scenario) sorted(ms []*memnet.Message) []*memnet.Message {
	type keyed struct {
		m    *memnet.Message
		line string
	}
	ks := make([]keyed, len(ms))
	for i, m := range ms {
		ks[i] = keyed{m, sc.line(m)}
	}
	sort.SliceStable(ks, func(i, j int) bool {
		if ks[i].line != ks[j].line {
			return ks[i].line < ks[j].line
		}
		return ks[i].m.Seq < ks[j].m.Seq
	})
	out := make([]*memnet.Message, len(ks))
	for i, k := range ks {
		out[i] = k.m
	}
	return out
}

// matching returns the queued messages that d's from, to and type select.
func (sc *scenario) matching(t *testing.T, d *datadriven.TestData) []*memnet.Message {
	var from, to, typ string
	if d.HasArg("from") {
		d.ScanArgs(t, "from", &from)
	}
	if d.HasArg("to") {
		d.ScanArgs(t, "to", &to)
	}
	if d.HasArg("type") {
		d.ScanArgs(t, "type", &typ)
	}
	var out []*memnet.Message
	for _, m := range sc.sorted(sc.net.Pending()) {
		desc := describe(m, sc.nameBytes)
		kind, _, _ := strings.Cut(desc, " ")
		if (from == "" || sc.name(m.From) == from) && (to == "" || sc.name(m.To) == to) &&
			(typ == "" || kind == typ || string(m.Kind) == typ) {
			out = append(out, m)
		}
	}
	return out
}

func (sc *scenario) deliverOrDrop(t *testing.T, d *datadriven.TestData, out *strings.Builder) {
	ms := sc.matching(t, d)
	n := len(ms)
	if d.HasArg("n") {
		d.ScanArgs(t, "n", &n)
	}
	if len(ms) == 0 {
		fmt.Fprintln(out, "nothing matches")
	}
	for _, m := range ms[:min(n, len(ms))] {
		line := sc.line(m)
		if d.Cmd == "drop" {
			if sc.net.Drop(m) {
				fmt.Fprintln(out, "dropped "+line)
			}
			continue
		}
		if sc.net.Deliver(m) {
			fmt.Fprintln(out, line)
			synctest.Wait()
		}
	}
}

// stabilize delivers the first queued message (in sorted order) until
// none is left but those of the held types, waiting for the peers after
// each.
func (sc *scenario) stabilize(t *testing.T, d *datadriven.TestData, out *strings.Builder) {
	quiet := d.HasArg("quiet")
	var hold []string
	if a, ok := d.Arg("hold"); ok {
		hold = a.Vals
	}
	delivered := 0
	for ; delivered < 2000; delivered++ {
		synctest.Wait()
		q := slices.DeleteFunc(sc.sorted(sc.net.Pending()), func(m *memnet.Message) bool {
			typ, _, _ := strings.Cut(describe(m, sc.nameBytes), " ")
			return slices.Contains(hold, typ)
		})
		if len(q) == 0 {
			break
		}
		if !quiet {
			fmt.Fprintln(out, sc.line(q[0]))
		}
		sc.net.Deliver(q[0])
	}
	if delivered == 2000 {
		t.Fatal("stabilize: still busy after 2000 messages")
	}
	if quiet {
		fmt.Fprintf(out, "delivered %d messages\n", delivered)
	}
}

func (sc *scenario) status(out *strings.Builder) {
	if sc.leases != nil {
		sc.leases.mu.Lock()
		fmt.Fprintf(out, "lease %d held by %s\n", sc.leases.ids[scenarioRegion], sc.name(sc.leases.holder[scenarioRegion]))
		sc.leases.mu.Unlock()
	}
	for _, p := range sc.peers {
		switch {
		case p.svc == nil:
			fmt.Fprintf(out, "%s: not started\n", p.name)
			continue
		case p.crashed:
			fmt.Fprintf(out, "%s: crashed\n", p.name)
			continue
		}
		sl := p.svc.existingSlot(scenarioRegion)
		if sl == nil {
			fmt.Fprintf(out, "%s: none\n", p.name)
		} else {
			inspect(p.svc, func() {
				m := sl.m
				fmt.Fprintf(out, "%s: %s epoch=%d seq=%d", p.name, roleOf(m.role), m.epoch, m.seq)
				switch m.role {
				case pb.Role_ROLE_COORDINATOR:
					fmt.Fprintf(out, " replica=%s", sc.name(m.replica))
				case pb.Role_ROLE_REPLICA:
					fmt.Fprintf(out, " coordinator=%s", sc.name(m.coordinator))
				}
				var objs []*pb.Object
				for _, o := range m.objects {
					objs = append(objs, o)
				}
				sort.Slice(objs, func(i, j int) bool { return objs[i].Id < objs[j].Id })
				fmt.Fprintf(out, " %s\n", objectList(objs))
			})
		}
		if cached := p.svc.Cached(scenarioRegion); len(p.subs) > 0 {
			fmt.Fprintf(out, "  cache %s\n", objects(cached))
		}
	}
}
