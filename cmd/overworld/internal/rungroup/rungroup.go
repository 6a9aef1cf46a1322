// Package rungroup runs the services of one process together and stops them
// one at a time, in the reverse of the order they were added: the shape of
// oklog/run, with an ordered stop instead of interrupting every service at
// once. The order matters to a player's process, which must save its
// character and release its region leases while its libp2p node and its
// /metrics are still up.
//
// Data flow: Add records services; Run starts every service's Run in a
// goroutine of its own and waits until its context ends or a service's Run
// returns. Then, last added first, it calls each service's Stop and waits for
// that service's Run to return (at most StopTimeout) before it stops the
// next, logging "stopped" with the service's name and how long it took.
package rungroup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Service is one part of a process.
type Service struct {
	// Name is what the logs call it.
	Name string
	// Run works until Stop is called, then returns nil; an error (or nil)
	// returned before that stops the whole group. Nil for a service that
	// is running already and only needs stopping.
	Run func() error
	// Stop asks Run to return, or stops a service without Run. It may
	// block (a player saving its character); the group waits for it. Nil
	// when Run returns by itself once the group's context ends.
	Stop func()
}

// Group is a set of services run and stopped together. It is not safe for
// concurrent use; Run is called once.
type Group struct {
	// StopTimeout bounds how long the group waits for one service to stop
	// before it logs that and goes on to the next (0: no bound).
	StopTimeout time.Duration
	log         *slog.Logger
	services    []Service
}

// New returns an empty group that logs to log (nil: discard).
func New(log *slog.Logger) *Group {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Group{log: log}
}

// Add appends a service: it will be stopped before every service added
// earlier.
func (g *Group) Add(s Service) {
	if s.Name == "" {
		panic("rungroup: a service needs a name")
	}
	g.services = append(g.services, s)
}

type exit struct {
	index int
	err   error
}

// Run runs the services until ctx ends or one of them returns, then stops
// them all, last added first. It returns the error of the service whose
// return stopped the group (wrapped with its name), or nil when ctx ended
// the run, joined with the errors services return while being stopped.
func (g *Group) Run(ctx context.Context) error {
	exits := make(chan exit, len(g.services))
	done := make([]chan struct{}, len(g.services))
	for i, s := range g.services {
		done[i] = make(chan struct{})
		if s.Run == nil {
			close(done[i])
			continue
		}
		go func() {
			err := s.Run()
			exits <- exit{i, err}
			close(done[i])
		}()
	}
	var errs []error
	select {
	case <-ctx.Done():
		g.log.Info("stopping", "reason", "signal")
	case e := <-exits:
		name := g.services[e.index].Name
		if e.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, e.err))
			g.log.Error("stopping", "reason", "service failed", "service", name, "err", e.err)
		} else {
			g.log.Info("stopping", "reason", "service ended", "service", name)
		}
	}
	for i := len(g.services) - 1; i >= 0; i-- {
		s := g.services[i]
		start := time.Now()
		if s.Stop != nil {
			s.Stop()
		}
		if !g.wait(done[i]) {
			g.log.Warn("service did not stop in time; going on", "service", s.Name, "waited", g.StopTimeout)
			continue
		}
		g.log.Info("stopped", "service", s.Name, "took", time.Since(start).Round(time.Millisecond))
	}
	// Errors of services that returned while being stopped.
	for {
		select {
		case e := <-exits:
			if e.err != nil && !errors.Is(e.err, context.Canceled) {
				errs = append(errs, fmt.Errorf("%s: %w", g.services[e.index].Name, e.err))
			}
		default:
			return errors.Join(errs...)
		}
	}
}

// Close stops the services added so far without running them, last added
// first: for a process whose set-up fails half way.
func (g *Group) Close() {
	for i := len(g.services) - 1; i >= 0; i-- {
		if s := g.services[i]; s.Stop != nil {
			s.Stop()
		}
	}
}

// wait waits for a service's Run to return, up to StopTimeout.
func (g *Group) wait(done <-chan struct{}) bool {
	if g.StopTimeout <= 0 {
		<-done
		return true
	}
	t := time.NewTimer(g.StopTimeout)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
