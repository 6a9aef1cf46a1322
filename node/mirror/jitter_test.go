package mirror

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/overworld-p2p/overworld/node/crimp"
)

func TestJitterExperiment(t *testing.T) {
	if os.Getenv("EXP") == "" {
		t.Skip()
	}
	dk, _ := strconv.Atoi(os.Getenv("DK"))
	fec, _ := strconv.Atoi(os.Getenv("FEC"))
	c := newCluster(t, clusterOpts{mirrors: 3, link: crimp.LinkParams{Jitter: 100 * time.Millisecond, Loss: 0.10}, seed: 1,
		delays: []time.Duration{0, 100 * time.Millisecond, time.Duration(dk) * time.Millisecond}, history: max(time.Second, time.Duration(dk)*time.Millisecond), fec: fec})
	for i := range 6 {
		c.bot(i%3, c.player(fmt.Sprintf("bot%d", i)), uint64(i))
	}
	c.run(10 * time.Minute)
	n, bad := c.agreement()
	t.Logf("compared %d checkpoints; %s", n, bad)
	for i, s := range c.mirrors {
		st := s.Metrics()
		t.Logf("mirror %d: sent %d recv %d agreed %d mismatched %d resyncs %d refused %v tss %v", i+1, st.CommandsSent, st.CommandsReceived, st.Agreed, st.Mismatched, st.Resyncs, st.Refused, st.TSS)
	}
}
