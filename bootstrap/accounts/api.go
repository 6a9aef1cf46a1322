package accounts

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/overworld-p2p/overworld/bootstrap/leases"
)

// The JSON bodies of the /v1 API. Requests are decoded strictly: unknown
// fields, trailing data and bodies over the size limit are refused with 4xx.

// RegisterRequest is the body of POST /v1/register.
type RegisterRequest struct {
	Name     string `json:"name"`
	Password string `json:"password"`
}

// RegisterResponse answers a registration (201).
type RegisterResponse struct {
	AccountID string `json:"account_id"`
	Name      string `json:"name"`
}

// LoginRequest is the body of POST /v1/login. PeerID is the libp2p peer
// the access tokens are issued to.
type LoginRequest struct {
	Name     string `json:"name"`
	Password string `json:"password"`
	PeerID   string `json:"peer_id"`
}

// RefreshRequest is the body of POST /v1/refresh and, optionally, of
// POST /v1/logout (either the refresh token or a bearer token names the
// session to end).
type RefreshRequest struct {
	RefreshToken string `json:"refresh_token"`
}

// Tokens answers login and refresh. The refresh token works once; refresh
// returns a new one.
type Tokens struct {
	AccountID        string    `json:"account_id"`
	Name             string    `json:"name"`
	PeerID           string    `json:"peer_id"`
	AccessToken      string    `json:"access_token"`
	AccessIssuedAt   time.Time `json:"access_issued_at"`
	AccessExpiresAt  time.Time `json:"access_expires_at"`
	RefreshToken     string    `json:"refresh_token"`
	RefreshExpiresAt time.Time `json:"refresh_expires_at"`
}

// SaveRequest is the body of PUT /v1/character. BaseVersion must equal
// the stored version, 0 if none is stored yet (409 otherwise: nobody
// overwrites a character unconditionally). The server also bounds what
// the character may hold and gain (CharacterRules; 400 beyond).
type SaveRequest struct {
	Character   Character `json:"character"`
	BaseVersion int64     `json:"base_version"`
}

// SaveResponse answers a save.
type SaveResponse struct {
	Version int64 `json:"version"`
}

// PasswordRequest is the body of POST /v1/password.
type PasswordRequest struct {
	OldPassword string `json:"old_password"`
	NewPassword string `json:"new_password"`
}

// PublicKeyResponse answers GET /v1/pubkey.
type PublicKeyResponse struct {
	Algorithm string `json:"algorithm"` // "ed25519"
	PublicKey []byte `json:"public_key"`
	// TokenFormat names the token format the key signs ("ow1").
	TokenFormat string `json:"token_format"`
}

// LeaseRequest is the body of the renew and release lease calls.
type LeaseRequest struct {
	LeaseID uint64 `json:"lease_id"`
}

// LeaseResponse answers acquire and renew.
type LeaseResponse struct {
	Region  string `json:"region"`
	LeaseID uint64 `json:"lease_id"`
	Holder  string `json:"holder"`
	TTLMS   int64  `json:"ttl_ms"`
	// Proof is the grant signed with the server's key (leases.Proof),
	// checked offline by peers with the token key.
	Proof []byte `json:"proof,omitempty"`
}

// Grant converts the response for a lease holder.
func (r LeaseResponse) Grant() leases.Grant {
	return leases.Grant{Region: r.Region, LeaseID: r.LeaseID, Holder: r.Holder, TTL: time.Duration(r.TTLMS) * time.Millisecond, Proof: r.Proof}
}

// SessionInfo is one session in GET /v1/admin/sessions.
type SessionInfo struct {
	ID        string    `json:"id"`
	AccountID string    `json:"account_id"`
	Name      string    `json:"name"`
	PeerID    string    `json:"peer_id"`
	Source    string    `json:"source"`
	Created   time.Time `json:"created"`
	Refreshed time.Time `json:"refreshed"`
	Expires   time.Time `json:"expires"`
}

// LeaseInfo is one region in GET /v1/admin/leases.
type LeaseInfo struct {
	Region  string    `json:"region"`
	Holder  string    `json:"holder"`
	LeaseID uint64    `json:"lease_id"`
	Granted time.Time `json:"granted"`
	Expires time.Time `json:"expires"`
	Active  bool      `json:"active"`
}

// AccountInfo answers the admin disable and enable calls.
type AccountInfo struct {
	AccountID string `json:"account_id"`
	Name      string `json:"name"`
	Disabled  bool   `json:"disabled"`
}

// ErrorBody is every error answer: {"error": {"code": …, "message": …}}.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Error codes of the API. Each maps to one HTTP status.
const (
	CodeBadRequest     = "bad_request"        // 400: malformed JSON or invalid field
	CodeUnauthorized   = "unauthorized"       // 401: missing, garbage, expired or revoked token; wrong password
	CodeDisabled       = "account_disabled"   // 403
	CodeForbidden      = "forbidden"          // 403: not admin
	CodeNotFound       = "not_found"          // 404
	CodeNameTaken      = "name_taken"         // 409
	CodeConflict       = "conflict"           // 409: stale character version
	CodeLeaseHeld      = "lease_held"         // 409
	CodeLeaseLost      = "lease_lost"         // 409
	CodeNotEntitled    = "lease_not_entitled" // 403: not placed near the region
	CodeTooManyPeers   = "too_many_peers"     // 409: the account's peer cap
	CodeTooLarge       = "body_too_large"     // 413
	CodeUnsupportedMT  = "unsupported_media_type"
	CodeRateLimited    = "rate_limited" // 429
	CodeInternal       = "internal"     // 500
	CodeNotImplemented = "method_not_allowed"
)

// Errors a Client returns, matched by errors.Is against the APIError's
// code. Lease answers map to leases.ErrHeld, ErrLost and ErrNotEntitled.
var (
	ErrBadRequest   = errors.New("bad request")
	ErrUnauthorized = errors.New("unauthorized")
	ErrDisabled     = errors.New("account disabled")
	ErrForbidden    = errors.New("forbidden")
	ErrNameTaken    = errors.New("name taken")
	ErrRateLimited  = errors.New("rate limited")
	ErrTooLarge     = errors.New("request body too large")
)

// APIError is an error answer from the server.
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("account server: %d %s: %s", e.Status, e.Code, e.Message)
}

// Is lets errors.Is match an APIError against the sentinel errors.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrBadRequest:
		return e.Code == CodeBadRequest
	case ErrUnauthorized:
		return e.Code == CodeUnauthorized
	case ErrDisabled:
		return e.Code == CodeDisabled
	case ErrForbidden:
		return e.Code == CodeForbidden
	case ErrNameTaken:
		return e.Code == CodeNameTaken
	case ErrConflict:
		return e.Code == CodeConflict
	case ErrNotFound:
		return e.Code == CodeNotFound
	case ErrRateLimited:
		return e.Code == CodeRateLimited
	case ErrTooManyPeers:
		return e.Code == CodeTooManyPeers
	case ErrTooLarge:
		return e.Code == CodeTooLarge
	case leases.ErrHeld:
		return e.Code == CodeLeaseHeld
	case leases.ErrLost:
		return e.Code == CodeLeaseLost
	case leases.ErrNotEntitled:
		return e.Code == CodeNotEntitled
	}
	return false
}

// statusOf maps an error code to its HTTP status.
func statusOf(code string) int {
	switch code {
	case CodeBadRequest:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeDisabled, CodeForbidden, CodeNotEntitled:
		return http.StatusForbidden
	case CodeNotFound:
		return http.StatusNotFound
	case CodeNameTaken, CodeConflict, CodeLeaseHeld, CodeLeaseLost, CodeTooManyPeers:
		return http.StatusConflict
	case CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case CodeUnsupportedMT:
		return http.StatusUnsupportedMediaType
	case CodeRateLimited:
		return http.StatusTooManyRequests
	case CodeNotImplemented:
		return http.StatusMethodNotAllowed
	}
	return http.StatusInternalServerError
}
