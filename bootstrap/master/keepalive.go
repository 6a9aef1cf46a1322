package master

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

// RunKeepAlive runs a keep-alive round every Interval until ctx ends. A
// round polls every game that gave a status URL (at most PollConcurrency
// at once, each within PollTimeout) and waits for all of them, then
// settles the interval: each game heard during it (a valid poll answer or
// a registration) has missed none in a row, every other game one more, and
// games at MaxMissed are dropped. Rounds never overlap; a round slower than
// the interval delays the next rather than stacking.
//
// Misses counted before a restart are forgiven at start: the master's own
// silence is no fault of the games.
func (m *Master) RunKeepAlive(ctx context.Context) error {
	if err := m.store.forgiveMisses(ctx); err != nil {
		return err
	}
	tick := time.NewTicker(m.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		rep, err := m.round(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// A broken store counts against nobody: the round is
			// skipped, and retried at the next tick.
			m.log.Error("keep-alive round skipped", "round", rep.Round, "err", err)
			continue
		}
		if m.cfg.OnRound != nil {
			m.cfg.OnRound(rep)
		}
	}
}

// round runs one keep-alive round.
func (m *Master) round(ctx context.Context) (RoundReport, error) {
	rep := RoundReport{Round: m.started.Add(1)}
	start := time.Now()
	targets, err := m.store.pollTargets(ctx)
	if err != nil {
		return rep, err
	}
	rep.Polled = len(targets)
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, m.cfg.PollConcurrency)
	for _, t := range targets {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return rep, ctx.Err()
		}
		wg.Go(func() {
			defer func() { <-slots }()
			ans, result := m.poll(ctx, t)
			m.metrics.polls.WithLabelValues(result).Inc()
			if ans == nil {
				return
			}
			changed, err := m.store.applyStatus(ctx, t, *ans, m.now())
			if err != nil {
				m.log.Error("keep-alive answer not stored", "game", t.id, "err", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			rep.Answers++
			if changed {
				rep.Changed = append(rep.Changed, t.id)
			}
		})
	}
	wg.Wait()
	slices.Sort(rep.Changed)
	for _, id := range rep.Changed {
		m.log.Info("game changed", "game", id, "round", rep.Round)
	}
	rep.Dropped, err = m.store.endRound(ctx, m.cfg.MaxMissed)
	if err != nil {
		return rep, err
	}
	for _, id := range rep.Dropped {
		m.metrics.dropped.WithLabelValues("missed").Inc()
		m.log.Info("game dropped: no keep-alive", "game", id, "missed", m.cfg.MaxMissed, "interval", m.cfg.Interval, "round", rep.Round)
	}
	games, mirrors, err := m.store.counts(ctx)
	if err != nil {
		return rep, err
	}
	rep.Games = games
	m.metrics.games.Set(float64(games))
	m.metrics.mirrors.Set(float64(mirrors))
	m.metrics.rounds.Inc()
	m.metrics.roundTime.Observe(time.Since(start).Seconds())
	return rep, nil
}

// poll asks one game for its status since the version the master holds.
// It returns the validated answer, or nil, and the result for the metric.
func (m *Master) poll(ctx context.Context, t pollTarget) (*StatusAnswer, string) {
	u, err := url.Parse(t.url)
	if err != nil {
		return nil, "bad_status"
	}
	q := u.Query()
	q.Set("since", strconv.FormatUint(t.version, 10))
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, m.cfg.PollTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, "bad_status"
	}
	req.Header.Set("Accept", "application/json")
	if t.key != "" {
		req.Header.Set("Authorization", "Bearer "+t.key)
	}
	resp, err := m.pollClient.Do(req)
	if err != nil {
		m.log.Debug("keep-alive poll failed", "game", t.id, "err", err)
		return nil, "unreachable"
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		m.log.Debug("keep-alive poll refused", "game", t.id, "status", resp.Status)
		return nil, "bad_status"
	}
	var ans StatusAnswer
	if err := decodeStrict(http.MaxBytesReader(nil, resp.Body, m.cfg.MaxBodyBytes), &ans); err != nil {
		m.log.Warn("keep-alive answer unreadable", "game", t.id, "err", err)
		return nil, "bad_answer"
	}
	if err := ans.Validate(t.id, t.version); err != nil {
		m.log.Warn("keep-alive answer refused", "game", t.id, "err", err)
		return nil, "bad_answer"
	}
	if ans.Game == nil {
		return &ans, "unchanged"
	}
	return &ans, "changed"
}
