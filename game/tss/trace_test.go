package tss

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"
)

// recordRun plays a random run with a trace writer attached (checkpoints
// every tick, a delay change in the middle) and returns the trace.
func recordRun(t testing.TB, seed uint64) ([]byte, *fxSync) {
	run := randomRun(seed, 1+int(seed%4))
	run.cfg.CheckpointTicks = 3
	var buf bytes.Buffer
	cfg := run.cfg.WithDefaults()
	start := newFx()
	tw, err := NewTraceWriter(&buf, TraceHeader{Config: cfg, Seed: seed, StartHash: start.Hash(), Meta: []byte("fixture")}, encodeFx)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New[*fxState, fxCmd, fxRecord](cfg, start, newFx, Options[fxCmd]{Tracer: tw})
	if err != nil {
		t.Fatal(err)
	}
	changed := false
	for i, d := range run.deliveries {
		if i%7 == 0 {
			s.Tick(d.at)
		}
		if !changed && i > len(run.deliveries)/2 {
			changed = true
			delays := append([]time.Duration{0}, cfg.Delays[len(cfg.Delays)-1]+20*time.Millisecond)
			if err := s.SetDelays(d.at, delays); err != nil {
				t.Fatal(err)
			}
		}
		s.Deliver(d.cmd, d.at)
	}
	s.Tick(run.end)
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), s
}

func startFx(h TraceHeader) (*fxState, func() *fxState, error) {
	if string(h.Meta) != "fixture" {
		return nil, nil, errors.New("not a fixture trace")
	}
	return newFx(), newFx, nil
}

func replayFx(b []byte) (ReplayResult, error) {
	return Replay[*fxState, fxCmd, fxRecord](bytes.NewReader(b), decodeFx, startFx)
}

func TestTraceReplayReproducesEveryCheckpoint(t *testing.T) {
	for seed := range uint64(50) {
		trace, s := recordRun(t, seed)
		res, err := replayFx(trace)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if want := s.Metrics().Checkpoints.Load(); uint64(res.Checkpoints) != want || want == 0 {
			t.Fatalf("seed %d: %d checkpoints verified, %d made", seed, res.Checkpoints, want)
		}
		if res.LastTick != s.Last().Tick() || res.LastHash != s.Last().Hash() {
			t.Fatalf("seed %d: replay ends at tick %d, the run at %d", seed, res.LastTick, s.Last().Tick())
		}
		if res.Counters["rollbacks"] != s.Metrics().Rollbacks.Load() {
			t.Fatalf("seed %d: %d rollbacks in the replay, %d in the run", seed, res.Counters["rollbacks"], s.Metrics().Rollbacks.Load())
		}
		if res.DelayChanges != 1 || res.Bytes != int64(len(trace)) {
			t.Fatalf("seed %d: %d delay changes, %d of %d bytes", seed, res.DelayChanges, res.Bytes, len(trace))
		}
	}
}

// recordOffsets lists where each record starts (and the header's end).
func recordOffsets(t *testing.T, trace []byte) []int64 {
	tr, err := NewTraceReader(bytes.NewReader(trace), decodeFx)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for {
		rec, err := tr.Next()
		if err == io.EOF {
			return offs
		}
		if err != nil {
			t.Fatal(err)
		}
		offs = append(offs, rec.Offset)
	}
}

// Every flipped byte and every cut is an error naming the offset of the
// header or record that holds it.
func TestTraceCorruptionNamesItsOffset(t *testing.T) {
	trace, _ := recordRun(t, 7)
	offs := recordOffsets(t, trace)
	headerEnd := offs[0]
	owner := func(pos int64) int64 {
		o := int64(0)
		if pos >= 10 && pos < headerEnd {
			return 10
		}
		for _, r := range offs {
			if r <= pos {
				o = r
			}
		}
		return o
	}
	for pos := int64(0); pos < int64(len(trace)); pos++ {
		bad := bytes.Clone(trace)
		bad[pos] ^= 0x41
		_, err := replayFx(bad)
		var te *TraceError
		if !errors.As(err, &te) {
			t.Fatalf("byte %d flipped: %v, want a TraceError", pos, err)
		}
		if pos >= headerEnd && te.Offset != owner(pos) || pos < 8 && te.Offset != 0 {
			t.Fatalf("byte %d flipped: error at offset %d, its record starts at %d: %v", pos, te.Offset, owner(pos), err)
		}
	}
	for _, cut := range []int64{1, 9, headerEnd - 1, headerEnd + 1, offs[len(offs)/2] + 3, int64(len(trace)) - 1} {
		_, err := replayFx(trace[:cut])
		var te *TraceError
		if !errors.As(err, &te) || !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut at %d: %v, want an unexpected EOF", cut, err)
		}
		if cut > headerEnd && te.Offset != owner(cut) {
			t.Fatalf("cut at %d: error at %d, want %d", cut, te.Offset, owner(cut))
		}
	}
	// Cut on a record boundary: a shorter but valid trace.
	if _, err := replayFx(trace[:offs[len(offs)/2]]); err != nil {
		t.Fatalf("cut on a boundary: %v", err)
	}
}

// A trace of a state that misbehaves does not replay: the replay names the
// checkpoint where it diverged.
func TestReplayFindsDivergence(t *testing.T) {
	run := randomRun(3, 2)
	run.cfg.CheckpointTicks = 2
	cfg := run.cfg.WithDefaults()
	var buf bytes.Buffer
	tw, err := NewTraceWriter(&buf, TraceHeader{Config: cfg, StartHash: newFx().Hash(), Meta: []byte("fixture")}, encodeFx)
	if err != nil {
		t.Fatal(err)
	}
	// Each state object gets a perturbation of its own after 40 Advance
	// calls: the recorded run is not what the commands say.
	perturbed := func() *fxState {
		return &fxState{perturb: func(s *fxState) {
			if s.advances == 40 {
				s.pos[7]++
			}
		}}
	}
	s, err := New[*fxState, fxCmd, fxRecord](cfg, newFx(), perturbed, Options[fxCmd]{Tracer: tw})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range run.deliveries {
		s.Deliver(d.cmd, d.at)
	}
	s.Tick(run.end)
	if err := tw.Flush(); err != nil {
		t.Fatal(err)
	}
	_, err = replayFx(buf.Bytes())
	var m *CheckpointMismatch
	if !errors.As(err, &m) || m.Offset <= 0 {
		t.Fatalf("replay of a perturbed run: %v, want a checkpoint mismatch", err)
	}
	t.Logf("%v", err)
	// A different starting state is refused before anything runs.
	_, err = Replay[*fxState, fxCmd, fxRecord](bytes.NewReader(buf.Bytes()), decodeFx, func(TraceHeader) (*fxState, func() *fxState, error) {
		return &fxState{pos: [fxPlayers]int64{1}}, newFx, nil
	})
	if err == nil {
		t.Fatal("replay from another starting state accepted")
	}
}

func FuzzTraceReader(f *testing.F) {
	trace, _ := recordRun(f, 11)
	f.Add(trace)
	f.Add(trace[:len(trace)/2])
	f.Add(trace[:40])
	f.Add([]byte(traceMagic + "\x00\x01\x05"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := NewTraceReader(bytes.NewReader(b), decodeFx)
		if err != nil {
			var te *TraceError
			if !errors.As(err, &te) || te.Offset < 0 || te.Offset > int64(len(b)) {
				t.Fatalf("header error %v without a valid offset", err)
			}
			return
		}
		if err := tr.Header.Config.Validate(); err != nil {
			t.Fatalf("accepted an invalid config: %v", err)
		}
		last := int64(-1)
		for {
			rec, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				var te *TraceError
				if !errors.As(err, &te) || te.Offset <= last || te.Offset > int64(len(b)) {
					t.Fatalf("record error %v at a bad offset (previous record %d)", err, last)
				}
				return
			}
			if rec.Offset <= last {
				t.Fatalf("record offsets go back: %d after %d", rec.Offset, last)
			}
			last = rec.Offset
		}
		// What decodes completely also replays without panicking.
		_, _ = replayFx(b)
	})
}
