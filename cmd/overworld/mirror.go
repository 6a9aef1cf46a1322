package main

import (
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/cmd/overworld/internal/rungroup"
	"github.com/overworld-p2p/overworld/node/mirror"
)

func init() { extraCommands = append(extraCommands, mirrorCommand()) }

func mirrorCommand() command {
	const summary = "run a mirror server: the game over CRIMP multicast, kept consistent by TSS"
	return command{name: "mirror", summary: summary, run: func(ctx context.Context, args []string, out, errOut io.Writer) error {
		fs := newFlagSet("mirror", summary+`.

Mirror mode is for a private network with IP multicast. One mirror is the
authority (-authority): it starts the game and admits the others, which join
through it over the multicast group and fetch the game state from it over
TCP (-state-listen, -state-advertise). The authority signs its decisions
(admissions, drops, releases of a dropped mirror's players, the reference
state hashes, state transfers) with the key in -authority-key, created on
first start; it prints the public half, which every other mirror is given
with -authority-public-key. Every mirror must run the same world
(-world-size, -seed). Clients (overworld play -mirror ws://HOST:PORT/ws, and
bots) connect to -listen, which also serves /metrics, /healthz and /readyz.
Characters load from and save to the account server (-account) with the
players' own tokens. SIGTERM or Ctrl-C lets every player leave (saved) first.

With -authority-mode rotate the authority is not fixed: it is a duty that
rotates among the mirrors with the rotating arbiter (paper 003), and passes
to the others when its holder dies. Each mirror then signs what it decides
while it holds the duty with a key of its own (made at start; no key flags),
every mirror serves state transfers (-state-listen, -state-advertise), and
-authority only marks the mirror that starts the game.

With -protocol event the mirrors run the event-based protocol of the paper's
§3.3.4 instead of the command-based one: moves go to every mirror unreliably
(each datagram repeats the player's last moves), eating, picking up and
attacking run at once on every mirror and are decided by the authority, whose
decisions and consistent events (damage, deaths, respawns, regrowth) every
mirror takes only with its signature; a mirror whose state strays (moves lost
beyond the repetition) installs the authority's after the hash exchange.`, out)
		authorityF := addAuthorityFlags(fs)
		crimpF := addCRIMPFlags(fs)
		stateF := addStateFlags(fs)
		accountF := addAccountServerFlags(fs)
		listen := fs.String("listen", "127.0.0.1:8650", "address for clients (/ws) and probes (/metrics, /healthz, /readyz)")
		shapeF := addWorldShapeFlags(fs, "8x8", "")
		dataDir := fs.String("data-dir", defaultDataDir("mirror"), "directory for state dumps of hash mismatches")
		protocol := fs.String("protocol", "command", "command (every input reliably to every mirror, which all run it) or event (moves multicast unreliably, actions decided by the authority, consistent events from it; every mirror of a group must use the same)")
		redundancy := fs.Int("move-redundancy", 3, "with -protocol event: earlier moves each move datagram repeats (0-7)")
		delays := fs.String("delays", "0,50ms,150ms", "synchronizer delays, increasing (authority; the others take the group's), or 'auto' to re-tune the inner ones online")
		maxSkew := fs.Duration("max-skew", 5*time.Millisecond, "largest clock offset between mirrors before /readyz fails; stamps later than now+this are refused")
		saveEvery := fs.Duration("save-every", 30*time.Second, "how often players' characters are saved")
		logF := addLogFlags(fs, "info")
		consistency := addConsistencyFlags(fs)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		log, err := logF.logger(errOut)
		if err != nil {
			return err
		}
		g, err := shapeF.game()
		if err != nil {
			return err
		}
		pub, err := accountF.publicKey(ctx)
		if err != nil {
			return err
		}
		cfg := mirror.Config{
			Game: g, MaxSkew: *maxSkew, SaveEvery: *saveEvery, DataDir: *dataDir,
			AccountKey: pub, Characters: &mirror.AccountServer{URL: *accountF.url, Key: pub, Game: g},
			CRIMP: crimpF.config(), Logger: log,
		}
		if cfg.Protocol, err = mirror.ParseProtocol(*protocol); err != nil {
			return fmt.Errorf("-protocol: %w", err)
		}
		if cfg.MoveRedundancy = *redundancy; *redundancy == 0 {
			cfg.MoveRedundancy = -1 // none (the Config's zero is its default)
		}
		if err := authorityF.apply(&cfg, *dataDir, out); err != nil {
			return err
		}
		if err := stateF.apply(&cfg, cfg.Authority || cfg.Rotate); err != nil {
			return err
		}
		if *delays == "auto" {
			cfg.AutoDelays = true
		} else if cfg.Delays, err = parseDelays(*delays); err != nil {
			return fmt.Errorf("-delays: %w", err)
		}
		if err := consistency.apply(&cfg); err != nil {
			return err
		}
		if cfg.Transport, err = crimpF.transportFor(cfg.Authority, log); err != nil {
			return err
		}
		reg := newProcessRegistry()
		cfg.Registerer = reg
		m, err := mirror.New(cfg)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *listen)
		if err != nil {
			return fmt.Errorf("-listen: %w", err)
		}
		if err := m.Start(); err != nil {
			ln.Close()
			return err
		}
		// Stop order (lifecycle.go): the mirror (players leave, saved;
		// the group, state server and CRIMP close), then the client
		// listener with /metrics.
		group := rungroup.New(log)
		group.Add(clientListenerService(ln, m, reg))
		group.Add(mirrorService(m, out))
		fmt.Fprintf(out, "mirror serving clients on ws://%s/ws (metrics, healthz, readyz on the same address)\n", ln.Addr())
		return group.Run(ctx)
	}}
}

// accountPublicKey decodes the -account-key flag, or asks the account
// server for its key.
func accountPublicKey(ctx context.Context, url, flagValue string) ([]byte, error) {
	if flagValue != "" {
		return token.DecodePublicKey(flagValue)
	}
	cl, err := accounts.NewClient(url)
	if err != nil {
		return nil, fmt.Errorf("-account: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pub, err := cl.PublicKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("account server public key (or give -account-key): %w", err)
	}
	return pub, nil
}

// loadOrCreateAuthorityKey reads the authority's ed25519 key (PEM PKCS#8)
// from path, or creates it there (mode 0600) if there is none.
func loadOrCreateAuthorityKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		_, key, err := ed25519.GenerateKey(crand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, err
		}
		if err := errors.Join(pem.Encode(f, &pem.Block{Type: "PRIVATE KEY", Bytes: der}), f.Sync(), f.Close()); err != nil {
			os.Remove(path)
			return nil, err
		}
		return key, nil
	}
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("%s: not a PEM PRIVATE KEY", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%s: a %T, not an ed25519 key", path, k)
	}
	return key, nil
}

// parseDelays reads "0,50ms,150ms" (a bare 0 is allowed).
func parseDelays(s string) ([]time.Duration, error) {
	var out []time.Duration
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "0" {
			out = append(out, 0)
			continue
		}
		d, err := time.ParseDuration(part)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		out = append(out, d)
	}
	return out, nil
}
