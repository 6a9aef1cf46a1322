package mirror

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/accounts"
)

// Login logs user in on the account server at url with a token bound to
// key's peer ID, registering the account first if register is set and it
// does not exist. The client's AccessToken is the token source a mirror
// session needs.
func Login(ctx context.Context, url, user, password string, key crypto.PrivKey, register bool) (*accounts.Client, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, err
	}
	cl, err := accounts.NewClient(url, accounts.WithHTTPClient(&http.Client{Timeout: 10 * time.Second}))
	if err != nil {
		return nil, fmt.Errorf("account server: %w", err)
	}
	_, err = cl.Login(ctx, user, password, id)
	if err != nil && register && errors.Is(err, accounts.ErrUnauthorized) {
		if _, rerr := cl.Register(ctx, user, password); rerr == nil {
			_, err = cl.Login(ctx, user, password, id)
		} else if !errors.Is(rerr, accounts.ErrNameTaken) {
			err = rerr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("log in %s: %w", user, err)
	}
	return cl, nil
}
