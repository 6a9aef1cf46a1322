package tss

import (
	"testing"
)

var (
	_ Engine[fxCmd] = (*fxSync)(nil)
	_ Engine[fxCmd] = (*TimeWarp[*fxState, fxCmd, fxRecord])(nil)
)

// Time Warp on the property test's runs: it accepts exactly the commands
// the synchronizer accepts, and its state is the in-order run of them
// after every delivery.
func TestTimeWarpIsInOrder(t *testing.T) {
	var snapshots, restores, syncRollbacks uint64
	for seed := range uint64(300) {
		run := randomRun(seed, 1+int(seed%4))
		tw, err := NewTimeWarp[*fxState, fxCmd, fxRecord](run.cfg, newFx(), newFx, Options[fxCmd]{})
		if err != nil {
			t.Fatal(err)
		}
		s, _ := newFxSync(run.cfg, Options[fxCmd]{})
		var accepted []fxCmd
		for i, d := range run.deliveries {
			v := tw.Deliver(d.cmd, d.at)
			if sv := s.Deliver(d.cmd, d.at); sv != v {
				t.Fatalf("seed %d: Time Warp says %v, the synchronizer %v", seed, v, sv)
			}
			if v == Accepted {
				accepted = append(accepted, d.cmd)
			}
			if i%10 == 0 {
				ref := fxReference(run.cfg, accepted, tw.State().Tick())
				if tw.State().Hash() != ref[tw.State().Tick()] {
					t.Fatalf("seed %d: Time Warp state at tick %d is not the in-order run", seed, tw.State().Tick())
				}
			}
		}
		tw.Tick(run.end)
		s.Tick(run.end)
		ref := fxReference(run.cfg, accepted, tw.State().Tick())
		if tw.State().Hash() != ref[tw.State().Tick()] {
			t.Fatalf("seed %d: Time Warp ends off the in-order run", seed)
		}
		if tw.Snapshots() > 3 {
			t.Fatalf("seed %d: %d snapshots held after the window closed", seed, tw.Snapshots())
		}
		held := len(tw.pending)
		for _, lt := range tw.log {
			held += len(lt.cmds)
		}
		if tw.Pending() != held {
			t.Fatalf("seed %d: %d commands counted pending, %d held", seed, tw.Pending(), held)
		}
		snapshots += tw.Metrics().Copies.Load()
		restores += tw.Metrics().Rollbacks.Load()
		syncRollbacks += s.Metrics().Rollbacks.Load()
	}
	t.Logf("Time Warp: %d snapshots, %d restores; TSS: %d rollbacks (copies)", snapshots, restores, syncRollbacks)
}
