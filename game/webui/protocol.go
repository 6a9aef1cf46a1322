package webui

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// MaxClientMessageBytes bounds a frame from the page; a longer one closes
// the connection (WebSocket status 1009).
const MaxClientMessageBytes = 2048

// clientFrame is the JSON the page sends. Type selects which fields count:
//
//	{"type":"input","move":[dx,dy],"eat":bool,"fight":bool,"target":"id"}
//	{"type":"chat","text":"…","to":"name"}
type clientFrame struct {
	Type   string `json:"type"`
	Move   []int  `json:"move,omitempty"`
	Eat    bool   `json:"eat,omitempty"`
	Fight  bool   `json:"fight,omitempty"`
	Target string `json:"target,omitempty"`
	Text   string `json:"text,omitempty"`
	To     string `json:"to,omitempty"`
}

// clientMessage is a decoded and validated page frame: exactly one of
// Control and Chat is set.
type clientMessage struct {
	Control *Control
	Chat    *chatLine
}

type chatLine struct{ Text, To string }

// decodeClientMessage parses and validates one frame from the page.
func decodeClientMessage(b []byte) (clientMessage, error) {
	if len(b) > MaxClientMessageBytes {
		return clientMessage{}, fmt.Errorf("message of %d bytes, limit %d", len(b), MaxClientMessageBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f clientFrame
	if err := dec.Decode(&f); err != nil {
		return clientMessage{}, fmt.Errorf("decode message: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return clientMessage{}, errors.New("decode message: trailing data after the JSON object")
	}
	switch f.Type {
	case "input":
		if f.Text != "" || f.To != "" {
			return clientMessage{}, errors.New("input message with chat fields")
		}
		c := Control{Eat: f.Eat, Fight: f.Fight, Target: f.Target}
		if f.Move != nil {
			if len(f.Move) != 2 {
				return clientMessage{}, fmt.Errorf("input: move has %d components, want 2", len(f.Move))
			}
			c.MoveX, c.MoveY = f.Move[0], f.Move[1]
		}
		if err := c.Validate(); err != nil {
			return clientMessage{}, fmt.Errorf("input: %w", err)
		}
		return clientMessage{Control: &c}, nil
	case "chat":
		if f.Move != nil || f.Eat || f.Fight || f.Target != "" {
			return clientMessage{}, errors.New("chat message with input fields")
		}
		if err := ValidateChat(f.Text, f.To); err != nil {
			return clientMessage{}, fmt.Errorf("chat: %w", err)
		}
		return clientMessage{Chat: &chatLine{Text: f.Text, To: f.To}}, nil
	case "":
		return clientMessage{}, errors.New("message without a type")
	}
	return clientMessage{}, fmt.Errorf("unknown message type %q", f.Type)
}

// Frames the server sends.
type helloFrame struct {
	Type  string    `json:"type"` // "hello"
	Self  string    `json:"self"`
	World WorldInfo `json:"world"`
}

type viewFrame struct {
	Type string    `json:"type"` // "view"
	View View      `json:"view"`
	Maps []MapView `json:"maps,omitempty"`
}

type errorFrame struct {
	Type  string `json:"type"` // "error"
	Error string `json:"error"`
}
