package tss

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Scripted scenarios in the manner of etcd's rafttest: each file in
// testdata/scenarios holds blocks of
//
//	command args...
//	----
//	output
//
// separated by blank lines ('#' lines are comments). The test runs the
// commands on the fixture world and compares each output; -update rewrites
// the files with what the code does now. Times are durations after the
// epoch (0).
//
//	config delays=0,100ms,200ms period=50ms [margin=N] [maxskew=D] [maxpending=N] [checkhash]
//	deliver at=D stamp=D mirror=N seq=N player=N op=move|set|fire [arg=N]
//	tick D                      one Tick
//	run until=D step=D          Ticks every step, output summed
//	setdelays at=D delays=...
//	states                      every state's tick, positions and shots
//	reference                   each state against the in-order run of the accepted commands
//	metrics                     the counters
//	expect [rollbacks=N] [by1=N ...] [too-late=N] [duplicates=N] [future=N] [overflow=N] [inorder]
//	                            checks counters (by<i>: rollbacks found by state i) and, with
//	                            inorder, that every state equals the in-order run; a failed
//	                            expectation fails the test even with -update

var update = flag.Bool("update", false, "rewrite the golden files in testdata/scenarios")

func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScenarioFile(t, f) })
	}
}

type scenarioBlock struct {
	comments []string
	cmd      string
	want     string
}

func parseScenario(t *testing.T, path string) []scenarioBlock {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []scenarioBlock
	var cur scenarioBlock
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		switch {
		case cur.cmd == "" && (strings.HasPrefix(text, "#") || strings.TrimSpace(text) == ""):
			cur.comments = append(cur.comments, text)
		case cur.cmd == "":
			cur.cmd = text
			if !sc.Scan() || sc.Text() != "----" {
				t.Fatalf("%s:%d: command %q not followed by ----", path, line, text)
			}
			line++
			var out []string
			for sc.Scan() {
				line++
				if sc.Text() == "" {
					break
				}
				out = append(out, sc.Text())
			}
			cur.want = strings.Join(out, "\n")
			blocks = append(blocks, cur)
			cur = scenarioBlock{}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return blocks
}

func runScenarioFile(t *testing.T, path string) {
	blocks := parseScenario(t, path)
	env := &scenarioEnv{}
	var rewritten strings.Builder
	for i, b := range blocks {
		got, err := env.run(b.cmd)
		if err != nil {
			got = "error: " + err.Error()
			if strings.HasPrefix(b.cmd, "expect") {
				t.Errorf("%s block %d: %s: %v", path, i+1, b.cmd, err)
			}
		}
		got = strings.TrimRight(got, "\n")
		if got == "" {
			got = "ok"
		}
		if *update {
			for _, c := range b.comments {
				rewritten.WriteString(c + "\n")
			}
			fmt.Fprintf(&rewritten, "%s\n----\n%s\n\n", b.cmd, got)
			continue
		}
		if got != b.want {
			t.Errorf("%s block %d: %s\ngot:\n%s\nwant:\n%s", path, i+1, b.cmd, got, b.want)
		}
	}
	if *update {
		if err := os.WriteFile(path, []byte(strings.TrimRight(rewritten.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type scenarioEnv struct {
	cfg      Config
	sync     *fxSync
	accepted []fxCmd
}

func scenarioArgs(fields []string) (map[string]string, error) {
	args := map[string]string{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			v = "true"
		}
		if _, dup := args[k]; dup {
			return nil, fmt.Errorf("argument %s given twice", k)
		}
		args[k] = v
	}
	return args, nil
}

func parseDelays(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		d, err := parseScenarioDuration(f)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

func parseScenarioDuration(s string) (time.Duration, error) {
	if s == "0" {
		return 0, nil
	}
	return time.ParseDuration(s)
}

func (e *scenarioEnv) run(line string) (string, error) {
	fields := strings.Fields(line)
	args, err := scenarioArgs(fields[1:])
	if err != nil {
		return "", err
	}
	dur := func(k string) (time.Duration, error) {
		v, ok := args[k]
		if !ok {
			return 0, fmt.Errorf("missing %s=", k)
		}
		return parseScenarioDuration(v)
	}
	num := func(k string, def int64) (int64, error) {
		v, ok := args[k]
		if !ok {
			return def, nil
		}
		return strconv.ParseInt(v, 10, 64)
	}
	if fields[0] != "config" && e.sync == nil {
		return "", fmt.Errorf("no config yet")
	}
	switch fields[0] {
	case "config":
		cfg := Config{}
		if v, ok := args["delays"]; ok {
			if cfg.Delays, err = parseDelays(v); err != nil {
				return "", err
			}
		}
		if _, ok := args["period"]; ok {
			if cfg.TickPeriod, err = dur("period"); err != nil {
				return "", err
			}
		}
		if _, ok := args["maxskew"]; ok {
			if cfg.MaxSkew, err = dur("maxskew"); err != nil {
				return "", err
			}
		}
		if cfg.WeakMargin, err = num("margin", 0); err != nil {
			return "", err
		}
		mp, err := num("maxpending", 0)
		if err != nil {
			return "", err
		}
		cfg.MaxPending = int(mp)
		cp, err := num("checkpoint", 0)
		if err != nil {
			return "", err
		}
		cfg.CheckpointTicks = uint64(cp)
		cfg.CheckHash = args["checkhash"] == "true"
		e.accepted = nil
		e.sync, err = newFxSync(cfg, Options[fxCmd]{})
		if err != nil {
			return "", err
		}
		e.cfg = e.sync.Config()
		return fmt.Sprintf("states=%d delays=%v period=%v margin=%d", e.sync.States(), e.cfg.Delays, e.cfg.TickPeriod, e.cfg.WeakMargin), nil
	case "deliver":
		at, err := dur("at")
		if err != nil {
			return "", err
		}
		stamp, err := dur("stamp")
		if err != nil {
			return "", err
		}
		c := fxCmd{Stamp: int64(stamp)}
		vals := map[string]*int64{}
		var mirror, seq, player, arg int64
		vals["mirror"], vals["seq"], vals["player"], vals["arg"] = &mirror, &seq, &player, &arg
		for k, p := range vals {
			if *p, err = num(k, 0); err != nil {
				return "", err
			}
		}
		c.Mirror, c.Seq, c.Player, c.Arg = uint32(mirror), uint64(seq), uint8(player), arg
		op := slices.Index(fxOpNames[:], args["op"])
		if op <= 0 {
			return "", fmt.Errorf("unknown op %q", args["op"])
		}
		c.Op = fxOp(op)
		v := e.sync.Deliver(c, int64(at))
		if v == Accepted {
			e.accepted = append(e.accepted, c)
		}
		return fmt.Sprintf("%v (tick %d; states at %s)", v, e.cfg.TickOf(c.Stamp), e.ticks()), nil
	case "tick":
		if len(fields) != 2 {
			return "", fmt.Errorf("tick takes one time")
		}
		at, err := parseScenarioDuration(fields[1])
		if err != nil {
			return "", err
		}
		return e.describe(e.sync.Tick(int64(at))), nil
	case "run":
		until, err := dur("until")
		if err != nil {
			return "", err
		}
		step, err := dur("step")
		if err != nil || step <= 0 {
			return "", fmt.Errorf("run needs step>0: %v", err)
		}
		var sum Ready
		for now := time.Duration(e.sync.Now()) + step; ; now += step {
			now = min(now, until)
			r := e.sync.Tick(int64(now))
			sum.Executed += r.Executed
			sum.Rollbacks = append(sum.Rollbacks, r.Rollbacks...)
			sum.Checkpoints = append(sum.Checkpoints, r.Checkpoints...)
			sum.Leading, sum.Confirmed = r.Leading, r.Confirmed
			if now == until {
				break
			}
		}
		return e.describe(sum), nil
	case "setdelays":
		at, err := dur("at")
		if err != nil {
			return "", err
		}
		d, err := parseDelays(args["delays"])
		if err != nil {
			return "", err
		}
		if err := e.sync.SetDelays(int64(at), d); err != nil {
			return "", err
		}
		e.cfg = e.sync.Config()
		return fmt.Sprintf("delays=%v states at %s", e.cfg.Delays, e.ticks()), nil
	case "states":
		var b strings.Builder
		for i := range e.sync.States() {
			s := e.sync.State(i)
			fmt.Fprintf(&b, "state %d (d=%v) tick=%d pos=%v shots=%v pending=%d\n", i, e.cfg.Delays[i], s.tick, s.pos, s.shots, e.sync.pendingOf(i))
		}
		return b.String(), nil
	case "reference":
		maxTick := uint64(0)
		for i := range e.sync.States() {
			maxTick = max(maxTick, e.sync.State(i).Tick())
		}
		ref := fxReference(e.cfg, e.accepted, maxTick)
		var b strings.Builder
		for i := range e.sync.States() {
			s := e.sync.State(i)
			verdict := "equals"
			if s.Hash() != ref[s.Tick()] {
				verdict = "DIFFERS from"
			}
			fmt.Fprintf(&b, "state %d %s the in-order reference at tick %d\n", i, verdict, s.Tick())
		}
		return b.String(), nil
	case "expect":
		m := e.sync.Metrics()
		c := m.Counters()
		var failed []string
		for k, v := range args {
			if k == "inorder" {
				continue
			}
			want, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return "", fmt.Errorf("expect %s=%q: %w", k, v, err)
			}
			var got uint64
			switch {
			case strings.HasPrefix(k, "by"):
				i, err := strconv.Atoi(k[2:])
				if err != nil {
					return "", fmt.Errorf("expect %s: %w", k, err)
				}
				got = m.RollbacksBy(i)
			case k == "too-late":
				got = c["too_late"]
			default:
				var ok bool
				if got, ok = c[k]; !ok {
					return "", fmt.Errorf("expect: no counter %q", k)
				}
			}
			if got != want {
				failed = append(failed, fmt.Sprintf("%s=%d, want %d", k, got, want))
			}
		}
		if args["inorder"] == "true" {
			out, _ := e.run("reference")
			if strings.Contains(out, "DIFFERS") {
				failed = append(failed, "not every state equals the in-order run:\n"+out)
			}
		}
		slices.Sort(failed)
		if len(failed) > 0 {
			return "", fmt.Errorf("%s", strings.Join(failed, "; "))
		}
		return "ok", nil
	case "metrics":
		m := e.sync.Metrics()
		c := m.Counters()
		var by []string
		for i := 1; i < e.sync.States(); i++ {
			by = append(by, fmt.Sprintf("%d", m.RollbacksBy(i)))
		}
		var ooo []string
		for i := range e.sync.States() {
			ooo = append(ooo, fmt.Sprintf("%d", m.OutOfOrder(i)))
		}
		return fmt.Sprintf("accepted=%d executed=%d reexecuted=%d ticks=%d rollbacks=%d by-state=[%s] rollback-ticks=%d out-of-order=[%s]\ntoo-late=%d duplicates=%d future=%d overflow=%d unchecked=%d copies=%d",
			c["accepted"], c["executed"], c["reexecuted"], c["ticks"], c["rollbacks"], strings.Join(by, " "), c["rollback_ticks"], strings.Join(ooo, " "),
			c["too_late"], c["duplicates"], c["future"], c["overflow"], c["unchecked"], c["copies"]), nil
	}
	return "", fmt.Errorf("unknown command %q", fields[0])
}

func (e *scenarioEnv) ticks() string {
	var parts []string
	for i := range e.sync.States() {
		parts = append(parts, strconv.FormatUint(e.sync.State(i).Tick(), 10))
	}
	return strings.Join(parts, "/")
}

func (e *scenarioEnv) describe(r Ready) string {
	var b strings.Builder
	fmt.Fprintf(&b, "executed=%d states at %s", r.Executed, e.ticks())
	for _, rb := range r.Rollbacks {
		fmt.Fprintf(&b, "\nrollback: state %d from state %d at tick %d (simulation time %v, wall %v), %d ticks re-executed: %s",
			rb.State, rb.By, rb.Tick, time.Duration(rb.Tick)*e.cfg.TickPeriod, time.Duration(rb.At), rb.Depth, rb.Why)
	}
	for _, cp := range r.Checkpoints {
		fmt.Fprintf(&b, "\ncheckpoint tick=%d hash=%x", cp.Tick, cp.Hash[:6])
	}
	return b.String()
}
