package tssbench

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"time"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/crimp"
)

// Link is the modelled network between two mirrors: a one-way delay,
// uniform jitter on top, and a loss rate, applied by crimp.MemNetwork.
type Link struct {
	Delay  time.Duration `json:"delay_ns"`
	Jitter time.Duration `json:"jitter_ns"`
	Loss   float64       `json:"loss"`
}

// Arrival is one command reaching the observed mirror.
type Arrival struct {
	At  int64
	Cmd game.Command
}

// ArrivalStats summarises how the commands reached the observed mirror.
type ArrivalStats struct {
	Sent      int `json:"sent"`
	Local     int `json:"local"`     // the observer's own commands (latency 0)
	Remote    int `json:"remote"`    // delivered over CRIMP
	Repaired  int `json:"repaired"`  // ... of which recovered by a repair
	Lost      int `json:"lost"`      // never delivered (older than CRIMP's history)
	Duplicate int `json:"duplicate"` // delivered twice (must be 0)
	// Remote latency: arrival minus stamp.
	Mean time.Duration `json:"mean_ns"`
	P50  time.Duration `json:"p50_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	Max  time.Duration `json:"max_ns"`
}

// Arrivals sends every command from its ingress mirror over CRIMP — one
// crimp.Member per mirror on a crimp.MemNetwork with link between every
// two mirrors, on a crimp.SimClock — and returns, in arrival order, when
// each command reached mirror observer: at once for its own commands (the
// ingress feeds its own TSS), at CRIMP's delivery for the others,
// repairs of lost packets included. Sessions run for a second first so
// that CRIMP's delay estimates are warm.
func Arrivals(ctx context.Context, cmds []game.Command, mirrors int, observer uint32, link Link, history time.Duration, seed int64) ([]Arrival, ArrivalStats, error) {
	var st ArrivalStats
	if len(cmds) == 0 {
		return nil, st, nil
	}
	const warmup = time.Second
	start := time.Unix(0, cmds[0].Stamp).Add(-warmup)
	clock := crimp.NewSimClock(start)
	net := crimp.NewMemNetwork(clock, seed)
	defer net.Close()
	ids := make([]crimp.MemberID, mirrors)
	for i := range ids {
		ids[i] = crimp.MemberID(i + 1)
		for j := range i {
			net.SetLink(site(ids[j]), site(ids[i]), crimp.LinkParams{Delay: link.Delay, Jitter: link.Jitter, Loss: link.Loss})
		}
	}
	var arrivals []Arrival
	seen := map[[2]uint64]bool{}
	var decodeErr error
	members := map[uint32]*crimp.Member{}
	for _, id := range ids {
		pc := crimp.DefaultConfig()
		pc.ID, pc.History = id, history
		pc.Peers = slices.DeleteFunc(slices.Clone(ids), func(x crimp.MemberID) bool { return x == id })
		node, err := crimp.New(pc, rand.New(rand.NewSource(seed*1009+int64(id))))
		if err != nil {
			return nil, st, err
		}
		var opts crimp.MemberOptions
		if uint32(id) == observer {
			opts.OnDeliver = func(d crimp.Delivery) {
				c, err := game.UnmarshalCommand(d.Payload)
				if err != nil {
					decodeErr = err
					return
				}
				k := [2]uint64{uint64(c.Mirror), c.Seq}
				if seen[k] {
					st.Duplicate++
					return
				}
				seen[k] = true
				if d.Via == crimp.ViaRepair {
					st.Repaired++
				}
				arrivals = append(arrivals, Arrival{At: d.ReceivedAt.UnixNano(), Cmd: c})
			}
		}
		m := crimp.NewMember(node, net.Endpoint(site(id)), clock, opts)
		if err := m.Start(); err != nil {
			return nil, st, err
		}
		defer m.Close()
		members[uint32(id)] = m
	}
	var sendErr error
	for _, c := range cmds {
		m, ok := members[c.Mirror]
		if !ok {
			return nil, st, fmt.Errorf("command from mirror %d, only %d mirrors", c.Mirror, mirrors)
		}
		payload, err := c.MarshalBinary()
		if err != nil {
			return nil, st, err
		}
		c := c
		clock.AfterFunc(time.Unix(0, c.Stamp).Sub(clock.Now()), func() {
			if c.Mirror == observer {
				arrivals = append(arrivals, Arrival{At: c.Stamp, Cmd: c})
			}
			if err := m.Send(payload); err != nil && sendErr == nil {
				sendErr = err
			}
		})
	}
	end := time.Unix(0, cmds[len(cmds)-1].Stamp).Add(2 * history)
	for clock.Now().Before(end) {
		if err := ctx.Err(); err != nil {
			return nil, st, err
		}
		clock.RunFor(time.Second)
	}
	if decodeErr != nil || sendErr != nil {
		return nil, st, fmt.Errorf("arrivals: decode %v, send %v", decodeErr, sendErr)
	}
	slices.SortStableFunc(arrivals, func(a, b Arrival) int {
		if a.At != b.At {
			return int(min(max(a.At-b.At, -1), 1))
		}
		return game.CompareCommands(a.Cmd, b.Cmd)
	})
	st.Sent = len(cmds)
	var lat []time.Duration
	for _, a := range arrivals {
		if a.Cmd.Mirror == observer {
			st.Local++
			continue
		}
		st.Remote++
		lat = append(lat, time.Duration(a.At-a.Cmd.Stamp))
	}
	st.Lost = st.Sent - len(arrivals)
	if len(lat) > 0 {
		slices.Sort(lat)
		var sum time.Duration
		for _, l := range lat {
			sum += l
		}
		st.Mean = sum / time.Duration(len(lat))
		q := func(p float64) time.Duration { return lat[min(int(p*float64(len(lat))), len(lat)-1)] }
		st.P50, st.P99, st.P999, st.Max = q(0.5), q(0.99), q(0.999), lat[len(lat)-1]
	}
	return arrivals, st, nil
}

func site(id crimp.MemberID) string { return fmt.Sprintf("mirror-%d", id) }
