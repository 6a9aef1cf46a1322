package arbiter_test

import (
	"errors"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/game/arbiter"
)

func TestConfigValidate(t *testing.T) {
	if err := arbiter.DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, tc := range []struct {
		name string
		cfg  func(*arbiter.Config)
		want string // a value the error must name
	}{
		{"too many members", func(c *arbiter.Config) { c.MaxMembers = 40 }, "MaxMembers 40"},
		{"teams over members", func(c *arbiter.Config) { c.Teams = 9 }, "Teams 9"},
		{"no room", func(c *arbiter.Config) { c.TeamSize = 3 }, "TeamSize 3"},
		{"lease under heartbeat", func(c *arbiter.Config) { c.LeaseTimeout = 50 * time.Millisecond }, "LeaseTimeout 50ms"},
		{"takeover inside lease", func(c *arbiter.Config) { c.TakeoverTimeout = 450 * time.Millisecond }, "TakeoverTimeout 450ms"},
		{"handoff timeout", func(c *arbiter.Config) { c.HandoffTimeout = 10 * time.Millisecond }, "HandoffTimeout 10ms"},
		{"drop before takeover", func(c *arbiter.Config) { c.DropAfter = 500 * time.Millisecond }, "DropAfter 500ms"},
		{"tiny log", func(c *arbiter.Config) { c.LogWindow = 3 }, "LogWindow 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := arbiter.DefaultConfig()
			tc.cfg(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %q", err, tc.want)
			}
			if _, err := arbiter.New(cfg, rand.New(rand.NewSource(1))); err == nil {
				t.Fatal("New accepted the configuration")
			}
		})
	}
	if _, err := arbiter.New(arbiter.Config{}, nil); err == nil {
		t.Fatal("New without a rand.Rand")
	}
}

func TestAPIErrors(t *testing.T) {
	n, err := arbiter.New(arbiter.Config{ID: 1}, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	now := simStart
	if _, err := n.Claim(now, 1); !errors.Is(err, arbiter.ErrNotMember) {
		t.Fatalf("Claim before joining: %v", err)
	}
	if _, err := n.Chat(now, false, "hi"); !errors.Is(err, arbiter.ErrNotMember) {
		t.Fatalf("Chat before joining: %v", err)
	}
	if err := n.SetDutyState([]byte("x")); !errors.Is(err, arbiter.ErrNotOnDuty) {
		t.Fatalf("SetDutyState off duty: %v", err)
	}
	if _, err := n.Create(now); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Join(now, 0); !errors.Is(err, arbiter.ErrBusy) {
		t.Fatalf("Join in a game: %v", err)
	}
	if _, err := n.Chat(now, false, strings.Repeat("x", arbiter.MaxChatBytes+1)); err == nil {
		t.Fatal("an oversized chat line")
	}
	if err := n.SetDutyState(make([]byte, arbiter.MaxDutyState+1)); err == nil {
		t.Fatal("oversized duty state")
	}
	if _, err := n.Expel(now, 1); err == nil {
		t.Fatal("expelled itself")
	}
	// Alone in its game it is leased at once and grants its own claims.
	r, err := n.Claim(now, 7)
	if err != nil || len(r.Events) != 1 || r.Events[0].Kind != arbiter.EventGrant || r.Events[0].Member != 1 {
		t.Fatalf("own claim alone: %+v, %v", r, err)
	}
	for i := range n.Config().MaxOwnClaims {
		// Answered at once: they never pile up.
		if _, err := n.Claim(now, arbiter.ResourceID(100+i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.Grants(); len(got) != n.Config().MaxOwnClaims+1 {
		t.Fatalf("%d grants remembered", len(got))
	}
	r, err = n.Leave(now)
	if err != nil || r.Events[len(r.Events)-1].Kind != arbiter.EventLeft || n.Status().Phase != arbiter.PhaseIdle {
		t.Fatalf("leave alone: %+v, %v", r, err)
	}
}

// TestStepRefusesTransportMismatch: the transport's word on who sent a
// message beats the envelope's.
func TestStepRefusesTransportMismatch(t *testing.T) {
	net := newSimNet(1)
	a := net.add(1, arbiter.Config{})
	b := net.add(2, arbiter.Config{})
	var msgs [][]byte
	net.onSend = func(_ *simNode, m []byte) { msgs = append(msgs, m) }
	r, _ := a.node.Create(net.now)
	net.apply(a, r, "api")
	if _, err := b.node.Step(net.now, 3, msgs[0]); err == nil {
		t.Fatal("accepted member 1's PING from member 3")
	}
	if got := b.node.Metrics().Refused[arbiter.RefusedForgedSender].Load(); got != 1 {
		t.Fatalf("forged_sender counted %d times", got)
	}
}

func TestCollector(t *testing.T) {
	n, err := arbiter.New(arbiter.Config{ID: 1}, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Step(simStart, 0, []byte{0xff, 0xff}); err == nil {
		t.Fatal("garbage decoded")
	}
	if _, err := n.Create(simStart); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(n.Metrics().Collector(prometheus.Labels{"member": "1"}))
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					name += "{" + l.GetValue() + "}"
				}
			}
			found[name] = m.GetCounter().GetValue()
		}
	}
	if found["arbiter_refused_total{malformed}"] != 1 || found["arbiter_terms_total"] != 1 || found["arbiter_pings_sent_total"] != 1 {
		t.Fatalf("collected %v", found)
	}
}
