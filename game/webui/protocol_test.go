package webui

import (
	"strings"
	"testing"
)

func TestDecodeClientMessage(t *testing.T) {
	good := map[string]clientMessage{
		`{"type":"input","move":[1,-1]}`:                 {Control: &Control{MoveX: 1, MoveY: -1}},
		`{"type":"input","move":[0,0],"eat":true}`:       {Control: &Control{Eat: true}},
		`{"type":"input","fight":true,"target":"peer2"}`: {Control: &Control{Fight: true, Target: "peer2"}},
		`{"type":"chat","text":"hello there"}`:           {Chat: &chatLine{Text: "hello there"}},
		`{"type":"chat","text":"psst","to":"Ada"}`:       {Chat: &chatLine{Text: "psst", To: "Ada"}},
	}
	for in, want := range good {
		got, err := decodeClientMessage([]byte(in))
		if err != nil {
			t.Errorf("%s: %v", in, err)
			continue
		}
		if (got.Control == nil) != (want.Control == nil) || got.Control != nil && *got.Control != *want.Control ||
			(got.Chat == nil) != (want.Chat == nil) || got.Chat != nil && *got.Chat != *want.Chat {
			t.Errorf("%s: got %+v", in, got)
		}
	}
	bad := []string{
		``,
		`null`,
		`[]`,
		`{"type":"input","move":[2,0]}`,
		`{"type":"input","move":[0]}`,
		`{"type":"input","move":[0,0,0]}`,
		`{"type":"input","move":"left"}`,
		`{"type":"input","teleport":true}`,
		`{"type":"input","text":"x"}`,
		`{"type":"chat","text":""}`,
		`{"type":"chat","text":"   "}`,
		`{"type":"chat","text":"a\u0007b"}`,
		`{"type":"chat","text":"` + strings.Repeat("é", MaxChatRunes+1) + `"}`,
		`{"type":"chat","text":"hi","eat":true}`,
		`{"type":"dance"}`,
		`{"move":[0,0]}`,
		`{"type":"input"} {"type":"input"}`,
		`{"type":"input","target":"` + strings.Repeat("x", MaxTargetLen+1) + `"}`,
		strings.Repeat(" ", MaxClientMessageBytes+1),
	}
	for _, in := range bad {
		if m, err := decodeClientMessage([]byte(in)); err == nil {
			t.Errorf("accepted %q as %+v", in, m)
		}
	}
}

func FuzzDecodeClientMessage(f *testing.F) {
	f.Add([]byte(`{"type":"input","move":[1,0],"eat":true}`))
	f.Add([]byte(`{"type":"chat","text":"hi","to":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeClientMessage(b)
		if err != nil {
			return
		}
		switch {
		case m.Control != nil && m.Chat == nil:
			if err := m.Control.Validate(); err != nil {
				t.Fatalf("accepted an invalid control: %v", err)
			}
		case m.Chat != nil && m.Control == nil:
			if err := ValidateChat(m.Chat.Text, m.Chat.To); err != nil {
				t.Fatalf("accepted an invalid chat: %v", err)
			}
		default:
			t.Fatalf("decoded to %+v", m)
		}
	})
}

func TestInputLatch(t *testing.T) {
	var l InputLatch
	if err := l.Apply(Control{MoveX: 1, Eat: true}); err != nil {
		t.Fatal(err)
	}
	if err := l.Apply(Control{MoveX: 1, MoveY: -1, Fight: true, Target: "p2"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Apply(Control{MoveX: 3}); err == nil {
		t.Fatal("an out-of-range move was latched")
	}
	want := Control{MoveX: 1, MoveY: -1, Eat: true, Fight: true, Target: "p2"}
	if got := l.Take(); got != want {
		t.Fatalf("first tick %+v, want %+v", got, want)
	}
	// The direction stays held; the actions happened once.
	if got := l.Take(); got != (Control{MoveX: 1, MoveY: -1}) {
		t.Fatalf("second tick %+v", got)
	}
}
