package pbframe

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"testing"
)

// FuzzRead: no input makes a reader panic or return a body over its
// limit; Read and Cut accept exactly the same frames, with the same body;
// and an accepted frame is the canonical encoding of its body (Append
// gives back the bytes read).
func FuzzRead(f *testing.F) {
	f.Add([]byte{3, 1, 2, 3}, 8)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f}, 8)
	f.Add([]byte{0x80, 0x00}, 8)
	f.Add(binary.AppendUvarint(nil, 4<<20), 4<<20)
	f.Add([]byte{}, 0)
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		limit = max(min(limit, 1<<16), -1)
		got, err := Read(bufio.NewReader(bytes.NewReader(b)), limit)
		body, rest, cutErr := Cut(b, limit)
		if (err == nil) != (cutErr == nil) {
			t.Fatalf("Read says %v, Cut says %v", err, cutErr)
		}
		if err != nil {
			return
		}
		if len(got) > max(limit, 0) {
			t.Fatalf("frame of %d bytes with limit %d", len(got), limit)
		}
		if !bytes.Equal(got, body) {
			t.Fatalf("Read %x, Cut %x", got, body)
		}
		if frame := Append(nil, got); !bytes.Equal(frame, b[:len(b)-len(rest)]) {
			t.Fatalf("frame % x re-encodes as % x", b[:len(b)-len(rest)], frame)
		}
	})
}
