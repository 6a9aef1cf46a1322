package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
	"github.com/overworld-p2p/overworld/node/crimp"
	"github.com/overworld-p2p/overworld/node/mirror"
)

// The flag sets of mirror mode (see flagsets.go).

// crimpFlags: the CRIMP group a mirror multicasts in.
type crimpFlags struct {
	transport, group, iface *string
	ttl, fec                *int
	history                 *time.Duration
}

func addCRIMPFlags(fs *flag.FlagSet) crimpFlags {
	return crimpFlags{
		transport: fs.String("crimp", "udp", "CRIMP transport: udp (IP multicast) or memory (a lone mirror, for trying it out)"),
		group:     fs.String("multicast", "239.77.0.1:7777", "IPv4 multicast group and port of the mirror group"),
		iface:     addInterfaceFlag(fs, "network interface to multicast on (required with -crimp udp)"),
		ttl:       fs.Int("ttl", 1, "multicast TTL"),
		history:   fs.Duration("history", time.Second, "CRIMP history (at least the last delay; a silent mirror is dropped after 3/4 of it)"),
		fec:       fs.Int("fec", 2, "earlier commands each CRIMP packet repeats (0-8)"),
	}
}

// addInterfaceFlag adds -interface, the network interface that carries
// the multicast.
func addInterfaceFlag(fs *flag.FlagSet, usage string) *string {
	return fs.String("interface", "", usage)
}

// config is CRIMP's protocol configuration from the flags.
func (f crimpFlags) config() crimp.Config {
	c := crimp.DefaultConfig()
	c.History, c.FEC = *f.history, *f.fec
	return c
}

// transportFor opens the CRIMP transport; the in-memory one is only for a
// lone authority (nobody else can reach it).
func (f crimpFlags) transportFor(authority bool, log *slog.Logger) (crimp.Transport, error) {
	switch *f.transport {
	case "udp":
		if *f.iface == "" {
			return nil, errors.New("-interface is required with -crimp udp (the private network's interface)")
		}
		gaddr, err := netip.ParseAddrPort(*f.group)
		if err != nil {
			return nil, fmt.Errorf("-multicast: %w", err)
		}
		return crimp.ListenUDP(crimp.UDPConfig{Group: gaddr, Interface: *f.iface, TTL: *f.ttl, Loopback: true, Logger: log})
	case "memory":
		if !authority {
			return nil, errors.New("-crimp memory runs a lone mirror: give -authority")
		}
		return crimp.NewMemNetwork(crimp.WallClock{}, 1).Endpoint("local"), nil
	default:
		return nil, fmt.Errorf("-crimp %q: want udp or memory", *f.transport)
	}
}

// authorityFlags: which mirror decides for the group, and the keys its
// decisions are signed and checked with.
type authorityFlags struct {
	authority                *bool
	mode, keyFile, publicKey *string
}

func addAuthorityFlags(fs *flag.FlagSet) authorityFlags {
	return authorityFlags{
		authority: fs.Bool("authority", false, "start the game as the group's authority (exactly one mirror; with -authority-mode rotate: the mirror that starts the game)"),
		mode:      fs.String("authority-mode", "fixed", "fixed (the -authority mirror keeps the authority) or rotate (the duty rotates among the mirrors)"),
		keyFile:   fs.String("authority-key", "", "authority: its ed25519 signing key, PEM (default: mirror-authority.pem in -data-dir; created if missing)"),
		publicKey: fs.String("authority-public-key", "", "the authority's public key, base64 (every mirror but the authority)"),
	}
}

// apply sets cfg's authority fields: the mode and, with a fixed
// authority, the key it signs with (loaded or created under dataDir; its
// public half printed on out for the other mirrors) or the public key it
// is checked with.
func (f authorityFlags) apply(cfg *mirror.Config, dataDir string, out io.Writer) error {
	cfg.Authority = *f.authority
	switch *f.mode {
	case "fixed":
	case "rotate":
		if *f.keyFile != "" || *f.publicKey != "" {
			return errors.New("-authority-mode rotate takes no -authority-key or -authority-public-key: each mirror signs with its own key")
		}
		cfg.Rotate = true
		return nil
	default:
		return fmt.Errorf("-authority-mode %q: want fixed or rotate", *f.mode)
	}
	if *f.authority {
		path := *f.keyFile
		if path == "" {
			path = filepath.Join(dataDir, "mirror-authority.pem")
		}
		key, err := loadOrCreateAuthorityKey(path)
		if err != nil {
			return fmt.Errorf("-authority-key: %w", err)
		}
		cfg.AuthorityKey = key
		fmt.Fprintf(out, "authority public key (give it to the other mirrors as -authority-public-key): %s\n",
			token.EncodePublicKey(key.Public().(ed25519.PublicKey)))
		return nil
	}
	if *f.publicKey == "" {
		return errors.New("-authority-public-key is required: the authority's key, which its decisions are checked with")
	}
	pub, err := token.DecodePublicKey(*f.publicKey)
	if err != nil {
		return fmt.Errorf("-authority-public-key: %w", err)
	}
	cfg.AuthorityPublicKey = pub
	return nil
}

// stateFlags: where a mirror serves state transfers to joining mirrors.
type stateFlags struct{ listen, advertise *string }

func addStateFlags(fs *flag.FlagSet) stateFlags {
	return stateFlags{
		listen:    fs.String("state-listen", "0.0.0.0:8651", "authority: TCP address serving state transfers to joining mirrors"),
		advertise: fs.String("state-advertise", "", "authority: the state-transfer address other mirrors dial (default: -state-listen's, which must then not be 0.0.0.0)"),
	}
}

// apply sets cfg's state-transfer addresses; serves says whether this
// mirror serves transfers (the authority, or every mirror in rotate mode),
// and then the address others dial must be known.
func (f stateFlags) apply(cfg *mirror.Config, serves bool) error {
	cfg.StateListen, cfg.StateAdvertise = *f.listen, *f.advertise
	if serves && cfg.StateAdvertise == "" {
		if host, _, _ := net.SplitHostPort(*f.listen); host == "" || host == "0.0.0.0" || host == "::" {
			return errors.New("-state-advertise is required when -state-listen does not name one address")
		}
	}
	return nil
}

// accountServerFlags: the account server a mirror loads and saves
// characters on, and the key its tokens are checked with.
type accountServerFlags struct{ url, key *string }

func addAccountServerFlags(fs *flag.FlagSet) accountServerFlags {
	return accountServerFlags{
		url: fs.String("account", "", "account server URL (characters are loaded and saved there)"),
		key: fs.String("account-key", "", "the account server's public key, base64 (default: asked from -account)"),
	}
}

// publicKey is the account server's token key: -account-key's, else asked
// from the server.
func (f accountServerFlags) publicKey(ctx context.Context) ([]byte, error) {
	if *f.url == "" {
		return nil, errors.New("-account is required: characters live on the account server")
	}
	return accountPublicKey(ctx, *f.url, *f.key)
}
