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

	"github.com/overworld-p2p/overworld/cmd/overworld/internal/rungroup"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/game/webui"
	"github.com/overworld-p2p/overworld/node"
)

func init() { extraCommands = append(extraCommands, playCommand()) }

func playCommand() command {
	const summary = "play: join the overlay and serve the game's page on 127.0.0.1"
	return command{name: "play", summary: summary, run: func(ctx context.Context, args []string, out, errOut io.Writer) error {
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
		bootF := addBootstrapFlags(fs)
		dataDir := fs.String("data-dir", defaultDataDir("play"), "directory for the identity key")
		listenF := addP2PListenFlags(fs, 0)
		httpAddr := fs.String("http", "127.0.0.1:8080", "address of the web page; any but a loopback one gets a per-run secret in the page's address")
		name := fs.String("name", "", "display name (default: the account name, else one made from the peer ID)")
		worldF := addWorldFlags(fs)
		bot := fs.Bool("bot", false, "let a bot play")
		aggregate := fs.Bool("aggregate", false, "aggregated mode: send positions to the region's coordinator, which publishes one batch per interval for the region (positions go out directly while the coordinator does not answer)")
		accountF := addAccountFlags(fs)
		metricsF := addMetricsFlags(fs, "127.0.0.1:0", "")
		logF := addLogFlags(fs, "info")
		mirrors := fs.String("mirror", "", "play through mirrors instead of the overlay: comma-separated ws://HOST:PORT/ws URLs (needs -account)")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		log, err := logF.logger(errOut)
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
		boot, err := bootF.require("or try 'overworld demo'")
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
		addrs, err := listenF.addrs()
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *httpAddr)
		if err != nil {
			return fmt.Errorf("-http: %w", err)
		}
		// The services stop in the reverse of the order they are added
		// here (see lifecycle.go): readiness, page, player (saves, leaves
		// its regions, releases its leases), node, metrics.
		group := rungroup.New(log)
		group.Add(rungroup.Service{Name: "page listener", Stop: func() { ln.Close() }})
		reg := newProcessRegistry()
		ops, err := metricsF.start(reg, log)
		if err != nil {
			group.Close()
			return err
		}
		group.Add(ops.service())
		n, err := node.New(ctx, node.WithDataDir(*dataDir), node.WithListenAddrs(addrs...),
			node.WithBootstrapPeers(boot...), node.WithLogger(log), node.WithRegisterer(reg))
		if err != nil {
			group.Close()
			return err
		}
		group.Add(nodeService(n))
		p, err := play.New(ctx, n, play.Config{
			World: *worldF.name, Game: g, Name: *name, Bot: *bot, BotSeed: *worldF.seed, Aggregate: *aggregate,
			Summaries: summaries, Account: acct, Logger: log, Registerer: reg,
		})
		if err != nil {
			group.Close()
			return err
		}
		// Where others can reach the page, a per-run secret in its address
		// keeps them from driving the player.
		var secret string
		if webui.NeedsSecret(*httpAddr) {
			secret = webui.NewSecret()
		}
		srv, err := webui.NewServer(webui.PeerSession(p), webui.Options{Logger: log, Secret: secret, Registerer: reg})
		if err != nil {
			p.Close()
			group.Close()
			return err
		}
		group.Add(playerService(p))
		group.Add(pageService(srv, ln))
		group.Add(ops.readiness())
		fmt.Fprintf(out, "player %s (%s) joining through %d bootstrap node(s)\n", p.Name(), n.ID(), len(boot))
		fmt.Fprintf(out, "open %s in your browser (Ctrl-C stops)\n", webui.PageURL(ln.Addr(), secret))
		if u := ops.url(); u != "" {
			fmt.Fprintf(out, "metrics on %s\n", u)
		}
		ops.setReady(true)
		return group.Run(ctx)
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
