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
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/mirror"
)

func init() { extraCommands = append(extraCommands, mirrorCommand()) }

func mirrorCommand() command {
	const summary = "run a mirror server: the game over CRIMP multicast, kept consistent by TSS"
	return command{name: "mirror", summary: summary, run: func(ctx context.Context, args []string, out io.Writer) error {
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
-authority only marks the mirror that starts the game.`, out)
		authority := fs.Bool("authority", false, "start the game as the group's authority (exactly one mirror; with -authority-mode rotate: the mirror that starts the game)")
		authorityMode := fs.String("authority-mode", "fixed", "fixed (the -authority mirror keeps the authority) or rotate (the duty rotates among the mirrors)")
		authorityKeyFile := fs.String("authority-key", "", "authority: its ed25519 signing key, PEM (default: mirror-authority.pem in -data-dir; created if missing)")
		authorityPub := fs.String("authority-public-key", "", "the authority's public key, base64 (every mirror but the authority)")
		transport := fs.String("crimp", "udp", "CRIMP transport: udp (IP multicast) or memory (a lone mirror, for trying it out)")
		group := fs.String("multicast", "239.77.0.1:7777", "IPv4 multicast group and port of the mirror group")
		iface := fs.String("interface", "", "network interface to multicast on (required with -crimp udp)")
		ttl := fs.Int("ttl", 1, "multicast TTL")
		listen := fs.String("listen", "127.0.0.1:8650", "address for clients (/ws) and probes (/metrics, /healthz, /readyz)")
		stateListen := fs.String("state-listen", "0.0.0.0:8651", "authority: TCP address serving state transfers to joining mirrors")
		stateAdvertise := fs.String("state-advertise", "", "authority: the state-transfer address other mirrors dial (default: -state-listen's, which must then not be 0.0.0.0)")
		accountURL := fs.String("account", "", "account server URL (characters are loaded and saved there)")
		accountKey := fs.String("account-key", "", "the account server's public key, base64 (default: asked from -account)")
		size := fs.String("world-size", "8x8", "world size in regions, WxH")
		seed := fs.Uint64("seed", 1, "world seed")
		dataDir := fs.String("data-dir", defaultDataDir("mirror"), "directory for state dumps of hash mismatches")
		delays := fs.String("delays", "0,50ms,150ms", "synchronizer delays, increasing (authority; the others take the group's), or 'auto' to re-tune the inner ones online")
		history := fs.Duration("history", time.Second, "CRIMP history (at least the last delay; a silent mirror is dropped after 3/4 of it)")
		fec := fs.Int("fec", 2, "earlier commands each CRIMP packet repeats (0-8)")
		maxSkew := fs.Duration("max-skew", 5*time.Millisecond, "largest clock offset between mirrors before /readyz fails; stamps later than now+this are refused")
		saveEvery := fs.Duration("save-every", 30*time.Second, "how often players' characters are saved")
		level := fs.String("log-level", "info", "log level: debug, info, warn or error")
		consistency := addConsistencyFlags(fs)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		log, err := newLogger(os.Stderr, *level)
		if err != nil {
			return err
		}
		w, h, err := parseWorldSize(*size)
		if err != nil {
			return fmt.Errorf("-world-size: %w", err)
		}
		g := game.DefaultConfig()
		g.Seed, g.RegionsX, g.RegionsY = *seed, w, h
		if *accountURL == "" {
			return errors.New("-account is required: characters live on the account server")
		}
		pub, err := accountPublicKey(ctx, *accountURL, *accountKey)
		if err != nil {
			return err
		}
		cfg := mirror.Config{
			Game: g, Authority: *authority, MaxSkew: *maxSkew, SaveEvery: *saveEvery, DataDir: *dataDir,
			StateListen: *stateListen, StateAdvertise: *stateAdvertise,
			AccountKey: pub, Characters: &mirror.AccountServer{URL: *accountURL, Key: pub, Game: g},
			Logger: log,
		}
		switch *authorityMode {
		case "fixed":
		case "rotate":
			cfg.Rotate = true
			if *authorityKeyFile != "" || *authorityPub != "" {
				return errors.New("-authority-mode rotate takes no -authority-key or -authority-public-key: each mirror signs with its own key")
			}
		default:
			return fmt.Errorf("-authority-mode %q: want fixed or rotate", *authorityMode)
		}
		if cfg.Rotate {
			// No shared key: each mirror's own, made by the server.
		} else if *authority {
			path := *authorityKeyFile
			if path == "" {
				path = filepath.Join(*dataDir, "mirror-authority.pem")
			}
			if cfg.AuthorityKey, err = loadOrCreateAuthorityKey(path); err != nil {
				return fmt.Errorf("-authority-key: %w", err)
			}
			fmt.Fprintf(out, "authority public key (give it to the other mirrors as -authority-public-key): %s\n",
				token.EncodePublicKey(cfg.AuthorityKey.Public().(ed25519.PublicKey)))
		} else {
			if *authorityPub == "" {
				return errors.New("-authority-public-key is required: the authority's key, which its decisions are checked with")
			}
			if cfg.AuthorityPublicKey, err = token.DecodePublicKey(*authorityPub); err != nil {
				return fmt.Errorf("-authority-public-key: %w", err)
			}
		}
		if *delays == "auto" {
			cfg.AutoDelays = true
		} else if cfg.Delays, err = parseDelays(*delays); err != nil {
			return fmt.Errorf("-delays: %w", err)
		}
		cfg.CRIMP = crimp.DefaultConfig()
		cfg.CRIMP.History, cfg.CRIMP.FEC = *history, *fec
		if err := consistency.apply(&cfg); err != nil {
			return err
		}
		switch *transport {
		case "udp":
			if *iface == "" {
				return errors.New("-interface is required with -crimp udp (the private network's interface)")
			}
			gaddr, err := netip.ParseAddrPort(*group)
			if err != nil {
				return fmt.Errorf("-multicast: %w", err)
			}
			tr, err := crimp.ListenUDP(crimp.UDPConfig{Group: gaddr, Interface: *iface, TTL: *ttl, Loopback: true, Logger: log})
			if err != nil {
				return err
			}
			cfg.Transport = tr
		case "memory":
			if !*authority {
				return errors.New("-crimp memory runs a lone mirror: give -authority")
			}
			cfg.Transport = crimp.NewMemNetwork(crimp.WallClock{}, 1).Endpoint("local")
		default:
			return fmt.Errorf("-crimp %q: want udp or memory", *transport)
		}
		if (*authority || cfg.Rotate) && cfg.StateAdvertise == "" {
			if host, _, _ := net.SplitHostPort(*stateListen); host == "" || host == "0.0.0.0" || host == "::" {
				return errors.New("-state-advertise is required when -state-listen does not name one address")
			}
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
		mux := http.NewServeMux()
		mux.Handle("/", m.Handler())
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		fmt.Fprintf(out, "mirror serving clients on ws://%s/ws (metrics, healthz, readyz on the same address)\n", ln.Addr())
		select {
		case <-ctx.Done():
		case err := <-served:
			m.Close()
			return fmt.Errorf("client listener: %w", err)
		}
		fmt.Fprintln(out, "stopping: players leave and are saved")
		sctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		err = m.Shutdown(sctx)
		srv.Shutdown(sctx)
		return err
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
