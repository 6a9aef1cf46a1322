package arbiter_test

import (
	"fmt"
	"os"
	"strconv"
	"testing"
)

func TestDebugSeed(t *testing.T) {
	v := os.Getenv("ARB_SEED")
	if v == "" {
		t.Skip()
	}
	seed, _ := strconv.ParseInt(v, 10, 64)
	defer func() {
		for _, n := range dbgNet.nodes {
			fmt.Println(statusLine(n), n.node.Metrics().Counters()["refused_out_of_turn"])
		}
	}()
	st := runProperty(t, seed)
	fmt.Printf("%+v\n", st)
}

func init() {
	debugGrant = func(c *checker, from *simNode, line string) {
		if os.Getenv("ARB_TRACE") != "" {
			fmt.Printf("%v %d %s\n", c.net.now.Sub(simStart), from.id, line)
		}
	}
}

func TestDebugLaps(t *testing.T) {
	if os.Getenv("ARB_LAPS") == "" {
		t.Skip()
	}
	seed, _ := strconv.ParseInt(os.Getenv("ARB_LAPS"), 10, 64)
	runProperty(t, seed)
	c := dbgChecker
	for k, v := range c.lapSeen {
		fmt.Println("lap", k, v[0].Sub(simStart), v[1].Sub(simStart), "changed", c.lapHasChange[k], "later", c.laterLap(k[0], k[1]))
	}
}

func init() {
	debugSuperseded = func(c *checker, r uint64, first, second string) {
		if os.Getenv("ARB_SUP") != "" {
			fmt.Printf("SUPERSEDED r%d first %s second %s\n", r, first, second)
		}
	}
}

func init() {
	debugStep = func(c *checker, n *simNode, cause string) {
		if os.Getenv("ARB_WATCH") == "" || strconv.Itoa(int(n.id)) != os.Getenv("ARB_WATCH") {
			return
		}
		t := c.net.now.Sub(simStart).Seconds()
		if t < 20.3 || t > 20.9 {
			return
		}
		st := n.node.Status()
		has := false
		for _, g := range n.node.Grants() {
			if g.Resource == 1284 {
				has = true
			}
		}
		fmt.Printf("W %.4f %d %s %s have=%d last=%d r1284=%t resets=%d serving=%t\n", t, n.id, cause, st.Stamp, st.GrantHas, st.GrantSeq, has, n.node.Metrics().LogResets.Load(), st.Serving)
	}
}
