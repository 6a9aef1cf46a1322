package tss

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"
)

// A trace records a synchronizer's run so that it can be replayed exactly
// [Cronin et al. 2001, §3.5.4]: its configuration, the game's seed and
// starting state, then every call in order — each delivery with its
// arrival time and the command, each Tick, each delay change — and the
// checkpoints (tick, hash of the last state) as they were made. Replaying
// the calls on the same starting state must reproduce every checkpoint.
//
// Layout (integers are varints unless noted):
//
//	magic "OWTSSTRC", version uint16 big endian
//	header: length, body, CRC-32C of body (big endian uint32)
//	  body: epoch, tick period, delay count, delays, weak margin, check hash
//	        (1 byte), max skew, max pending, history, checkpoint ticks, seed,
//	        start tick, start hash (32 bytes), meta length, meta
//	records, each: kind (1 byte), length, body, CRC-32C of kind and body
//	  'D' delivery: time delta, command bytes (the rest of the body)
//	  'T' tick:     time delta
//	  'S' delays:   time delta, count, delays
//	  'C' checkpoint: tick, hash (32 bytes)
//
// Time deltas are from the previous record's time (0 for the first, so
// times are Unix nanoseconds and never negative). Every length is bounded, so a reader never allocates more than
// MaxTraceRecord (or MaxTraceMeta for the header) for one item; any
// corruption is reported with the byte offset of the record it is in.

// Trace limits.
const (
	TraceVersion   = 1
	MaxTraceRecord = 64 << 10
	MaxTraceMeta   = 64 << 10
	// MaxTraceGap bounds the time between two records: a synchronizer that
	// is given time executes every tick in between, so a corrupt delta of
	// years must not turn a replay into a very long loop. A running mirror
	// records a Tick every frame; an hour without one is not a trace.
	MaxTraceGap = time.Hour
	traceMagic  = "OWTSSTRC"
)

// Record kinds of a trace.
const (
	RecordDeliver    byte = 'D'
	RecordTick       byte = 'T'
	RecordDelays     byte = 'S'
	RecordCheckpoint byte = 'C'
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// TraceHeader opens a trace.
type TraceHeader struct {
	Version uint16
	// Config is the synchronizer's configuration at the start of the run.
	Config Config
	// Seed is the game's seed (for the application; Replay hands it back).
	Seed uint64
	// StartTick and StartHash describe the state every synchronizer state
	// started from; Replay checks them.
	StartTick uint64
	StartHash [32]byte
	// Meta is the application's description of how to build that state
	// (e.g. a world configuration), at most MaxTraceMeta bytes.
	Meta []byte
}

// TraceRecord is one decoded record.
type TraceRecord[C Command] struct {
	Kind       byte
	Offset     int64 // byte offset of the record in the trace
	Now        int64 // Deliver, Tick, SetDelays
	Command    C     // Deliver
	Delays     []time.Duration
	Checkpoint Checkpoint
}

// TraceError is a corrupt or truncated trace, with the byte offset of the
// header or record the problem is in.
type TraceError struct {
	Offset int64
	Err    error
}

func (e *TraceError) Error() string {
	return fmt.Sprintf("trace corrupt at byte %d: %v", e.Offset, e.Err)
}
func (e *TraceError) Unwrap() error { return e.Err }

// TraceWriter writes a trace; it is a Tracer, so a synchronizer records
// itself through it (Options.Tracer). Write errors are sticky: the first
// one is kept and returned by Err and Flush, and nothing more is written.
type TraceWriter[C Command] struct {
	w      *bufio.Writer
	encode func(C) ([]byte, error)
	last   int64
	seen   bool
	body   []byte
	rec    []byte
	err    error
}

// NewTraceWriter writes the header h (Version and StartTick/StartHash as
// given) to w and returns a writer for the records. encode is the
// command's wire form (game.Command.MarshalBinary).
func NewTraceWriter[C Command](w io.Writer, h TraceHeader, encode func(C) ([]byte, error)) (*TraceWriter[C], error) {
	if len(h.Meta) > MaxTraceMeta {
		return nil, fmt.Errorf("trace header: meta of %d bytes over %d", len(h.Meta), MaxTraceMeta)
	}
	cfg := h.Config.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("trace header: %w", err)
	}
	tw := &TraceWriter[C]{w: bufio.NewWriterSize(w, 64<<10), encode: encode}
	b := binary.AppendVarint(nil, cfg.Epoch)
	b = binary.AppendUvarint(b, uint64(cfg.TickPeriod))
	b = appendDelays(b, cfg.Delays)
	b = binary.AppendVarint(b, cfg.WeakMargin)
	b = append(b, boolByte(cfg.CheckHash))
	b = binary.AppendVarint(b, int64(cfg.MaxSkew))
	b = binary.AppendUvarint(b, uint64(cfg.MaxPending))
	b = binary.AppendVarint(b, int64(cfg.History))
	b = binary.AppendUvarint(b, cfg.CheckpointTicks)
	b = binary.AppendUvarint(b, h.Seed)
	b = binary.AppendUvarint(b, h.StartTick)
	b = append(b, h.StartHash[:]...)
	b = binary.AppendUvarint(b, uint64(len(h.Meta)))
	b = append(b, h.Meta...)
	out := append([]byte(traceMagic), byte(TraceVersion>>8), byte(TraceVersion&0xff))
	out = binary.AppendUvarint(out, uint64(len(b)))
	out = append(out, b...)
	out = binary.BigEndian.AppendUint32(out, crc32.Checksum(b, crcTable))
	if _, err := tw.w.Write(out); err != nil {
		return nil, fmt.Errorf("trace header: %w", err)
	}
	return tw, nil
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

func appendDelays(b []byte, delays []time.Duration) []byte {
	b = binary.AppendUvarint(b, uint64(len(delays)))
	for _, d := range delays {
		b = binary.AppendVarint(b, int64(d))
	}
	return b
}

// Deliver records a delivery (Tracer).
func (tw *TraceWriter[C]) Deliver(now int64, c C) {
	if tw.err != nil {
		return
	}
	cmd, err := tw.encode(c)
	if err != nil {
		tw.err = fmt.Errorf("trace: encode command: %w", err)
		return
	}
	tw.body = tw.appendNow(tw.body[:0], now)
	tw.body = append(tw.body, cmd...)
	if tw.err == nil {
		tw.write(RecordDeliver)
	}
}

// Tick records a Tick (Tracer).
func (tw *TraceWriter[C]) Tick(now int64) {
	if tw.err != nil {
		return
	}
	tw.body = tw.appendNow(tw.body[:0], now)
	if tw.err == nil {
		tw.write(RecordTick)
	}
}

// SetDelays records a delay change (Tracer).
func (tw *TraceWriter[C]) SetDelays(now int64, delays []time.Duration) {
	if tw.err != nil {
		return
	}
	tw.body = appendDelays(tw.appendNow(tw.body[:0], now), delays)
	if tw.err == nil {
		tw.write(RecordDelays)
	}
}

// Checkpoint records a checkpoint (Tracer).
func (tw *TraceWriter[C]) Checkpoint(cp Checkpoint) {
	if tw.err != nil {
		return
	}
	tw.body = binary.AppendUvarint(tw.body[:0], cp.Tick)
	tw.body = append(tw.body, cp.Hash[:]...)
	tw.write(RecordCheckpoint)
}

func (tw *TraceWriter[C]) appendNow(b []byte, now int64) []byte {
	if now < tw.last && tw.err == nil {
		tw.err = fmt.Errorf("trace: time %d before the previous record's %d", now, tw.last)
	}
	if tw.seen && now-tw.last > int64(MaxTraceGap) && tw.err == nil {
		tw.err = fmt.Errorf("trace: %v between two records, more than %v", time.Duration(now-tw.last), MaxTraceGap)
	}
	tw.seen = true
	b = binary.AppendVarint(b, now-tw.last)
	tw.last = now
	return b
}

func (tw *TraceWriter[C]) write(kind byte) {
	if len(tw.body) > MaxTraceRecord {
		tw.err = fmt.Errorf("trace: record of %d bytes over %d", len(tw.body), MaxTraceRecord)
		return
	}
	tw.rec = append(tw.rec[:0], kind)
	tw.rec = binary.AppendUvarint(tw.rec, uint64(len(tw.body)))
	tw.rec = append(tw.rec, tw.body...)
	crc := crc32.Update(crc32.Checksum([]byte{kind}, crcTable), crcTable, tw.body)
	tw.rec = binary.BigEndian.AppendUint32(tw.rec, crc)
	if _, err := tw.w.Write(tw.rec); err != nil {
		tw.err = fmt.Errorf("trace: %w", err)
	}
}

// Err returns the first error the writer met.
func (tw *TraceWriter[C]) Err() error { return tw.err }

// Flush writes out buffered records.
func (tw *TraceWriter[C]) Flush() error {
	if tw.err != nil {
		return tw.err
	}
	if err := tw.w.Flush(); err != nil {
		tw.err = fmt.Errorf("trace: %w", err)
	}
	return tw.err
}

// TraceReader decodes a trace as a stream.
type TraceReader[C Command] struct {
	Header TraceHeader
	r      *bufio.Reader
	decode func([]byte) (C, error)
	off    int64
	last   int64
	seen   bool // a timed record was read: deltas are bounded from then on
	buf    []byte
}

// readByte, readFull and readUvarint read through the buffer and count
// the offset.
func (tr *TraceReader[C]) readByte() (byte, error) {
	b, err := tr.r.ReadByte()
	if err == nil {
		tr.off++
	}
	return b, err
}

func (tr *TraceReader[C]) readFull(b []byte) error {
	n, err := io.ReadFull(tr.r, b)
	tr.off += int64(n)
	return err
}

func (tr *TraceReader[C]) readUvarint() (uint64, error) {
	return binary.ReadUvarint(byteReader(tr.readByte))
}

type byteReader func() (byte, error)

func (f byteReader) ReadByte() (byte, error) { return f() }

// NewTraceReader reads and checks the header. decode is the command's wire
// form (game.UnmarshalCommand); it must bound what it decodes.
func NewTraceReader[C Command](r io.Reader, decode func([]byte) (C, error)) (*TraceReader[C], error) {
	tr := &TraceReader[C]{r: bufio.NewReaderSize(r, 64<<10), decode: decode}
	part := int64(0) // offset of the part being read: magic, then header
	fail := func(err error) (*TraceReader[C], error) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, &TraceError{Offset: part, Err: err}
	}
	magic := make([]byte, len(traceMagic)+2)
	if err := tr.readFull(magic); err != nil {
		return fail(fmt.Errorf("header: %w", err))
	}
	if string(magic[:len(traceMagic)]) != traceMagic {
		return fail(errors.New("not a TSS trace (bad magic)"))
	}
	version := binary.BigEndian.Uint16(magic[len(traceMagic):])
	if version != TraceVersion {
		return fail(fmt.Errorf("trace version %d, this build reads %d", version, TraceVersion))
	}
	part = tr.off
	n, err := tr.readUvarint()
	if err != nil {
		return fail(fmt.Errorf("header length: %w", err))
	}
	if n > MaxTraceMeta+1024 {
		return fail(fmt.Errorf("header of %d bytes over the limit", n))
	}
	body := make([]byte, n+4)
	if err := tr.readFull(body); err != nil {
		return fail(fmt.Errorf("header: %w", err))
	}
	if crc32.Checksum(body[:n], crcTable) != binary.BigEndian.Uint32(body[n:]) {
		return fail(errors.New("header checksum mismatch"))
	}
	h, err := decodeHeader(body[:n])
	if err != nil {
		return fail(fmt.Errorf("header: %w", err))
	}
	h.Version = version
	tr.Header = h
	return tr, nil
}

// fieldReader decodes varints from a body, remembering the first error.
type fieldReader struct {
	b   []byte
	err error
}

func (f *fieldReader) uvarint(what string) uint64 {
	if f.err != nil {
		return 0
	}
	v, n := binary.Uvarint(f.b)
	if n <= 0 {
		f.err = fmt.Errorf("bad %s", what)
		return 0
	}
	f.b = f.b[n:]
	return v
}

func (f *fieldReader) varint(what string) int64 {
	if f.err != nil {
		return 0
	}
	v, n := binary.Varint(f.b)
	if n <= 0 {
		f.err = fmt.Errorf("bad %s", what)
		return 0
	}
	f.b = f.b[n:]
	return v
}

func (f *fieldReader) bytes(n uint64, what string) []byte {
	if f.err != nil {
		return nil
	}
	if n > uint64(len(f.b)) {
		f.err = fmt.Errorf("%s of %d bytes, %d left", what, n, len(f.b))
		return nil
	}
	v := f.b[:n]
	f.b = f.b[n:]
	return v
}

func (f *fieldReader) delays() []time.Duration {
	n := f.uvarint("delay count")
	if f.err == nil && (n == 0 || n > MaxStates) {
		f.err = fmt.Errorf("%d delays, want 1 to %d", n, MaxStates)
	}
	if f.err != nil {
		return nil
	}
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(f.varint("delay"))
	}
	return out
}

func (f *fieldReader) done() error {
	if f.err == nil && len(f.b) > 0 {
		f.err = fmt.Errorf("%d trailing bytes", len(f.b))
	}
	return f.err
}

func decodeHeader(b []byte) (TraceHeader, error) {
	f := &fieldReader{b: b}
	var h TraceHeader
	c := &h.Config
	c.Epoch = f.varint("epoch")
	period := f.uvarint("tick period")
	if period > uint64(time.Minute) {
		return h, fmt.Errorf("tick period %d ns too long", period)
	}
	c.TickPeriod = time.Duration(period)
	c.Delays = f.delays()
	c.WeakMargin = f.varint("weak margin")
	check := f.bytes(1, "check hash flag")
	if f.err == nil {
		if check[0] > 1 {
			return h, fmt.Errorf("check hash flag %d", check[0])
		}
		c.CheckHash = check[0] == 1
	}
	c.MaxSkew = time.Duration(f.varint("max skew"))
	maxPending := f.uvarint("max pending")
	if maxPending > MaxPendingLimit {
		return h, fmt.Errorf("max pending %d over %d", maxPending, MaxPendingLimit)
	}
	c.MaxPending = int(maxPending)
	c.History = time.Duration(f.varint("history"))
	c.CheckpointTicks = f.uvarint("checkpoint ticks")
	h.Seed = f.uvarint("seed")
	h.StartTick = f.uvarint("start tick")
	copy(h.StartHash[:], f.bytes(32, "start hash"))
	meta := f.bytes(f.uvarint("meta length"), "meta")
	if err := f.done(); err != nil {
		return h, err
	}
	h.Meta = append([]byte(nil), meta...)
	if err := c.Validate(); err != nil {
		return h, err
	}
	return h, nil
}

// Next returns the next record, io.EOF after the last one, or a
// *TraceError naming the offset of the record that is corrupt or cut off.
func (tr *TraceReader[C]) Next() (TraceRecord[C], error) {
	rec := TraceRecord[C]{Offset: tr.off}
	fail := func(err error) (TraceRecord[C], error) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return TraceRecord[C]{}, &TraceError{Offset: rec.Offset, Err: err}
	}
	kind, err := tr.readByte()
	if err == io.EOF {
		return rec, io.EOF
	}
	if err != nil {
		return fail(err)
	}
	rec.Kind = kind
	switch kind {
	case RecordDeliver, RecordTick, RecordDelays, RecordCheckpoint:
	default:
		return fail(fmt.Errorf("unknown record kind 0x%02x", kind))
	}
	n, err := tr.readUvarint()
	if err != nil {
		return fail(fmt.Errorf("record length: %w", err))
	}
	if n > MaxTraceRecord {
		return fail(fmt.Errorf("record of %d bytes over %d", n, MaxTraceRecord))
	}
	if cap(tr.buf) < int(n)+4 {
		tr.buf = make([]byte, n+4)
	}
	body := tr.buf[:n+4]
	if err := tr.readFull(body); err != nil {
		return fail(err)
	}
	crc := crc32.Update(crc32.Checksum([]byte{kind}, crcTable), crcTable, body[:n])
	if crc != binary.BigEndian.Uint32(body[n:]) {
		return fail(fmt.Errorf("record %q checksum mismatch", kind))
	}
	f := &fieldReader{b: body[:n]}
	if kind != RecordCheckpoint {
		delta := f.varint("time delta")
		if f.err == nil && delta < 0 {
			return fail(fmt.Errorf("time runs backwards by %d ns", -delta))
		}
		if f.err == nil && delta > int64(MaxTraceGap) && tr.seen {
			return fail(fmt.Errorf("time jumps by %v, more than %v", time.Duration(delta), MaxTraceGap))
		}
		rec.Now = tr.last + delta
		if f.err == nil && rec.Now < tr.last {
			return fail(errors.New("time overflows"))
		}
	}
	switch kind {
	case RecordDeliver:
		if f.err == nil {
			rec.Command, err = tr.decode(f.b)
			if err != nil {
				return fail(fmt.Errorf("command: %w", err))
			}
			f.b = nil
		}
	case RecordDelays:
		rec.Delays = f.delays()
	case RecordCheckpoint:
		rec.Checkpoint.Tick = f.uvarint("checkpoint tick")
		copy(rec.Checkpoint.Hash[:], f.bytes(32, "checkpoint hash"))
	}
	if err := f.done(); err != nil {
		return fail(err)
	}
	if kind != RecordCheckpoint {
		tr.last, tr.seen = rec.Now, true
	}
	return rec, nil
}

// ReplayResult is what a replay found.
type ReplayResult struct {
	Header       TraceHeader
	Deliveries   int
	Ticks        int
	DelayChanges int
	// Checkpoints is how many of the trace's checkpoints the replay
	// reproduced (all of them, if err is nil).
	Checkpoints int
	LastTick    uint64
	LastHash    [32]byte
	Bytes       int64
	Counters    map[string]uint64
}

// CheckpointMismatch is a replay that did not reproduce a checkpoint.
type CheckpointMismatch struct {
	Offset     int64
	Tick       uint64
	Want, Got  [32]byte
	Unexpected bool // the replay produced no checkpoint here, or another tick's
	GotTick    uint64
}

func (e *CheckpointMismatch) Error() string {
	if e.Unexpected {
		return fmt.Sprintf("replay diverged at byte %d: the trace has a checkpoint of tick %d, the replay made none there (next: tick %d)", e.Offset, e.Tick, e.GotTick)
	}
	return fmt.Sprintf("replay diverged at byte %d: checkpoint of tick %d has hash %x in the trace, %x in the replay", e.Offset, e.Tick, e.Want[:8], e.Got[:8])
}

// checkpointQueue collects the checkpoints a replaying synchronizer makes.
type checkpointQueue[C Command] struct{ cps []Checkpoint }

func (q *checkpointQueue[C]) Deliver(int64, C)                 {}
func (q *checkpointQueue[C]) Tick(int64)                       {}
func (q *checkpointQueue[C]) SetDelays(int64, []time.Duration) {}
func (q *checkpointQueue[C]) Checkpoint(cp Checkpoint)         { q.cps = append(q.cps, cp) }

// Replay re-runs a trace: start builds the starting state from the header
// (and an alloc for the synchronizer's states); every delivery, tick and
// delay change is repeated in order and every checkpoint in the trace must
// come out of the replay with the same hash. It stops at the first
// corruption (*TraceError) or divergence (*CheckpointMismatch).
func Replay[S State[S, C, R], C Command, R Record[R]](r io.Reader, decode func([]byte) (C, error), start func(h TraceHeader) (initial S, alloc func() S, err error)) (res ReplayResult, err error) {
	tr, err := NewTraceReader(r, decode)
	if err != nil {
		return ReplayResult{}, err
	}
	res.Header = tr.Header
	initial, alloc, err := start(tr.Header)
	if err != nil {
		return res, fmt.Errorf("replay: starting state: %w", err)
	}
	if initial.Tick() != tr.Header.StartTick || initial.Hash() != tr.Header.StartHash {
		return res, fmt.Errorf("replay: the starting state (tick %d, hash %x) is not the trace's (tick %d, hash %x)",
			initial.Tick(), initial.Hash(), tr.Header.StartTick, tr.Header.StartHash[:8])
	}
	q := &checkpointQueue[C]{}
	s, err := New[S, C, R](tr.Header.Config, initial, alloc, Options[C]{Tracer: q})
	if err != nil {
		return res, fmt.Errorf("replay: %w", err)
	}
	defer func() {
		res.LastTick, res.LastHash = s.Last().Tick(), s.Last().Hash()
		res.Counters = s.Metrics().Counters()
		res.Bytes = tr.off
	}()
	for {
		rec, err := tr.Next()
		if err == io.EOF {
			return res, nil
		}
		if err != nil {
			return res, err
		}
		switch rec.Kind {
		case RecordDeliver:
			s.Deliver(rec.Command, rec.Now)
			res.Deliveries++
		case RecordTick:
			s.Tick(rec.Now)
			res.Ticks++
		case RecordDelays:
			if err := s.SetDelays(rec.Now, rec.Delays); err != nil {
				return res, &TraceError{Offset: rec.Offset, Err: err}
			}
			res.DelayChanges++
		case RecordCheckpoint:
			want := rec.Checkpoint
			if len(q.cps) == 0 || q.cps[0].Tick != want.Tick {
				m := &CheckpointMismatch{Offset: rec.Offset, Tick: want.Tick, Want: want.Hash, Unexpected: true}
				if len(q.cps) > 0 {
					m.GotTick = q.cps[0].Tick
				}
				return res, m
			}
			got := q.cps[0]
			q.cps = q.cps[1:]
			if got.Hash != want.Hash {
				return res, &CheckpointMismatch{Offset: rec.Offset, Tick: want.Tick, Want: want.Hash, Got: got.Hash}
			}
			res.Checkpoints++
		}
	}
}
