package mirror

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/libp2p/go-libp2p/core/crypto"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/crimp"
)

// Client is a client of a mirror over its WebSocket (/ws): what bots and
// the mirror-mode browser session use.
type Client struct {
	mu   sync.Mutex
	core *ClientCore
	conn *websocket.Conn
	done chan struct{}
	err  error
	bot  *game.Bot

	BytesIn, BytesOut uint64 // guarded by mu
}

// Dial connects to a mirror's WebSocket URL (ws://host:port/ws), logs in
// with tok proving it holds key, and returns once the mirror welcomed the
// client.
func Dial(ctx context.Context, url string, key crypto.PrivKey, tok string) (*Client, error) {
	conn, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, fmt.Errorf("dial mirror %s: %w", url, err)
	}
	conn.SetReadLimit(MaxServerFrame)
	c := &Client{core: NewClientCore(key, tok), conn: conn, done: make(chan struct{})}
	for !c.core.Playing() {
		_, b, err := conn.Read(ctx)
		if err != nil {
			conn.CloseNow()
			return nil, fmt.Errorf("mirror %s: %w", url, err)
		}
		replies, err := c.core.Handle(b, time.Now())
		if err != nil {
			conn.CloseNow()
			return nil, fmt.Errorf("mirror %s: %w", url, err)
		}
		for _, r := range replies {
			if err := conn.Write(ctx, websocket.MessageBinary, r); err != nil {
				conn.CloseNow()
				return nil, fmt.Errorf("mirror %s: %w", url, err)
			}
		}
	}
	go c.readLoop()
	return c, nil
}

func (c *Client) readLoop() {
	defer close(c.done)
	for {
		_, b, err := c.conn.Read(context.Background())
		if err != nil {
			c.finish(err)
			return
		}
		c.mu.Lock()
		c.BytesIn += uint64(len(b))
		_, herr := c.core.Handle(b, time.Now())
		c.mu.Unlock()
		if herr != nil {
			c.finish(herr)
			c.conn.Close(websocket.StatusNormalClosure, "")
			return
		}
	}
}

func (c *Client) finish(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
	}
}

// Done is closed when the session ends; Err says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the session ended (a *MirrorError if the mirror ended it).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// View returns the client's view of the game.
func (c *Client) View() ClientView {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.View()
}

// SendInput sends the player's input for the coming tick.
func (c *Client) SendInput(ctx context.Context, in game.Input, respawnHome bool) error {
	c.mu.Lock()
	b := c.core.Input(in, respawnHome)
	c.BytesOut += uint64(len(b))
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return c.conn.Write(ctx, websocket.MessageBinary, b)
}

// LastSeq is the seq of the newest input sent.
func (c *Client) LastSeq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.seq
}

// SendRaw sends a frame as it is (tests of what mirrors refuse).
func (c *Client) SendRaw(ctx context.Context, typ websocket.MessageType, b []byte) error {
	return c.conn.Write(ctx, typ, b)
}

// Reauth hands the mirror a fresh token.
func (c *Client) Reauth(ctx context.Context, tok string) error {
	c.mu.Lock()
	b := c.core.Reauth(tok)
	c.mu.Unlock()
	return c.conn.Write(ctx, websocket.MessageBinary, b)
}

// Close ends the session (the player leaves the world).
func (c *Client) Close() error {
	err := c.conn.Close(websocket.StatusNormalClosure, "bye")
	<-c.done
	return err
}

// BotInput is the bot's input for the coming tick from the view, or false
// before the first update.
func (c *Client) BotInput(seed uint64) (game.Input, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return botInput(c.core, &c.bot, seed)
}

func botInput(core *ClientCore, bot **game.Bot, seed uint64) (game.Input, bool) {
	obs, ok := core.Observation()
	if !ok {
		return game.Input{}, false
	}
	if *bot == nil {
		*bot = game.NewBot(core.view.Config, core.view.Player, seed, game.DefaultBotPace())
	}
	return (*bot).Next(obs), true
}

// RunBot lets a bot play the client's player: one input per tick from the
// view, until ctx ends or the session does.
func RunBot(ctx context.Context, c *Client, seed uint64) error {
	period := time.Second / time.Duration(max(c.View().Config.TickRate, 1))
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.Done():
			return c.Err()
		case <-t.C:
		}
		if in, ok := c.BotInput(seed); ok {
			if err := c.SendInput(ctx, in, false); err != nil {
				return err
			}
		}
	}
}

// LocalClient is a client attached to a Server in the same process: the
// same protobuf frames as over the WebSocket, carried through the Clock
// with a fixed one-way delay each way. Simulations and benches use it; on
// a crimp.SimClock it runs in simulated time.
type LocalClient struct {
	mu     sync.Mutex
	core   *ClientCore
	conn   *Conn
	clock  crimp.Clock
	delay  time.Duration
	closed bool
	err    error
	bot    *game.Bot
	botRun bool
	// onFrame, if set, sees every frame from the mirror as it arrives
	// (tests measure update ages with it).
	onFrame func(frame []byte, at time.Time)

	BytesIn, BytesOut, FramesIn, FramesOut uint64 // guarded by mu
}

type localLink struct{ c *LocalClient }

func (l localLink) Send(frame []byte) bool {
	b := append([]byte(nil), frame...)
	l.c.clock.AfterFunc(l.c.delay, func() { l.c.receive(b) })
	return true
}

func (l localLink) Close(reason string) {
	l.c.clock.AfterFunc(l.c.delay, func() {
		l.c.mu.Lock()
		defer l.c.mu.Unlock()
		l.c.closed = true
		if l.c.err == nil {
			l.c.err = fmt.Errorf("%w: %s", ErrClosedByMirror, reason)
		}
	})
}

// ConnectLocal attaches a client to s.
func ConnectLocal(s *Server, key crypto.PrivKey, tok string, clock crimp.Clock, delay time.Duration) *LocalClient {
	c := &LocalClient{core: NewClientCore(key, tok), clock: clock, delay: delay}
	// On a wall clock the challenge may arrive before Attach returns: the
	// lock keeps its reply waiting for the connection.
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn = s.Attach(localLink{c})
	return c
}

func (c *LocalClient) receive(frame []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	c.BytesIn += uint64(len(frame))
	c.FramesIn++
	if c.onFrame != nil {
		c.onFrame(frame, c.clock.Now())
	}
	replies, err := c.core.Handle(frame, c.clock.Now())
	if err != nil {
		c.closed = true
		c.err = err
		return
	}
	for _, r := range replies {
		c.sendLocked(r)
	}
}

func (c *LocalClient) sendLocked(b []byte) {
	c.BytesOut += uint64(len(b))
	c.FramesOut++
	conn := c.conn
	c.clock.AfterFunc(c.delay, func() { conn.Receive(b) })
}

// Counters returns the bytes in, bytes out, frames in and frames out so
// far.
func (c *LocalClient) Counters() [4]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return [4]uint64{c.BytesIn, c.BytesOut, c.FramesIn, c.FramesOut}
}

// Send sends a raw frame (tests of what mirrors refuse).
func (c *LocalClient) Send(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sendLocked(append([]byte(nil), b...))
}

// SendInput sends the player's input for the coming tick; false before
// the welcome or after the end.
func (c *LocalClient) SendInput(in game.Input, respawnHome bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !c.core.Playing() {
		return false
	}
	c.sendLocked(c.core.Input(in, respawnHome))
	return true
}

// With runs f with the client's protocol core under its lock.
func (c *LocalClient) With(f func(core *ClientCore)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c.core)
}

// View returns the client's view.
func (c *LocalClient) View() ClientView {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.core.View()
}

// Err is why the session ended, if it did.
func (c *LocalClient) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Closed reports whether the session ended.
func (c *LocalClient) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close ends the session from the client's side (the player leaves).
func (c *LocalClient) Close() {
	c.mu.Lock()
	already := c.closed
	c.closed, c.botRun = true, false
	conn := c.conn
	c.mu.Unlock()
	if !already {
		c.clock.AfterFunc(c.delay, conn.Closed)
	}
}

// Drop ends the session as a broken connection would, without telling
// the mirror: it only stops the client (the mirror keeps the session until
// it fails; a killed mirror never learns).
func (c *LocalClient) Drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed, c.botRun = true, false
}

// StartBot lets a bot play: one input per tick period, from the view.
func (c *LocalClient) StartBot(seed uint64, period time.Duration) {
	c.mu.Lock()
	c.botRun = true
	c.mu.Unlock()
	var tick func()
	tick = func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if !c.botRun || c.closed {
			return
		}
		if c.core.Playing() {
			if in, ok := botInput(c.core, &c.bot, seed); ok {
				c.sendLocked(c.core.Input(in, false))
			}
		}
		c.clock.AfterFunc(period, tick)
	}
	c.clock.AfterFunc(period, tick)
}

// KeepToken sends the mirror a fresh token whenever src returns another
// one than current (the token the client logged in with), checking every
// interval, until ctx ends or the client does.
func KeepToken(ctx context.Context, c *Client, current string, src func(context.Context) (string, error), every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	last := current
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.Done():
			return
		case <-t.C:
		}
		tok, err := src(ctx)
		if err != nil || tok == last {
			continue
		}
		if err := c.Reauth(ctx, tok); err != nil && !errors.Is(err, context.Canceled) {
			return
		}
		last = tok
	}
}
