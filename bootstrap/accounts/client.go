package accounts

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overworld-p2p/overworld/bootstrap/leases"
)

// Client talks to an account server. After Login it keeps the session's
// tokens and refreshes the access token by itself when it is about to
// expire, so a long-running peer can just call its methods. It is safe for
// concurrent use and implements leases.Client.
type Client struct {
	base *url.URL
	hc   *http.Client

	mu     sync.Mutex
	tokens Tokens
	// refreshing serializes refreshes: a refresh token works once.
	refreshing sync.Mutex
}

// ClientOption configures a Client.
type ClientOption func(*Client) error

// WithHTTPClient sets the HTTP client (for TLS settings, proxies, or a
// test transport).
func WithHTTPClient(hc *http.Client) ClientOption {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("nil http client")
		}
		c.hc = hc
		return nil
	}
}

// NewClient returns a client for the server at baseURL (e.g.
// "https://accounts.example.org:8443").
func NewClient(baseURL string, opts ...ClientOption) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("account server URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("account server URL %q: want http(s)://host[:port]", baseURL)
	}
	c := &Client{base: u, hc: &http.Client{Timeout: 30 * time.Second}}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, fmt.Errorf("account client: %w", err)
		}
	}
	return c, nil
}

// maxResponseBytes bounds what the client reads from the server.
const maxResponseBytes = 1 << 20

// do sends one request to path (which may carry a query). body, if not nil, is sent as JSON; out, if not
// nil, receives the JSON answer. bearer, if not "", is sent as the
// Authorization.
func (c *Client) do(ctx context.Context, method, path, bearer string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	p, query, _ := strings.Cut(path, "?")
	u := c.base.JoinPath(p)
	u.RawQuery = query
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode >= 300 {
		var eb ErrorBody
		if json.Unmarshal(data, &eb) != nil || eb.Error.Code == "" {
			return &APIError{Status: resp.StatusCode, Code: CodeInternal, Message: truncate(strings.TrimSpace(string(data)), 200)}
		}
		return &APIError{Status: resp.StatusCode, Code: eb.Error.Code, Message: eb.Error.Message}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}

// Register creates an account.
func (c *Client) Register(ctx context.Context, name, password string) (RegisterResponse, error) {
	var out RegisterResponse
	if err := c.do(ctx, http.MethodPost, "/v1/register", "", RegisterRequest{Name: name, Password: password}, &out); err != nil {
		return RegisterResponse{}, fmt.Errorf("register %q: %w", name, err)
	}
	return out, nil
}

// Login logs in as name from peer id and keeps the session's tokens.
func (c *Client) Login(ctx context.Context, name, password string, id peer.ID) (Tokens, error) {
	var out Tokens
	if err := c.do(ctx, http.MethodPost, "/v1/login", "", LoginRequest{Name: name, Password: password, PeerID: id.String()}, &out); err != nil {
		return Tokens{}, fmt.Errorf("login %q: %w", name, err)
	}
	c.SetTokens(out)
	return out, nil
}

// Tokens returns the session's current tokens.
func (c *Client) Tokens() Tokens {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tokens
}

// SetTokens installs tokens from an earlier Login (e.g. restored from disk).
func (c *Client) SetTokens(t Tokens) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tokens = t
}

// needsRefresh reports whether the access token should be replaced: it
// expires within a minute, or within a quarter of its lifetime if that is
// shorter.
func (c *Client) needsRefresh() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	left := time.Until(c.tokens.AccessExpiresAt)
	margin := min(refreshBefore, c.tokens.AccessExpiresAt.Sub(c.tokens.AccessIssuedAt)/4)
	return left <= margin
}

// Refresh swaps the refresh token for new tokens now.
func (c *Client) Refresh(ctx context.Context) (Tokens, error) {
	c.refreshing.Lock()
	defer c.refreshing.Unlock()
	return c.refreshLocked(ctx)
}

func (c *Client) refreshLocked(ctx context.Context) (Tokens, error) {
	old := c.Tokens()
	if old.RefreshToken == "" {
		return Tokens{}, fmt.Errorf("refresh: %w: not logged in", ErrUnauthorized)
	}
	var out Tokens
	if err := c.do(ctx, http.MethodPost, "/v1/refresh", "", RefreshRequest{RefreshToken: old.RefreshToken}, &out); err != nil {
		return Tokens{}, fmt.Errorf("refresh: %w", err)
	}
	c.SetTokens(out)
	return out, nil
}

// refreshBefore is how long before its expiry the client replaces an
// access token.
const refreshBefore = time.Minute

// AccessToken returns a valid access token, refreshing first if the
// current one expires within a minute (or within a quarter of its lifetime
// for short ones). Present it to region coordinators.
func (c *Client) AccessToken(ctx context.Context) (string, error) {
	t := c.Tokens()
	if t.AccessToken == "" {
		return "", fmt.Errorf("access token: %w: not logged in", ErrUnauthorized)
	}
	if !c.needsRefresh() {
		return t.AccessToken, nil
	}
	c.refreshing.Lock()
	defer c.refreshing.Unlock()
	// Another caller may have refreshed while we waited.
	if t2 := c.Tokens(); t2.AccessToken != t.AccessToken && !c.needsRefresh() {
		return t2.AccessToken, nil
	}
	t, err := c.refreshLocked(ctx)
	if err != nil {
		return "", err
	}
	return t.AccessToken, nil
}

// authed sends an authenticated request, with a fresh access token.
func (c *Client) authed(ctx context.Context, method, path string, body, out any) error {
	tok, err := c.AccessToken(ctx)
	if err != nil {
		return err
	}
	return c.do(ctx, method, path, tok, body, out)
}

// Logout ends the session on the server and forgets its tokens.
func (c *Client) Logout(ctx context.Context) error {
	t := c.Tokens()
	if t.RefreshToken == "" {
		return nil
	}
	err := c.do(ctx, http.MethodPost, "/v1/logout", "", RefreshRequest{RefreshToken: t.RefreshToken}, nil)
	c.SetTokens(Tokens{})
	if err != nil {
		return fmt.Errorf("logout: %w", err)
	}
	return nil
}

// LoadCharacter returns the saved character; Version 0 means none was
// saved yet.
func (c *Client) LoadCharacter(ctx context.Context) (Character, error) {
	var out Character
	if err := c.authed(ctx, http.MethodGet, "/v1/character", nil, &out); err != nil {
		return Character{}, fmt.Errorf("load character: %w", err)
	}
	return out, nil
}

// SaveCharacter saves ch and returns the new version. If ch.Version is
// not 0 the server refuses the save (ErrConflict) unless the stored
// version still equals it, so pass the loaded character back with its
// version and update Version from the result.
func (c *Client) SaveCharacter(ctx context.Context, ch Character) (int64, error) {
	var out SaveResponse
	if err := c.authed(ctx, http.MethodPut, "/v1/character", SaveRequest{Character: ch, BaseVersion: ch.Version}, &out); err != nil {
		return 0, fmt.Errorf("save character: %w", err)
	}
	return out.Version, nil
}

// ChangePassword changes the password; the server ends every other
// session of the account.
func (c *Client) ChangePassword(ctx context.Context, oldPassword, newPassword string) error {
	if err := c.authed(ctx, http.MethodPost, "/v1/password", PasswordRequest{OldPassword: oldPassword, NewPassword: newPassword}, nil); err != nil {
		return fmt.Errorf("change password: %w", err)
	}
	return nil
}

// PublicKey fetches the key that verifies the server's tokens. Fetch it
// once over a trusted channel (HTTPS) and keep it.
func (c *Client) PublicKey(ctx context.Context) (ed25519.PublicKey, error) {
	var out PublicKeyResponse
	if err := c.do(ctx, http.MethodGet, "/v1/pubkey", "", nil, &out); err != nil {
		return nil, fmt.Errorf("public key: %w", err)
	}
	if out.Algorithm != "ed25519" || len(out.PublicKey) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key: unexpected %s key of %d bytes", out.Algorithm, len(out.PublicKey))
	}
	return ed25519.PublicKey(out.PublicKey), nil
}

// VerifyOnline asks the server whether tok is valid for peer id right now,
// which, unlike token.Verify, also catches logouts and disabled accounts.
func (c *Client) VerifyOnline(ctx context.Context, tok string, id peer.ID) (VerifyResponse, error) {
	var out VerifyResponse
	if err := c.do(ctx, http.MethodPost, "/v1/tokens/verify", "", VerifyRequest{Token: tok, PeerID: id.String()}, &out); err != nil {
		return VerifyResponse{}, fmt.Errorf("verify token: %w", err)
	}
	return out, nil
}

var _ leases.Client = (*Client)(nil)

// AcquireLease asks for region's coordinator lease for this session's
// peer. Most callers want a leases.Holder instead.
func (c *Client) AcquireLease(ctx context.Context, region string) (leases.Grant, error) {
	if err := leases.ValidRegion(region); err != nil {
		return leases.Grant{}, err
	}
	var out LeaseResponse
	if err := c.authed(ctx, http.MethodPost, "/v1/leases/"+region+"/acquire", nil, &out); err != nil {
		return leases.Grant{}, fmt.Errorf("acquire lease %s: %w", region, err)
	}
	return out.Grant(), nil
}

// RenewLease extends lease id on region.
func (c *Client) RenewLease(ctx context.Context, region string, id uint64) (leases.Grant, error) {
	if err := leases.ValidRegion(region); err != nil {
		return leases.Grant{}, err
	}
	var out LeaseResponse
	if err := c.authed(ctx, http.MethodPost, "/v1/leases/"+region+"/renew", LeaseRequest{LeaseID: id}, &out); err != nil {
		return leases.Grant{}, fmt.Errorf("renew lease %s/%d: %w", region, id, err)
	}
	return out.Grant(), nil
}

// ReleaseLease gives lease id on region up.
func (c *Client) ReleaseLease(ctx context.Context, region string, id uint64) error {
	if err := leases.ValidRegion(region); err != nil {
		return err
	}
	if err := c.authed(ctx, http.MethodPost, "/v1/leases/"+region+"/release", LeaseRequest{LeaseID: id}, nil); err != nil {
		return fmt.Errorf("release lease %s/%d: %w", region, id, err)
	}
	return nil
}

// Admin calls take the operator's admin token.

// SetAccountDisabled disables (or re-enables) the named account; disabling
// ends its sessions.
func (c *Client) SetAccountDisabled(ctx context.Context, adminToken, name string, disabled bool) (AccountInfo, error) {
	if err := ValidName(name); err != nil {
		return AccountInfo{}, err
	}
	op := "enable"
	if disabled {
		op = "disable"
	}
	var out AccountInfo
	if err := c.do(ctx, http.MethodPost, "/v1/admin/accounts/"+name+"/"+op, adminToken, nil, &out); err != nil {
		return AccountInfo{}, fmt.Errorf("%s account %q: %w", op, name, err)
	}
	return out, nil
}

// ListSessions lists active sessions, of one account if name is not "".
func (c *Client) ListSessions(ctx context.Context, adminToken, name string) ([]SessionInfo, error) {
	path := "/v1/admin/sessions"
	if name != "" {
		path += "?account=" + url.QueryEscape(name)
	}
	var out []SessionInfo
	if err := c.do(ctx, http.MethodGet, path, adminToken, nil, &out); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return out, nil
}

// ListLeases lists every region's lease.
func (c *Client) ListLeases(ctx context.Context, adminToken string) ([]LeaseInfo, error) {
	var out []LeaseInfo
	if err := c.do(ctx, http.MethodGet, "/v1/admin/leases", adminToken, nil, &out); err != nil {
		return nil, fmt.Errorf("list leases: %w", err)
	}
	return out, nil
}
