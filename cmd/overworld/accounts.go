package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
	"github.com/overworld-p2p/overworld/bootstrap/accounts/token"
)

func init() { extraCommands = append(extraCommands, accountsCommand()) }

func accountsCommand() command {
	const summary = "run the account server: logins, saved characters, coordinator leases"
	return command{name: "accounts", summary: summary, run: func(ctx context.Context, args []string, out, errOut io.Writer) error {
		fs := newFlagSet("accounts", summary+`.

Serves the HTTP/JSON API under /v1 plus /metrics, /healthz and /readyz on
-listen. Keeps its token-signing key in -data-dir (created, mode 0600) and
prints the public key that peers verify tokens with. The store is SQLite in
-data-dir unless -db names a postgres:// URL. SIGTERM drains and stops.`, out)
		apiF := addAPIServerFlags(fs, "accounts", "127.0.0.1:8640", "directory for the signing key and the SQLite database")
		adminToken := fs.String("admin-token", "", "credential for /v1/admin (prefer -admin-token-file or OVERWORLD_ADMIN_TOKEN; empty: admin API off)")
		adminTokenFile := fs.String("admin-token-file", "", "file holding the admin credential")
		tokenTTL := fs.Duration("token-ttl", 15*time.Minute, "lifetime of access tokens")
		leaseTTL := fs.Duration("lease-ttl", 10*time.Second, "lifetime of coordinator leases (holders renew every third)")
		maxPeers := fs.Int("max-peers-per-account", 4, "peer IDs one account may hold live tokens for at once")
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
		admin, err := readAdminToken(*adminToken, *adminTokenFile)
		if err != nil {
			return err
		}
		if admin == "" {
			log.Warn("no admin token: the admin API (disable accounts, list sessions) is off")
		}
		key, err := accounts.LoadOrCreateKey(*apiF.dataDir)
		if err != nil {
			return err
		}
		store, err := accounts.OpenStore(ctx, *apiF.db, *apiF.dataDir)
		if err != nil {
			return err
		}
		defer store.Close()
		srv, err := accounts.New(accounts.Config{
			Key: key, AdminToken: admin, TokenTTL: *tokenTTL, LeaseTTL: *leaseTTL, MaxPeersPerAccount: *maxPeers,
			TLSCertFile: *apiF.tlsCert, TLSKeyFile: *apiF.tlsKey, Logger: log, Registry: newProcessRegistry(),
		}, store)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", *apiF.listen)
		if err != nil {
			return fmt.Errorf("listen %s: %w", *apiF.listen, err)
		}
		fmt.Fprintf(out, "account server on %s://%s (store: %s)\n", apiF.scheme(), ln.Addr(), store.Dialect())
		fmt.Fprintf(out, "token public key (ed25519, base64): %s\n", token.EncodePublicKey(srv.PublicKey()))
		return srv.Serve(ctx, ln)
	}}
}

// readAdminToken takes the admin credential from the flag or the file
// (not both); a file's surrounding whitespace is dropped.
func readAdminToken(flagValue, file string) (string, error) {
	if file == "" {
		return flagValue, nil
	}
	if flagValue != "" {
		return "", errors.New("give -admin-token or -admin-token-file, not both")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("-admin-token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("-admin-token-file %s is empty", file)
	}
	return tok, nil
}
