package arbiter_test

import (
	"bytes"
	"container/heap"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/game/arbiter"
	pb "github.com/overworld-p2p/overworld/game/arbiter/arbiterpb"
	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite the golden scenario files in testdata/")

// TestScenarios runs the scripts in testdata/*.txt in the style of etcd's
// rafttest interaction tests: each stanza is a command, "----", and the
// output it must produce (messages sent, events, refusals). -update
// rewrites the expected output.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runScenario(t, f) })
	}
}

type stanza struct {
	comment []string
	cmd     string
	want    string
	line    int
}

func parseScenario(t *testing.T, path string) []stanza {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var out []stanza
	var cur stanza
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.TrimSpace(l) == "":
		case strings.HasPrefix(l, "#"):
			cur.comment = append(cur.comment, l)
		default:
			cur.cmd, cur.line = l, i+1
			if i+1 >= len(lines) || lines[i+1] != "----" {
				t.Fatalf("%s:%d: command without ----", path, i+1)
			}
			i++
			var want []string
			for i+1 < len(lines) && lines[i+1] != "" {
				i++
				want = append(want, lines[i])
			}
			cur.want = strings.Join(want, "\n")
			out = append(out, cur)
			cur = stanza{}
		}
	}
	// Trailing comments are dropped; a file ends with its last stanza.
	return out
}

func runScenario(t *testing.T, path string) {
	stanzas := parseScenario(t, path)
	env := newScenarioEnv()
	var rewritten strings.Builder
	for i, st := range stanzas {
		got := env.exec(st.cmd)
		if got == "" {
			got = "ok"
		}
		for _, c := range st.comment {
			rewritten.WriteString(c + "\n")
		}
		fmt.Fprintf(&rewritten, "%s\n----\n%s\n", st.cmd, got)
		if i < len(stanzas)-1 {
			rewritten.WriteString("\n")
		}
		if !*update && got != st.want {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", path, st.line, st.cmd, got, st.want)
		}
	}
	if *update {
		if err := os.WriteFile(path, []byte(rewritten.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// scenarioEnv runs the commands of one script on a simNet without delays
// or losses unless the script sets them.
type scenarioEnv struct {
	net   *simNet
	cfg   arbiter.Config
	out   *strings.Builder
	quiet bool // run: print events and refusals only
	held  []inflight
	refs  map[arbiter.MemberID]map[string]uint64
}

func newScenarioEnv() *scenarioEnv {
	e := &scenarioEnv{net: newSimNet(1), out: &strings.Builder{}, refs: map[arbiter.MemberID]map[string]uint64{}}
	e.cfg = arbiter.Config{NeverDrop: true}
	e.net.onReady = e.print
	// Step's error text may come from the protobuf library, which words
	// its errors differently from run to run on purpose; the refusal
	// counters say what happened.
	e.net.onStepErr = func(n *simNode, err error) { e.printRefusals(n, "") }
	return e
}

func (e *scenarioEnv) stamp() string {
	return fmt.Sprintf("[%s] ", e.net.now.Sub(simStart).Round(time.Millisecond))
}

// print renders what a node did: its messages, events and any refusal
// counted since the last look.
func (e *scenarioEnv) print(n *simNode, r arbiter.Ready, cause string) {
	prefix := ""
	if e.quiet {
		prefix = e.stamp()
	}
	if !e.quiet {
		for _, b := range r.Messages {
			fmt.Fprintf(e.out, "%d->* %s\n", n.id, arbiter.FormatMessage(b))
		}
	}
	for _, ev := range r.Events {
		fmt.Fprintf(e.out, "%s%d ! %s\n", prefix, n.id, formatEvent(ev))
	}
	e.printRefusals(n, prefix)
}

func (e *scenarioEnv) printRefusals(n *simNode, prefix string) {
	now := n.node.Metrics().Counters()
	before := e.refs[n.id]
	var keys []string
	for k, v := range now {
		if strings.HasPrefix(k, "refused_") && v > before[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(e.out, "%s%d x %s +%d\n", prefix, n.id, k, now[k]-before[k])
	}
	e.refs[n.id] = now
}

func formatEvent(ev arbiter.Event) string {
	switch ev.Kind {
	case arbiter.EventJoined:
		return fmt.Sprintf("joined id=%d team=%d forced=%t at %s", ev.Member, ev.Team, ev.Forced, ev.Stamp)
	case arbiter.EventRefused:
		return fmt.Sprintf("refused %s", ev.Reason)
	case arbiter.EventMemberJoined:
		return fmt.Sprintf("member-joined %d team=%d forced=%t", ev.Member, ev.Team, ev.Forced)
	case arbiter.EventMemberLeft:
		return fmt.Sprintf("member-left %d %s", ev.Member, ev.Reason)
	case arbiter.EventLeft:
		return fmt.Sprintf("left %s", ev.Reason)
	case arbiter.EventDutyBegin:
		return fmt.Sprintf("duty-begin %s via=%s state=%q", ev.Stamp, ev.Via, ev.State)
	case arbiter.EventDutyEnd:
		return fmt.Sprintf("duty-end next=%d", ev.Member)
	case arbiter.EventGrant:
		return fmt.Sprintf("grant r%d to %d at %s", ev.Resource, ev.Member, ev.Stamp)
	case arbiter.EventDeny:
		return fmt.Sprintf("deny r%d (held by %d)", ev.Resource, ev.Member)
	case arbiter.EventChat:
		scope := "all"
		if ev.Team != 0 {
			scope = fmt.Sprintf("team %d", ev.Team)
		}
		return fmt.Sprintf("chat from %d to %s: %q", ev.Member, scope, ev.Text)
	}
	return "?"
}

func (e *scenarioEnv) exec(line string) (out string) {
	e.out.Reset()
	e.quiet = false
	defer func() {
		if r := recover(); r != nil {
			out = fmt.Sprintf("panic: %v", r)
		}
	}()
	f := strings.Fields(line)
	cmd, args := f[0], f[1:]
	kv := map[string]string{}
	var pos []string
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok {
			kv[k] = v
		} else {
			pos = append(pos, a)
		}
	}
	id := func(s string) arbiter.MemberID {
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			panic(fmt.Sprintf("bad id %q", s))
		}
		return arbiter.MemberID(v)
	}
	dur := func(s string) time.Duration {
		d, err := time.ParseDuration(s)
		if err != nil {
			panic(err)
		}
		return d
	}
	num := func(s string) uint64 {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("bad number %q", s))
		}
		return v
	}
	node := func(i int) *simNode { return e.net.get(id(pos[i])) }
	check := func(r arbiter.Ready, err error, n *simNode) {
		if err != nil {
			fmt.Fprintf(e.out, "%d error: %v\n", n.id, err)
		}
		e.net.apply(n, r, "api")
	}
	match := func(m inflight) bool {
		if v, ok := kv["from"]; ok && m.from.id != id(v) {
			return false
		}
		if v, ok := kv["to"]; ok && m.to.id != id(v) {
			return false
		}
		if v, ok := kv["kind"]; ok && !strings.HasPrefix(arbiter.FormatMessage(m.b), strings.ToUpper(v)) {
			return false
		}
		return true
	}
	switch cmd {
	case "config":
		// config key=value …: the configuration of nodes added afterwards.
		for k, v := range kv {
			switch k {
			case "max":
				e.cfg.MaxMembers = int(num(v))
			case "teams":
				e.cfg.Teams = int(num(v))
			case "teamsize":
				e.cfg.TeamSize = int(num(v))
			case "drop":
				e.cfg.NeverDrop, e.cfg.DropAfter = false, dur(v)
			default:
				panic("unknown config " + k)
			}
		}
	case "add":
		for _, p := range pos {
			e.net.add(id(p), e.cfg)
		}
	case "create":
		n := node(0)
		r, err := n.node.Create(e.net.now)
		check(r, err, n)
	case "join":
		n := node(0)
		r, err := n.node.Join(e.net.now, arbiter.Team(num(orDefault(kv["team"], "0"))))
		check(r, err, n)
	case "leave":
		n := node(0)
		r, err := n.node.Leave(e.net.now)
		check(r, err, n)
	case "claim":
		n := node(0)
		for _, p := range pos[1:] {
			r, err := n.node.Claim(e.net.now, arbiter.ResourceID(num(p)))
			check(r, err, n)
		}
	case "chat":
		n := node(0)
		r, err := n.node.Chat(e.net.now, pos[1] == "team", strings.Join(pos[2:], " "))
		check(r, err, n)
	case "expel":
		n := node(0)
		r, err := n.node.Expel(e.net.now, id(pos[1]))
		check(r, err, n)
	case "state":
		n := node(0)
		if err := n.node.SetDutyState([]byte(strings.Join(args[1:], " "))); err != nil {
			fmt.Fprintf(e.out, "%d error: %v\n", n.id, err)
		}
	case "deliver", "drop":
		// One round: every queued message matching from=/to=/kind= is
		// delivered (or dropped); what they cause stays queued.
		var keep []inflight
		for _, m := range e.net.takePending() {
			switch {
			case !match(m):
				keep = append(keep, m)
			case cmd == "drop":
			default:
				e.net.deliver(m)
			}
		}
		for _, m := range keep {
			heap.Push(&e.net.queue, m)
		}
	case "hold":
		// hold from=/to=/kind=: set matching queued messages aside (a slow
		// path) until release.
		var keep []inflight
		for _, m := range e.net.takePending() {
			if match(m) {
				e.held = append(e.held, m)
			} else {
				keep = append(keep, m)
			}
		}
		for _, m := range keep {
			heap.Push(&e.net.queue, m)
		}
	case "release":
		for _, m := range e.held {
			e.net.deliver(m)
		}
		e.held = nil
	case "stabilize":
		for round := 0; len(e.net.queue) > 0; round++ {
			if round > 100 {
				panic("no quiescence after 100 rounds")
			}
			for _, m := range e.net.takePending() {
				e.net.deliver(m)
			}
		}
	case "tick":
		e.net.tickOnly(e.net.now.Add(dur(pos[0])))
	case "run":
		// run d: time passes with every message delivered as it arrives;
		// only events and refusals are printed, with their time.
		e.quiet = true
		e.net.run(e.net.now.Add(dur(pos[0])))
	case "anon":
		// anon id …: these nodes' transport does not authenticate them.
		for i := range pos {
			node(i).anon = true
		}
	case "freeze", "thaw":
		for i := range pos {
			node(i).frozen = cmd == "freeze"
		}
	case "partition":
		var groups [][]arbiter.MemberID
		var g []arbiter.MemberID
		for _, p := range pos {
			if p == "|" {
				groups, g = append(groups, g), nil
				continue
			}
			g = append(g, id(p))
		}
		e.net.partition(append(groups, g)...)
	case "cut", "connect":
		e.net.cut(id(pos[0]), id(pos[1]), cmd == "cut")
	case "heal":
		e.net.heal()
	case "forge":
		e.forge(node(0), pos[1], kv)
	case "status":
		ns := e.net.nodes
		if len(pos) > 0 {
			ns = nil
			for i := range pos {
				ns = append(ns, node(i))
			}
		}
		fmt.Fprintf(e.out, "now %s\n", e.net.now.Sub(simStart))
		for _, n := range ns {
			fmt.Fprintf(e.out, "%s\n", statusLine(n))
		}
	case "metrics":
		c := node(0).node.Metrics().Counters()
		var keys []string
		for k, v := range c {
			if v > 0 && (len(pos) < 2 || slices.Contains(pos[1:], k)) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(e.out, "%s=%d\n", k, c[k])
		}
	default:
		panic("unknown command " + cmd)
	}
	return strings.TrimRight(e.out.String(), "\n")
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func statusLine(n *simNode) string {
	s := n.node.Status()
	var b strings.Builder
	fmt.Fprintf(&b, "%d: %s", n.id, s.Phase)
	if n.frozen {
		b.WriteString(" frozen")
	}
	if s.Phase != arbiter.PhaseMember {
		return b.String()
	}
	duty := "-"
	switch {
	case s.Serving:
		duty = "serving"
	case s.HandOver != 0:
		duty = fmt.Sprintf("handing-over-to-%d", s.HandOver)
	case s.Leased:
		duty = "leased"
	case s.OnDuty:
		duty = "unleased"
	}
	parts := make([]string, len(s.View))
	for i, m := range s.View {
		parts[i] = fmt.Sprintf("%d:t%d", m.ID, m.Team)
	}
	fmt.Fprintf(&b, " %s holder=%d duty=%s view=[%s] grants=%d/%d", s.Stamp, s.Holder, duty, strings.Join(parts, " "), s.GrantHas, s.GrantSeq)
	return b.String()
}

// forge injects a hand-made message as if from sends it (the transport
// vouches for from, so the envelope may only lie about its content).
func (e *scenarioEnv) forge(from *simNode, kind string, kv map[string]string) {
	num := func(k string) uint64 {
		v, _ := strconv.ParseUint(kv[k], 10, 64)
		return v
	}
	st := from.node.Status()
	stamp := &pb.Stamp{Epoch: st.Stamp.Epoch, Lap: st.Stamp.Lap, Ts: st.Stamp.TS}
	if v, ok := kv["stamp"]; ok {
		var count, author, lap, ts uint64
		if _, err := fmt.Sscanf(v, "e%d.%d/l%d/t%d", &count, &author, &lap, &ts); err != nil {
			panic(err)
		}
		stamp = &pb.Stamp{Epoch: count<<32 | author, Lap: lap, Ts: uint32(ts)}
	}
	sender := uint32(from.id)
	if v, ok := kv["sender"]; ok {
		sender = uint32(num("sender"))
		_ = v
	}
	env := &pb.Envelope{Game: st.Game, Sender: sender, Stamp: stamp}
	switch kind {
	case "grant":
		env.Body = &pb.Envelope_Grant{Grant: &pb.Grant{Entry: &pb.GrantEntry{
			Seq: num("seq"), Stamp: stamp, Resource: num("r"), To: uint32(num("to")),
		}}}
	case "ping":
		env.Body = &pb.Envelope_Ping{Ping: &pb.Ping{Seq: max(num("seq"), 1)}}
	case "chat":
		env.Body = &pb.Envelope_Chat{Chat: &pb.Chat{Text: orDefault(kv["text"], "hi")}}
	case "join":
		env = &pb.Envelope{Body: &pb.Envelope_Join{Join: &pb.Join{Nonce: uint32(max(num("nonce"), 1)), Id: uint32(num("id"))}}}
	case "garbage":
		e.net.apply(from, arbiter.Ready{Messages: [][]byte{bytes.Repeat([]byte{0xff}, 7)}}, "forge")
		return
	default:
		panic("cannot forge " + kind)
	}
	b, err := proto.Marshal(env)
	if err != nil {
		panic(err)
	}
	e.net.apply(from, arbiter.Ready{Messages: [][]byte{b}}, "forge")
}
