package crimp

import (
	"math/rand"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// TestAuthorityPauseIsNotMembersSilence: an authority whose process is
// not stepped for longer than DropAfter (a stall, a starved machine)
// takes the gap as its own pause on the tick that ends it, which comes
// before it reads what the member sent meanwhile: the member is not
// dropped. A member that then goes silent is dropped DropAfter of the
// authority's running time later, as before.
func TestAuthorityPauseIsNotMembersSilence(t *testing.T) {
	cfg := Config{History: time.Second, SessionInterval: 50 * time.Millisecond, DropAfter: 300 * time.Millisecond, TickInterval: 10 * time.Millisecond}
	authCfg := cfg
	authCfg.ID, authCfg.Peers, authCfg.Authority, authCfg.AuthorityKey = 1, []MemberID{2}, true, testAuthorityKey
	auth, err := New(authCfg, rand.New(rand.NewSource(1)))
	if err != nil {
		t.Fatal(err)
	}
	memberCfg := cfg
	memberCfg.ID, memberCfg.Peers, memberCfg.AuthorityPublicKey = 2, []MemberID{1}, testAuthorityPub
	member, err := New(memberCfg, rand.New(rand.NewSource(2)))
	if err != nil {
		t.Fatal(err)
	}
	authAddr, memberAddr := netip.MustParseAddrPort("127.0.0.1:1"), netip.MustParseAddrPort("127.0.0.1:2")
	dropped := func(r Ready) bool {
		return slices.ContainsFunc(r.Events, func(e Event) bool { return e.Kind == EventMemberDropped && e.Member == 2 })
	}
	toAuth := func(now time.Time, packets [][]byte) {
		for _, b := range packets {
			if r, _ := auth.Step(now, memberAddr, b); dropped(r) {
				t.Fatalf("member dropped at %v while it sends", now.Sub(simStart))
			}
		}
	}
	now := simStart
	// Both run, every packet arriving at once.
	for end := now.Add(time.Second); now.Before(end); now = now.Add(cfg.TickInterval) {
		ra := auth.Tick(now)
		if dropped(ra) {
			t.Fatalf("member dropped at %v while it sends", now.Sub(simStart))
		}
		for _, b := range ra.Packets {
			rm, _ := member.Step(now, authAddr, b)
			toAuth(now, rm.Packets)
		}
		toAuth(now, member.Tick(now).Packets)
	}
	// The authority stalls for 2 s; the member's packets wait for it.
	var queued [][]byte
	for end := now.Add(2 * time.Second); now.Before(end); now = now.Add(cfg.TickInterval) {
		queued = append(queued, member.Tick(now).Packets...)
	}
	if len(queued) == 0 {
		t.Fatal("the member sent nothing during the stall")
	}
	// The tick that ends the stall comes before the queued packets.
	if dropped(auth.Tick(now)) {
		t.Fatal("the authority counted its own stall as the member's silence and dropped it")
	}
	toAuth(now, queued)
	if got := auth.Metrics().Pauses.Load(); got != 1 {
		t.Fatalf("pauses counted %d, want 1", got)
	}
	if !slices.Contains(auth.Members(), 2) {
		t.Fatalf("members after the stall %v", auth.Members())
	}
	// The member goes silent: dropped after DropAfter of running time.
	silentFrom := now
	for end := now.Add(2 * time.Second); ; now = now.Add(cfg.TickInterval) {
		if !now.Before(end) {
			t.Fatal("the silent member was never dropped")
		}
		if dropped(auth.Tick(now)) {
			break
		}
	}
	if silent := now.Sub(silentFrom); silent < cfg.DropAfter {
		t.Fatalf("dropped after %v of silence, before DropAfter %v", silent, cfg.DropAfter)
	}
}
