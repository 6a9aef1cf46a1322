package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overworld-p2p/overworld/game"
	"github.com/overworld-p2p/overworld/game/play"
	"github.com/overworld-p2p/overworld/game/vfc/vfcworld"
	"github.com/overworld-p2p/overworld/regions/position"
)

// The flags of one concern (logging, listening, the world, a login, ...)
// are declared once here, as a set with a constructor that adds them to a
// subcommand's flag set and methods that check them and turn them into the
// values the packages take. A subcommand adds the sets it needs; the same
// flag then has the same name, meaning and check everywhere.

// logFlags: -log-level.
type logFlags struct{ level *string }

func addLogFlags(fs *flag.FlagSet, def string) logFlags {
	return logFlags{level: fs.String("log-level", def, "log level: debug, info, warn or error")}
}

// logger is the command's logger, writing to w: the error writer dispatch
// was given (stderr when run from the shell, what a test waits on in
// this package's tests).
func (f logFlags) logger(w io.Writer) (*slog.Logger, error) { return newLogger(w, *f.level) }

// p2pListenFlags: where a libp2p host listens, -listen-port or -listen.
type p2pListenFlags struct {
	port   *int
	listen *string
}

func addP2PListenFlags(fs *flag.FlagSet, defPort int) p2pListenFlags {
	usage := "TCP and UDP (QUIC) port on every interface (0: any)"
	if defPort != 0 {
		usage = "TCP and UDP (QUIC) port on every interface"
	}
	return p2pListenFlags{
		port:   fs.Int("listen-port", defPort, usage),
		listen: fs.String("listen", "", "comma-separated listen multiaddrs (overrides -listen-port)"),
	}
}

// addrs are the multiaddrs to listen on: -listen's, else TCP and QUIC on
// every interface at -listen-port.
func (f p2pListenFlags) addrs() ([]ma.Multiaddr, error) {
	list := *f.listen
	if list == "" {
		if *f.port < 0 || *f.port > 65535 {
			return nil, fmt.Errorf("-listen-port %d: want 0..65535", *f.port)
		}
		list = listenAddrsForPort("0.0.0.0", *f.port)
	}
	addrs, err := parseMultiaddrs(list)
	if err != nil {
		return nil, fmt.Errorf("-listen: %w", err)
	}
	return addrs, nil
}

// bootstrapFlags: -bootstrap, the nodes a peer joins the overlay through.
type bootstrapFlags struct{ addrs *string }

func addBootstrapFlags(fs *flag.FlagSet) bootstrapFlags {
	return bootstrapFlags{addrs: fs.String("bootstrap", "", "comma-separated full multiaddrs (/ip4/…/tcp/…/p2p/<ID>) of bootstrap nodes")}
}

// require parses the list and insists on at least one node; hint tells
// the user where to get one.
func (f bootstrapFlags) require(hint string) ([]peer.AddrInfo, error) {
	return requireBootstrap(*f.addrs, hint)
}

// worldShapeFlags: -world-size and -seed, which every peer or mirror of a
// game must give alike.
type worldShapeFlags struct {
	size *string
	seed *uint64
}

// addWorldShapeFlags adds the world's shape with defSize as -world-size's
// default; sameNote, when set, is said in both flags' help.
func addWorldShapeFlags(fs *flag.FlagSet, defSize, sameNote string) worldShapeFlags {
	sizeUsage, seedUsage := "world size in regions, WxH", "world seed"
	if sameNote != "" {
		sizeUsage += " (" + sameNote + ")"
		seedUsage += " (" + sameNote + ")"
	}
	return worldShapeFlags{size: fs.String("world-size", defSize, sizeUsage), seed: fs.Uint64("seed", 1, seedUsage)}
}

// game is the world's configuration from the flags.
func (f worldShapeFlags) game() (game.Config, error) {
	w, h, err := parseWorldSize(*f.size)
	if err != nil {
		return game.Config{}, fmt.Errorf("-world-size: %w", err)
	}
	g := game.DefaultConfig()
	g.Seed, g.RegionsX, g.RegionsY = *f.seed, w, h
	return g, nil
}

// worldFlags name a P2P world: -world, its shape and its position
// summaries, which every peer of a network (players and headless peers)
// must give alike.
type worldFlags struct {
	name, summaries *string
	worldShapeFlags
}

func addWorldFlags(fs *flag.FlagSet) worldFlags {
	return worldFlags{
		name: fs.String("world", "default", "world name"),
		summaries: fs.String("summaries", "off", "position summaries of the regions around a player (aggregated mode for every player): off, on, "+
			"or zones from the region border inward as tiles:[seconds,updates,value] (value: % of a tile of dead-reckoning error), the last *:[…]; "+
			"on is "+zonesText(position.DefaultSummaries())),
		worldShapeFlags: addWorldShapeFlags(fs, "8x8", ""),
	}
}

// zonesText writes summary zones as -summaries reads them.
func zonesText(sc position.SummaryConfig) string {
	return vfcworld.SetSettings{Zones: sc.Zones, Scale: sc.Scale}.String()
}

// summaryConfig is the world's summary setting from -summaries.
func (f worldFlags) summaryConfig() (position.SummaryConfig, error) {
	switch *f.summaries {
	case "off", "":
		return position.SummaryConfig{}, nil
	case "on":
		return position.DefaultSummaries(), nil
	}
	set, err := vfcworld.ParseSetSettings(*f.summaries)
	if err != nil {
		return position.SummaryConfig{}, fmt.Errorf("-summaries: %w", err)
	}
	return position.SummaryConfig{Enabled: true, Zones: set.Zones, Scale: set.Scale}, nil
}

// accountFlags are the flags of a login on the account server.
type accountFlags struct {
	url, user, passwordFile *string
	register                *bool
}

func addAccountFlags(fs *flag.FlagSet) accountFlags {
	return accountFlags{
		url:          fs.String("account", "", "account server URL, e.g. http://127.0.0.1:8640 (empty: no account)"),
		user:         fs.String("user", "", "account name"),
		passwordFile: fs.String("password-file", "", "file holding the account password"),
		register:     fs.Bool("register", false, "create the account if it does not exist"),
	}
}

// account is the login the flags ask for (nil without -account); the
// password comes from -password-file, else OVERWORLD_PASSWORD, else a
// prompt on out.
func (f accountFlags) account(out io.Writer) (*play.Account, error) {
	if *f.url == "" {
		return nil, nil
	}
	if *f.user == "" {
		return nil, errors.New("-account needs -user")
	}
	pw, err := readPassword(*f.passwordFile, out)
	if err != nil {
		return nil, err
	}
	return &play.Account{URL: *f.url, User: *f.user, Password: pw, Register: *f.register}, nil
}

// metricsFlags: -metrics, where /metrics, /healthz and /readyz are served.
type metricsFlags struct{ addr *string }

// addMetricsFlags adds -metrics with def as its default ("" is off);
// example, if set, is shown in the help.
func addMetricsFlags(fs *flag.FlagSet, def, example string) metricsFlags {
	usage := "address for /metrics, /healthz and /readyz"
	switch {
	case example != "":
		usage += ", e.g. " + example + " (empty: off)"
	case def == "127.0.0.1:0":
		usage += " (port 0: a free one, printed at start; empty: off)"
	default:
		usage += " (empty: off)"
	}
	return metricsFlags{addr: fs.String("metrics", def, usage)}
}

// start serves g's metrics (nothing when -metrics is empty); see startOps.
func (f metricsFlags) start(g prometheus.Gatherer, log *slog.Logger) (*opsServer, error) {
	return startOps(*f.addr, g, log)
}

// apiServerFlags are those of an HTTP/JSON operator service with a store:
// the account server and the master server.
type apiServerFlags struct {
	listen, dataDir, db, tlsCert, tlsKey *string
}

// addAPIServerFlags adds the flags of a service named name listening on
// defListen by default; dataDirUsage says what -data-dir holds.
func addAPIServerFlags(fs *flag.FlagSet, name, defListen, dataDirUsage string) apiServerFlags {
	return apiServerFlags{
		listen:  fs.String("listen", defListen, "address for the API, /metrics and /healthz"),
		dataDir: fs.String("data-dir", defaultDataDir(name), dataDirUsage),
		db:      fs.String("db", "", "database: empty for SQLite in -data-dir, sqlite:PATH, or postgres://user@host/db"),
		tlsCert: fs.String("tls-cert", "", "TLS certificate file (with -tls-key: serve HTTPS)"),
		tlsKey:  fs.String("tls-key", "", "TLS private key file"),
	}
}

// scheme is the URL scheme the service is reached by.
func (f apiServerFlags) scheme() string {
	if *f.tlsCert != "" {
		return "https"
	}
	return "http"
}

// check refuses half a TLS configuration.
func (f apiServerFlags) check() error {
	if (*f.tlsCert == "") != (*f.tlsKey == "") {
		return errors.New("-tls-cert and -tls-key go together")
	}
	return nil
}

// jsonFlags: -json, a report for scripts instead of a table.
type jsonFlags struct{ on *bool }

func addJSONFlags(fs *flag.FlagSet, usage string) jsonFlags {
	if usage == "" {
		usage = "print the report as JSON"
	}
	return jsonFlags{on: fs.Bool("json", false, usage)}
}
