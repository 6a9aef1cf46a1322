package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"

	"github.com/overworld-p2p/overworld/cmd/overworld/internal/rungroup"
	"github.com/overworld-p2p/overworld/game/webui"
	"github.com/overworld-p2p/overworld/node"
	"github.com/overworld-p2p/overworld/node/mirror"
)

// playMirrorOptions are the flags of `play` that mirror mode uses.
type playMirrorOptions struct {
	mirrors          string // comma-separated ws:// URLs
	accountURL, user string
	passwordFile     string
	register, bot    bool
	seed             uint64
	dataDir          string
	httpAddr         string
	log              *slog.Logger
}

// runPlayMirror is `play -mirror`: the same page, served on 127.0.0.1,
// playing through a mirror instead of the P2P overlay.
func runPlayMirror(ctx context.Context, out io.Writer, o playMirrorOptions) error {
	var urls []string
	for _, u := range strings.Split(o.mirrors, ",") {
		if u = strings.TrimSpace(u); u != "" {
			urls = append(urls, u)
		}
	}
	if o.accountURL == "" || o.user == "" {
		return errors.New("-mirror needs -account and -user: mirrors admit players by their account token")
	}
	key, err := node.LoadOrCreateIdentity(filepath.Join(o.dataDir, node.IdentityFileName))
	if err != nil {
		return err
	}
	pw, err := readPassword(o.passwordFile, out)
	if err != nil {
		return err
	}
	acct, err := mirror.Login(ctx, o.accountURL, o.user, pw, key, o.register)
	if err != nil {
		return err
	}
	page, err := mirror.NewPageSession(mirror.PageConfig{
		Mirrors: urls, Key: key, Token: acct.AccessToken, Bot: o.bot, BotSeed: o.seed, Logger: o.log,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		return fmt.Errorf("-http: %w", err)
	}
	var secret string
	if webui.NeedsSecret(o.httpAddr) {
		secret = webui.NewSecret()
	}
	srv, err := webui.NewServer(page, webui.Options{Logger: o.log, Secret: secret})
	if err != nil {
		ln.Close()
		return err
	}
	// Stop order (lifecycle.go): page, then the session with the mirror
	// (which saves the character when the player leaves).
	group := rungroup.New(o.log)
	group.Add(pageSessionService(page))
	group.Add(pageService(srv, ln))
	fmt.Fprintf(out, "player %s playing through %d mirror(s)\n", o.user, len(urls))
	fmt.Fprintf(out, "open %s in your browser (Ctrl-C stops)\n", webui.PageURL(ln.Addr(), secret))
	return group.Run(ctx)
}
