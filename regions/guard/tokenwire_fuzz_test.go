package guard

import (
	"bytes"
	"errors"
	"testing"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
)

// FuzzDecodeTokenAnswer: no input makes the decoder panic; what it accepts
// is a token of at most token.MaxLen bytes that re-encodes to the input
// exactly; everything else is ErrBadAnswer.
func FuzzDecodeTokenAnswer(f *testing.F) {
	for _, tok := range [][]byte{nil, []byte("ow1.e30.AAAA"), bytes.Repeat([]byte{'x'}, token.MaxLen)} {
		b, err := AppendTokenAnswer(nil, tok)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(b[:len(b)-1])
		f.Add(append(b, 0))
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, err := DecodeTokenAnswer(b)
		if err != nil {
			if !errors.Is(err, ErrBadAnswer) {
				t.Fatalf("error %v is not ErrBadAnswer", err)
			}
			return
		}
		if len(tok) > token.MaxLen {
			t.Fatalf("accepted a token of %d bytes", len(tok))
		}
		again, err := AppendTokenAnswer(nil, tok)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("answer %x decodes to %q, which encodes to %x (%v)", b, tok, again, err)
		}
		if got, err := readTokenAnswer(bytes.NewReader(b)); err != nil || !bytes.Equal(got, tok) {
			t.Fatalf("reader: %q, %v; bytes: %q", got, err, tok)
		}
	})
}
