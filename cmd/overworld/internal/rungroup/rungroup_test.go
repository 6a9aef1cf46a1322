package rungroup

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// recorder notes the order in which services were stopped.
type recorder struct {
	mu    sync.Mutex
	order []string
}

func (r *recorder) note(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.order = append(r.order, name)
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.order)
}

// blocking is a service that runs until stopped and notes when its Run
// has returned, so the order reflects finished stops, not stop calls.
func blocking(name string, r *recorder) Service {
	stop := make(chan struct{})
	return Service{
		Name: name,
		Run: func() error {
			<-stop
			r.note(name)
			return nil
		},
		Stop: func() { close(stop) },
	}
}

// The group runs in a synctest bubble: the save below takes virtual time,
// so the test shows the node waits for a slow stop without sleeping.
func TestStopsInReverseOrderOneAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		g := New(nil)
		g.Add(blocking("metrics", &r))
		g.Add(Service{Name: "node", Stop: func() { r.note("node") }})
		// A stop that takes a while: the node must not close before it ends.
		saving := make(chan struct{})
		g.Add(Service{
			Name: "player",
			Run: func() error {
				<-saving
				time.Sleep(20 * time.Millisecond) // the save (virtual time in the bubble)
				r.note("player")
				return nil
			},
			Stop: func() { close(saving) },
		})
		g.Add(blocking("page", &r))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := g.Run(ctx); err != nil {
			t.Fatal(err)
		}
		want := []string{"page", "player", "node", "metrics"}
		if got := r.got(); !slices.Equal(got, want) {
			t.Fatalf("stopped in order %v, want %v", got, want)
		}
	})
}

func TestFailingServiceStopsTheOthers(t *testing.T) {
	var r recorder
	g := New(nil)
	g.Add(blocking("first", &r))
	boom := errors.New("listener closed")
	g.Add(Service{Name: "broken", Run: func() error { return boom }})
	g.Add(blocking("last", &r))
	err := g.Run(context.Background())
	if !errors.Is(err, boom) {
		t.Fatalf("Run returned %v, want the failing service's error", err)
	}
	if got, want := r.got(), []string{"last", "first"}; !slices.Equal(got, want) {
		t.Fatalf("stopped %v, want %v", got, want)
	}
}

func TestErrorWhileStoppingIsReturned(t *testing.T) {
	g := New(nil)
	stop := make(chan struct{})
	bad := errors.New("save failed")
	g.Add(Service{Name: "player", Run: func() error { <-stop; return bad }, Stop: func() { close(stop) }})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Run(ctx); !errors.Is(err, bad) {
		t.Fatalf("Run returned %v, want the error returned while stopping", err)
	}
}

// In a synctest bubble the stop timeout passes in virtual time.
func TestStopTimeoutGoesOn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r recorder
		g := New(nil)
		g.StopTimeout = 10 * time.Millisecond
		g.Add(blocking("after", &r))
		hung := make(chan struct{})
		defer close(hung)
		g.Add(Service{Name: "hung", Run: func() error { <-hung; return nil }, Stop: func() {}})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := g.Run(ctx); err != nil {
			t.Fatal(err)
		}
		if got := r.got(); !slices.Equal(got, []string{"after"}) {
			t.Fatalf("stopped %v: the group should go on past a service that does not stop", got)
		}
	})
}

func TestCloseStopsWithoutRunning(t *testing.T) {
	var r recorder
	g := New(nil)
	g.Add(Service{Name: "a", Stop: func() { r.note("a") }})
	g.Add(Service{Name: "b", Run: func() error { t.Error("Close ran a service"); return nil }, Stop: func() { r.note("b") }})
	g.Close()
	if got := r.got(); !slices.Equal(got, []string{"b", "a"}) {
		t.Fatalf("Close stopped %v, want [b a]", got)
	}
}
