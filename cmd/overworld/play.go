package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"golang.org/x/term"

	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/game/webui"
	"github.com/overworld-p2p/overworld/node"
)

func init() { extraCommands = append(extraCommands, playCommand()) }

func playCommand() command {
	const summary = "play: join the overlay and serve the game's page on 127.0.0.1"
	return command{name: "play", summary: summary, run: func(ctx context.Context, args []string, out io.Writer) error {
		fs := newFlagSet("play", summary+`.

Joins through the bootstrap nodes, plays in the world named -world (all
players of a network must give the same -world, -world-size and -seed) and
serves the page on -http. With -account it logs in (the password comes from
-password-file, else OVERWORLD_PASSWORD, else typed at a prompt without echo),
restores the saved character and saves it every half minute and on exit.
With -bot a bot plays instead of the page's keys. With -aggregate the
player's positions go to its region's coordinator, which publishes them in
one batch per interval; while the coordinator does not answer they go out
directly. Ctrl-C stops.`, out)
		bootstrapAddrs := fs.String("bootstrap", "", "comma-separated full multiaddrs (/ip4/…/tcp/…/p2p/<ID>) of bootstrap nodes")
		dataDir := fs.String("data-dir", defaultDataDir("play"), "directory for the identity key")
		port := fs.Int("listen-port", 0, "TCP and UDP (QUIC) port on every interface (0: any)")
		listen := fs.String("listen", "", "comma-separated listen multiaddrs (overrides -listen-port)")
		httpAddr := fs.String("http", "127.0.0.1:8080", "address of the web page; any but a loopback one gets a per-run secret in the page's address")
		name := fs.String("name", "", "display name (default: the account name, else one made from the peer ID)")
		worldF := addWorldFlags(fs)
		bot := fs.Bool("bot", false, "let a bot play")
		aggregate := fs.Bool("aggregate", false, "aggregated mode: send positions to the region's coordinator, which publishes one batch per interval for the region (positions go out directly while the coordinator does not answer)")
		accountF := addAccountFlags(fs)
		metrics := fs.String("metrics", "", "address for /metrics, /healthz and /readyz (empty: off)")
		level := fs.String("log-level", "info", "log level: debug, info, warn or error")
		mirrors := fs.String("mirror", "", "play through mirrors instead of the overlay: comma-separated ws://HOST:PORT/ws URLs (needs -account)")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		log, err := newLogger(os.Stderr, *level)
		if err != nil {
			return err
		}
		if *mirrors != "" {
			if *aggregate {
				return errors.New("-aggregate is for playing on the overlay; with -mirror the mirrors carry the positions")
			}
			return runPlayMirror(ctx, out, playMirrorOptions{mirrors: *mirrors, accountURL: *accountF.url, user: *accountF.user,
				passwordFile: *accountF.passwordFile, register: *accountF.register, bot: *bot, seed: *worldF.seed, dataDir: *dataDir, httpAddr: *httpAddr, log: log})
		}
		boot, err := requireBootstrap(*bootstrapAddrs, "or try 'overworld demo'")
		if err != nil {
			return err
		}
		g, err := worldF.game()
		if err != nil {
			return err
		}
		summaries, err := worldF.summaryConfig()
		if err != nil {
			return err
		}
		acct, err := accountF.account(out)
		if err != nil {
			return err
		}
		if *listen == "" {
			*listen = listenAddrsForPort("0.0.0.0", *port)
		}
		addrs, err := parseMultiaddrs(*listen)
		if err != nil {
			return fmt.Errorf("-listen: %w", err)
		}
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return fmt.Errorf("-http: %w", err)
		}
		defer ln.Close()
		reg := newProcessRegistry()
		ops, err := startOps(ctx, *metrics, reg, log)
		if err != nil {
			return err
		}
		n, err := node.New(ctx, node.WithDataDir(*dataDir), node.WithListenAddrs(addrs...),
			node.WithBootstrapPeers(boot...), node.WithLogger(log), node.WithRegisterer(reg))
		if err != nil {
			return err
		}
		defer n.Close()
		p, err := play.New(ctx, n, play.Config{
			World: *worldF.name, Game: g, Name: *name, Bot: *bot, BotSeed: *worldF.seed, Aggregate: *aggregate,
			Summaries: summaries, Account: acct, Logger: log, Registerer: reg,
		})
		if err != nil {
			return err
		}
		// Where others can reach the page, a per-run secret in its address
		// keeps them from driving the player.
		var secret string
		if webui.NeedsSecret(*httpAddr) {
			secret = webui.NewSecret()
		}
		srv, err := webui.NewServer(p, webui.Options{Logger: log, Secret: secret, Registerer: reg})
		if err != nil {
			p.Close()
			return err
		}
		serveCtx, stopServe := context.WithCancel(context.Background())
		served := make(chan error, 1)
		go func() { served <- srv.Serve(serveCtx, ln) }()
		fmt.Fprintf(out, "player %s (%s) joining through %d bootstrap node(s)\n", p.Name(), n.ID(), len(boot))
		fmt.Fprintf(out, "open %s in your browser (Ctrl-C stops)\n", webui.PageURL(ln.Addr(), secret))
		ops.setReady(true)
		err = p.Run(ctx) // returns when ctx ends, after saving the character
		stopServe()
		if serr := <-served; err == nil && serr != nil && !errors.Is(serr, net.ErrClosed) {
			err = serr
		}
		return err
	}}
}

// readPassword takes the account password from a file, else from
// OVERWORLD_PASSWORD, else from stdin: typed without echo on a terminal,
// or the first line of whatever is piped in.
func readPassword(file string, out io.Writer) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("-password-file: %w", err)
		}
		pw := strings.TrimRight(string(b), "\r\n")
		if pw == "" {
			return "", fmt.Errorf("-password-file %s is empty", file)
		}
		return pw, nil
	}
	if pw := os.Getenv("OVERWORLD_PASSWORD"); pw != "" {
		return pw, nil
	}
	fmt.Fprint(out, "password: ")
	pw, err := promptPassword(os.Stdin)
	if err != nil {
		return "", fmt.Errorf("read password from stdin: %w", err)
	}
	if pw == "" {
		return "", errors.New("empty password")
	}
	return pw, nil
}

// promptPassword reads one line from in, with the terminal's echo off if in
// is a terminal.
func promptPassword(in *os.File) (string, error) {
	if fd := int(in.Fd()); term.IsTerminal(fd) {
		b, err := term.ReadPassword(fd)
		fmt.Fprintln(os.Stderr) // the newline the user typed was not echoed
		return string(b), err
	}
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		return "", err
	}
	return strings.TrimRight(line, "\r\n"), nil
}
