package regions

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/regions/memnet"
)

// slowLookup is a memnet peer whose DHT lookup takes all the time it is
// given, as one can on a loaded machine running many peers that all join
// at once; it then returns what the lookup would have found.
type slowLookup struct{ *memnet.Peer }

func (s slowLookup) ClosestPeers(ctx context.Context, key string, count int) ([]peer.ID, error) {
	<-ctx.Done()
	return s.Peer.ClosestPeers(context.Background(), key, count)
}

// msgLog records the messages logged through it, at every level.
type msgLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *msgLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *msgLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *msgLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *msgLog) WithGroup(string) slog.Handler      { return l }

func (l *msgLog) logged(msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.msgs, msg)
}

// budgetCluster starts five Services over an automatic memnet with 2ms
// links, in the synctest bubble of the caller; the farthest peer from
// region c's key (returned last in order) looks keys up with slowLookup.
// A first write makes order[0] coordinator and order[1] replica. The
// slow peer logs to slowLog.
func budgetCluster(t *testing.T, c Coord) (cfg Config, svcs map[peer.ID]*Service, order []peer.ID, slowLog *msgLog) {
	t.Helper()
	net := memnet.New()
	net.SetLatency(2 * time.Millisecond)
	t.Cleanup(net.Close)
	cfg = Config{World: "budget", Width: 4, Height: 4, RequestTimeout: 2 * time.Second,
		ProbeTimeout: 500 * time.Millisecond, MaintainEvery: 500 * time.Millisecond}
	var mps []*memnet.Peer
	var ids []peer.ID
	for i := range 5 {
		mp, err := net.Add(scenarioKey(300 + i))
		if err != nil {
			t.Fatal(err)
		}
		mps = append(mps, mp)
		ids = append(ids, mp.ID())
	}
	order = sortByDistance(Key(cfg.World, c), append([]peer.ID(nil), ids...))
	svcs = map[peer.ID]*Service{}
	for _, mp := range mps {
		var tr Transport = mp
		pc := cfg
		pc.Logger = testLogger()
		if mp.ID() == order[len(order)-1] {
			tr = slowLookup{mp}
			slowLog = &msgLog{}
			pc.Logger = slog.New(slowLog)
		}
		pc.Registerer = prometheus.NewRegistry()
		svc, err := NewWithTransport(tr, pc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { svc.Close() })
		svcs[mp.ID()] = svc
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if o, err := svcs[order[2]].Client().ReadWrite(ctx, c, "x", 0, []byte("1")); err != nil || o.Version != 1 {
		t.Fatalf("first write: %+v, %v", o, err)
	}
	if r := svcs[order[0]].Role(c); r != RoleCoordinator {
		t.Fatalf("closest peer is %s, want coordinator", r)
	}
	return cfg, svcs, order, slowLog
}

// TestSlowLookupLeavesTheAsksTime: a peer without a copy that starts
// acquiring a region looks its key up first, and the lookup counts
// against the acquisition's deadline. A lookup that takes all the time it
// is given must leave the asks that follow theirs: the acquirer hears from
// the region's live coordinator, steps back for it, and takes neither it
// nor the replica for dead. (It once had the acquisition's whole time: the
// deadline had passed when the asks began, cancelled them, and each
// cancelled ask marked its peer dead, so that the next acquisition asked
// neither and rebuilt the region from the members' caches.)
func TestSlowLookupLeavesTheAsksTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := Coord{X: 1, Y: 2}
		_, svcs, order, xlog := budgetCluster(t, c)
		x := svcs[order[len(order)-1]]
		var done <-chan struct{}
		x.onLoop(func() {
			x.startAcquire(c)
			done = x.slot(c).acquired
		})
		// Checked as the acquisition ends (by its deadline at the
		// latest), before a later probe could bring a peer back.
		<-done
		synctest.Wait()
		if !xlog.logged("a closer peer is alive; not taking the region") {
			t.Error("the acquirer did not step back for the live coordinator: its asks went unanswered")
		}
		for _, p := range order[:2] {
			if !x.alive(p) {
				t.Errorf("the acquirer takes %s (coordinator or replica, alive) for dead", p)
			}
		}
		if r := x.Role(c); r != RoleNone {
			t.Errorf("the acquirer is %s, want none: the coordinator lives", r)
		}
		if r := svcs[order[0]].Role(c); r != RoleCoordinator {
			t.Errorf("the closest peer is %s, want coordinator", r)
		}
	})
}

// TestAsksCancelledByTheDeadlineMarkNobodyDead: the asks of an
// acquisition whose deadline passes before they are answered are
// cancelled, and a cancelled ask says nothing about its peer: nobody is
// marked dead for it. Here the deadline has passed when the asks begin.
func TestAsksCancelledByTheDeadlineMarkNobodyDead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := Coord{X: 1, Y: 2}
		_, svcs, order, _ := budgetCluster(t, c)
		x := svcs[order[len(order)-1]]
		done := make(chan struct{})
		var asked []peer.ID
		x.onLoop(func() {
			sl := x.slot(c)
			sl.acquiring = true
			sl.acquired = done
			asked = x.askList(c, "")
			a := newAcquisition(acqTake, x.h.ID(), c, asked, 0, x.acquireTimeout(), x.acqChecks(c), x.log)
			x.drive(c, sl, a, time.Now().Add(-2*x.acquireTimeout()), done, nil)
		})
		<-done
		synctest.Wait() // the cancelled asks have failed and been fed
		if len(asked) == 0 {
			t.Fatal("the acquisition asked nobody")
		}
		for _, p := range asked {
			if !x.alive(p) {
				t.Errorf("%s, asked as the deadline passed, is taken for dead", p)
			}
		}
	})
}
