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
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/master"
)

func init() { extraCommands = append(extraCommands, masterCommand()) }

func masterCommand() command {
	const summary = "run the master server: the registry of mirror-mode games and their mirrors"
	return command{name: "master", summary: summary, run: func(ctx context.Context, args []string, out, errOut io.Writer) error {
		fs := newFlagSet("master", summary+`.

Game authorities register their games under /v1/games with an operator
token; the master polls each game's status URL every -interval (or takes
its pushes when it cannot reach it) and drops a game after -max-missed
silent intervals. Players ask GET /v1/games (overworld find does). Serves
/metrics, /healthz and /readyz on -listen too. The registry is SQLite in
-data-dir unless -db names a postgres:// URL; it survives restarts.
SIGTERM drains and stops.`, out)
		apiF := addAPIServerFlags(fs, "master", "127.0.0.1:8650", "directory for the SQLite database")
		token := fs.String("operator-token", "", "credential game authorities register with (prefer -operator-token-file or OVERWORLD_OPERATOR_TOKEN)")
		tokenFile := fs.String("operator-token-file", "", "file of operator credentials, one per line ('#' starts a comment); each line is one operator")
		interval := fs.Duration("interval", 5*time.Second, "keep-alive interval: games are polled (or push) this often")
		maxMissed := fs.Int("max-missed", 3, "intervals in a row without word from a game before it is dropped")
		maxGames := fs.Int("max-games", 10_000, "games the registry holds at most")
		logF := addLogFlags(fs, "info")
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		log, err := logF.logger(errOut)
		if err != nil {
			return err
		}
		if err := apiF.check(); err != nil {
			return err
		}
		tokens, err := readOperatorTokens(*token, *tokenFile)
		if err != nil {
			return err
		}
		store, err := master.OpenStore(ctx, *apiF.db, *apiF.dataDir)
		if err != nil {
			return err
		}
		defer store.Close()
		m, err := master.New(master.Config{
			OperatorTokens: tokens, Interval: *interval, MaxMissed: *maxMissed, MaxGames: *maxGames,
			TLSCertFile: *apiF.tlsCert, TLSKeyFile: *apiF.tlsKey, Logger: log, Registry: newProcessRegistry(),
		}, store)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *apiF.listen)
		if err != nil {
			return fmt.Errorf("listen %s: %w", *apiF.listen, err)
		}
		fmt.Fprintf(out, "master server on %s://%s (store: %s; keep-alive every %v, dropped after %d missed; %d operator token(s))\n",
			apiF.scheme(), ln.Addr(), store.Dialect(), *interval, *maxMissed, len(tokens))
		return m.Serve(ctx, ln)
	}}
}

// readOperatorTokens takes the operator credentials from the flag or the
// file (not both): one per non-empty line of the file, '#' lines skipped.
func readOperatorTokens(flagValue, file string) ([]string, error) {
	if file == "" {
		if flagValue == "" {
			return nil, errors.New("no operator token: give -operator-token-file, -operator-token or OVERWORLD_OPERATOR_TOKEN")
		}
		return []string{flagValue}, nil
	}
	if flagValue != "" {
		return nil, errors.New("give -operator-token or -operator-token-file, not both")
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("-operator-token-file: %w", err)
	}
	defer f.Close()
	var tokens []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		tokens = append(tokens, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("-operator-token-file %s: %w", file, err)
	}
	if len(tokens) == 0 {
		return nil, fmt.Errorf("-operator-token-file %s holds no token", file)
	}
	return tokens, nil
}
