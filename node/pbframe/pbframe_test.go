package pbframe

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	for _, body := range [][]byte{nil, {1}, bytes.Repeat([]byte{7}, 127), bytes.Repeat([]byte{8}, 128), bytes.Repeat([]byte{9}, 3*firstChunk+5)} {
		if _, err := Write(&buf, body, len(body)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := WriteMessage(&buf, wrapperspb.String("hello"), 64); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(&buf)
	for _, want := range []int{0, 1, 127, 128, 3*firstChunk + 5} {
		got, err := Read(r, want)
		if err != nil || len(got) != want {
			t.Fatalf("frame of %d: got %d bytes, %v", want, len(got), err)
		}
	}
	var m wrapperspb.StringValue
	if err := ReadMessage(r, 64, &m); err != nil || m.Value != "hello" {
		t.Fatalf("message %q, %v", m.Value, err)
	}
	if _, err := Read(r, 64); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want EOF", err)
	}
}

// TestWireFormat pins the bytes: a uvarint length and the body, as every
// protocol spoke before this package existed.
func TestWireFormat(t *testing.T) {
	body := bytes.Repeat([]byte{0xab}, 300)
	want := append([]byte{0xac, 0x02}, body...)
	var buf bytes.Buffer
	if _, err := Write(&buf, body, 300); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) || !bytes.Equal(Append(nil, body), want) {
		t.Fatalf("frame % x…", buf.Bytes()[:4])
	}
	m := wrapperspb.UInt64(5)
	framed, err := AppendMessage([]byte{0xee}, m, 16)
	if err != nil || !bytes.Equal(framed, []byte{0xee, 2, 8, 5}) {
		t.Fatalf("message frame % x, %v", framed, err)
	}
}

func TestRefusals(t *testing.T) {
	cases := map[string]struct {
		in    []byte
		limit int
		want  error
	}{
		"over the limit":       {binary.AppendUvarint(nil, 65), 64, ErrTooLarge},
		"huge":                 {binary.AppendUvarint(nil, 1<<62), 64, ErrTooLarge},
		"negative limit":       {[]byte{1, 0}, -1, ErrTooLarge},
		"non-minimal prefix":   {[]byte{0x81, 0x00, 1}, 64, ErrBadPrefix},
		"non-minimal zero":     {[]byte{0x80, 0x00}, 64, ErrBadPrefix},
		"prefix over 64 bits":  {[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, 64, ErrBadPrefix},
		"prefix of 11 bytes":   {bytes.Repeat([]byte{0x80}, 11), 64, ErrBadPrefix},
		"truncated prefix":     {[]byte{0x80}, 64, io.ErrUnexpectedEOF},
		"truncated body":       {[]byte{5, 1, 2}, 64, io.ErrUnexpectedEOF},
		"body missing at once": {[]byte{5}, 64, io.ErrUnexpectedEOF},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := Read(bufio.NewReader(bytes.NewReader(c.in)), c.limit); !errors.Is(err, c.want) {
				t.Errorf("Read: %v, want %v", err, c.want)
			}
			_, _, err := Cut(c.in, c.limit)
			want := c.want
			if name == "truncated prefix" {
				want = ErrBadPrefix // a slice has no more bytes to come
			}
			if !errors.Is(err, want) {
				t.Errorf("Cut: %v, want %v", err, want)
			}
		})
	}
	if _, err := Write(io.Discard, make([]byte, 9), 8); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Write over the limit: %v", err)
	}
	if _, err := WriteMessage(io.Discard, wrapperspb.String("too long"), 4); !errors.Is(err, ErrTooLarge) {
		t.Errorf("WriteMessage over the limit: %v", err)
	}
}

// trickle is a peer that announces a frame and sends its body a few
// bytes at a time; it records the largest buffer the reader offered.
type trickle struct {
	prefix  []byte
	left    int
	per     int
	largest int
}

func (s *trickle) ReadByte() (byte, error) {
	if len(s.prefix) == 0 {
		return 0, io.EOF
	}
	b := s.prefix[0]
	s.prefix = s.prefix[1:]
	return b, nil
}

func (s *trickle) Read(p []byte) (int, error) {
	s.largest = max(s.largest, len(p))
	if s.left == 0 {
		return 0, io.EOF
	}
	n := min(len(p), s.per, s.left)
	s.left -= n
	return n, nil
}

// TestGrowsWithArrivals: a peer that announces 4 MiB and sends 10 KiB
// makes the reader offer buffers that follow what arrived (a first chunk,
// then at most doubling), never the announced size.
func TestGrowsWithArrivals(t *testing.T) {
	const announced, sent = 4 << 20, 10 << 10
	s := &trickle{prefix: binary.AppendUvarint(nil, announced), left: sent, per: 512}
	if _, err := Read(s, announced); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short frame: %v", err)
	}
	if s.largest > 2*sent {
		t.Fatalf("the reader offered a buffer of %d bytes after %d arrived", s.largest, sent)
	}
	silent := &trickle{prefix: binary.AppendUvarint(nil, announced)}
	if _, err := Read(silent, announced); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("silent peer: %v", err)
	}
	if silent.largest > firstChunk {
		t.Fatalf("the reader offered %d bytes before any arrived", silent.largest)
	}
}

func TestCutRest(t *testing.T) {
	b := Append(Append(nil, []byte("ab")), []byte("cde"))
	body, rest, err := Cut(b, 8)
	if err != nil || string(body) != "ab" {
		t.Fatalf("first: %q, %v", body, err)
	}
	body, rest, err = Cut(rest, 8)
	if err != nil || string(body) != "cde" || len(rest) != 0 {
		t.Fatalf("second: %q, rest %q, %v", body, rest, err)
	}
}
