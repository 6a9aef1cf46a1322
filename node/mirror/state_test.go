package mirror

import (
	"fmt"
	"slices"
	"testing"

	"github.com/overworld-p2p/overworld/game"
)

func newTestState(t *testing.T) *State {
	t.Helper()
	w, err := game.NewWorld(testGame())
	if err != nil {
		t.Fatal(err)
	}
	return NewState(w, 1)
}

func cmdOf(mirror uint32, seq uint64, op game.CommandOp, p game.PlayerID) Command {
	c := Command{Command: game.Command{Stamp: int64(seq), Mirror: mirror, Seq: seq, Op: op, Player: p}}
	switch op {
	case game.CommandJoin:
		c.Name = string(p)
	case game.CommandInput:
		c.Input = game.Input{Player: p, MoveX: 127}
	}
	return c
}

// TestStateIngressRule: the world takes a player's commands only from its
// ingress mirror; a join moves the player; a release takes out only the
// released mirror's players and only from the authority.
func TestStateIngressRule(t *testing.T) {
	s := newTestState(t)
	s.Advance([]Command{cmdOf(2, 1, game.CommandJoin, "ann"), cmdOf(3, 1, game.CommandJoin, "bob")})
	if s.OwnerOf("ann") != 2 || s.OwnerOf("bob") != 3 {
		t.Fatalf("owners %v", s.Owners())
	}
	ann0, _ := s.World().Player("ann")
	// Mirror 3 moving ann: refused; mirror 2 moving ann: taken.
	s.Advance([]Command{cmdOf(3, 2, game.CommandInput, "ann")})
	if p, _ := s.World().Player("ann"); p.Pos != ann0.Pos {
		t.Fatal("an input from another mirror than ann's ingress moved her")
	}
	if s.Refused()[RefusedNotIngress] != 1 {
		t.Fatalf("refused %v", s.Refused())
	}
	s.Advance([]Command{cmdOf(2, 2, game.CommandInput, "ann")})
	if p, _ := s.World().Player("ann"); p.Pos == ann0.Pos {
		t.Fatal("ann's own ingress could not move her")
	}
	// A leave from the wrong mirror does nothing.
	s.Advance([]Command{cmdOf(3, 3, game.CommandLeave, "ann")})
	if _, ok := s.World().Player("ann"); !ok {
		t.Fatal("mirror 3 made ann leave")
	}
	// Ann reconnects through mirror 3: she moves there, keeping her state.
	before, _ := s.World().Player("ann")
	s.Advance([]Command{cmdOf(3, 4, game.CommandJoin, "ann")})
	after, _ := s.World().Player("ann")
	if s.OwnerOf("ann") != 3 || after.Pos != before.Pos || after.Score != before.Score {
		t.Fatalf("takeover: owner %d, %+v -> %+v", s.OwnerOf("ann"), before, after)
	}
	// A release by a non-authority is refused; by the authority it takes
	// out mirror 3's players (ann and bob), not others.
	s.Advance([]Command{cmdOf(2, 5, game.CommandJoin, "cy")})
	rel := Command{Command: game.Command{Stamp: 10, Mirror: 2, Seq: 6}, Release: 3}
	s.Advance([]Command{rel})
	if s.Refused()[RefusedRelease] != 1 || len(s.World().Players()) != 3 {
		t.Fatalf("a release from mirror 2 was taken: refused %v, players %d", s.Refused(), len(s.World().Players()))
	}
	rel.Mirror, rel.Seq = 1, 1
	rec := s.Advance([]Command{rel})
	if got := s.World().Players(); len(got) != 1 || got[0].ID != "cy" {
		t.Fatalf("after the release: %v", got)
	}
	left := 0
	for _, e := range rec.Events {
		if e.Kind == game.EventLeft {
			left++
		}
	}
	if left != 2 || len(s.Owners()) != 1 {
		t.Fatalf("release: %d left events, owners %v", left, s.Owners())
	}
}

// TestStateCopyHashAndEncoding: CopyFrom makes an equal state, the hash
// covers the ingress table, and the encoding round-trips.
func TestStateCopyHashAndEncoding(t *testing.T) {
	s := newTestState(t)
	s.Advance([]Command{cmdOf(2, 1, game.CommandJoin, "ann"), cmdOf(3, 1, game.CommandJoin, "bob")})
	for i := range 40 {
		s.Advance([]Command{cmdOf(2, uint64(2+i), game.CommandInput, "ann")})
	}
	c := s.Clone()
	if c.Hash() != s.Hash() {
		t.Fatal("a copy hashes differently")
	}
	c.Advance([]Command{cmdOf(2, 100, game.CommandJoin, "bob")}) // bob moves to mirror 2: only the table changes
	if c.Hash() == s.Hash() {
		t.Fatal("the hash does not cover the ingress table")
	}
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	d, err := UnmarshalState(b, testGame())
	if err != nil {
		t.Fatal(err)
	}
	if d.Hash() != s.Hash() || d.Refused() != s.Refused() {
		t.Fatal("decoded state differs")
	}
	other := testGame()
	other.Seed++
	if _, err := UnmarshalState(b, other); err == nil {
		t.Fatal("a state of another world config decoded")
	}
}

// TestStateDepartures: a leave (from the ingress) or a release records the
// player's character at the tick before it, hashed and transferred with
// the state; departures are forgotten after keepDepartedSeconds and never
// more than maxDeparted are kept.
func TestStateDepartures(t *testing.T) {
	s := newTestState(t)
	s.Advance([]Command{cmdOf(2, 1, game.CommandJoin, "ann"), cmdOf(3, 1, game.CommandJoin, "bob")})
	for i := range 20 {
		s.Advance([]Command{cmdOf(2, uint64(2+i), game.CommandInput, "ann")})
	}
	s.Advance([]Command{cmdOf(3, 2, game.CommandLeave, "ann")}) // not ann's ingress: refused
	if len(s.Departures()) != 0 {
		t.Fatalf("a refused leave recorded %v", s.Departures())
	}
	annBefore, _ := s.World().Player("ann")
	before := s.Hash()
	s.Advance([]Command{cmdOf(2, 30, game.CommandLeave, "ann")})
	leave := s.Tick()
	d, ok := s.Departed("ann", leave)
	if !ok || d.Character != game.CharacterOf(annBefore) {
		t.Fatalf("ann's departure at %d: %+v %v", leave, d, ok)
	}
	withLeave := s.Clone()
	withLeave.departed = nil
	if withLeave.Hash() == s.Hash() || s.Hash() == before {
		t.Fatal("the hash does not cover the departures")
	}
	b, err := s.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	got, err := UnmarshalState(b, testGame())
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash() != s.Hash() || !slices.Equal(got.Departures(), s.Departures()) {
		t.Fatalf("decoded departures %v, encoded %v", got.Departures(), s.Departures())
	}
	// A release records bob too.
	rel := cmdOf(1, 5, game.CommandInput, "")
	rel.Release = 3
	s.Advance([]Command{rel})
	if _, ok := s.Departed("bob", s.Tick()); !ok {
		t.Fatalf("the release recorded %v", s.Departures())
	}
	for range keepDepartedSeconds * testGame().TickRate {
		s.Advance(nil)
	}
	if n := len(s.Departures()); n != 0 {
		t.Fatalf("%d departures left after %d s", n, keepDepartedSeconds)
	}
	for batch := range (maxDeparted + 5 + 49) / 50 {
		var joins, leaves []Command
		for i := batch * 50; i < min((batch+1)*50, maxDeparted+5); i++ {
			p := game.PlayerID(fmt.Sprintf("p%03d", i))
			joins = append(joins, cmdOf(2, uint64(100+2*i), game.CommandJoin, p))
			leaves = append(leaves, cmdOf(2, uint64(101+2*i), game.CommandLeave, p))
		}
		s.Advance(joins)
		s.Advance(leaves)
	}
	if ds := s.Departures(); len(ds) != maxDeparted || ds[0].Player != "p005" {
		t.Fatalf("%d departures kept, oldest %q", len(ds), ds[0].Player)
	}
}

// TestEventStateRoles: under the event protocol a guessing state runs an
// action at once, the last (confirming) state only as decided; each runs
// an action once however often its command or decision comes; an action
// the authority decided for another tick is not guessed; and a player's
// move and action of one tick both take effect.
func TestEventStateRoles(t *testing.T) {
	var table decisionTable
	guess, confirm := newTestState(t), newTestState(t)
	guess.ev, confirm.ev = &eventLane{decided: &table}, &eventLane{confirming: true, decided: &table}
	join := cmdOf(2, 1, game.CommandJoin, "ann")
	guess.Advance([]Command{join})
	confirm.Advance([]Command{join})
	at := guess.Tick() + 1
	move := cmdOf(2, 2, game.CommandInput, "ann")
	act := Command{Command: game.Command{Stamp: 3, Mirror: 2, Seq: 3, Op: game.CommandInput, Player: "ann", Input: game.Input{Player: "ann", Fight: true}}}
	decision := act
	decision.Decision = act.Stamp
	before, _ := guess.World().Player("ann")
	guess.Advance([]Command{move, act})
	confirm.Advance([]Command{move, act})
	if tk, ok := guess.ranAt(actionKey{2, 3}); !ok || tk != at {
		t.Fatalf("the guessing state did not run the action in tick %d: %v %v", at, tk, ok)
	}
	if _, ok := confirm.ranAt(actionKey{2, 3}); ok {
		t.Fatal("the confirming state ran an undecided action")
	}
	after, _ := guess.World().Player("ann")
	if after.Pos == before.Pos {
		t.Fatal("the move of the tick with an action was lost to the action's input")
	}
	if p, _ := confirm.World().Player("ann"); p.Pos != after.Pos {
		t.Fatal("the two states moved ann differently")
	}
	// The decision arrives late at the guessing state (which ran the guess)
	// and twice at the confirming one: each runs the action once.
	guess.Advance([]Command{decision})
	confirm.Advance([]Command{decision})
	confirm.Advance([]Command{decision})
	if tk, ok := confirm.ranAt(actionKey{2, 3}); !ok || tk != at+1 {
		t.Fatalf("the confirming state ran the decision in tick %d (%v), want %d", tk, ok, at+1)
	}
	if n := len(guess.ran); n != 1 {
		t.Fatalf("the guessing state ran the action %d times", n)
	}
	// An action decided for another tick is not guessed.
	other := act
	other.Seq, other.Stamp = 9, 9
	table.set(actionKey{2, 9}, guess.Tick()+10)
	guess.Advance([]Command{other})
	if _, ok := guess.ranAt(actionKey{2, 9}); ok {
		t.Fatal("the guessing state ran an action decided for another tick")
	}
	// Copies carry what a state ran, but not its role.
	c := &State{ev: &eventLane{decided: &table}}
	c.CopyFrom(confirm)
	if c.ev.confirming || len(c.ran) != 1 {
		t.Fatalf("copy: confirming %v, ran %v", c.ev.confirming, c.ran)
	}
}
