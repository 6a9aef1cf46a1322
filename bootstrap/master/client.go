package master

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Client talks to a master server: queries for finders, registration for
// a game's Registrar. It is safe for concurrent use.
type Client struct {
	base *url.URL
	hc   *http.Client
}

// NewClient returns a client for the master at baseURL
// ("https://master.example.org"). hc may be nil for a client with a 10 s
// timeout.
func NewClient(baseURL string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("master URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("master URL %q: want http(s)://host[:port]", baseURL)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	return &Client{base: u, hc: hc}, nil
}

// URL is the master's base URL.
func (c *Client) URL() string { return c.base.String() }

// maxAnswerBytes bounds what the client reads: a full page of games with
// every mirror fits.
const maxAnswerBytes = 8 << 20

// call sends one request; body, if not nil, goes as JSON and out, if not
// nil, receives the JSON answer. An error answer becomes an *APIError.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, bearer string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	u := c.base.JoinPath(path)
	u.RawQuery = query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	if err != nil {
		return fmt.Errorf("read answer of %s %s: %w", method, path, err)
	}
	if len(data) > maxAnswerBytes {
		return fmt.Errorf("answer of %s %s over %d bytes", method, path, maxAnswerBytes)
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
		return fmt.Errorf("decode answer of %s %s: %w", method, path, err)
	}
	return nil
}

// Register registers or refreshes a game with an operator token.
func (c *Client) Register(ctx context.Context, token string, reg Registration) (RegisterResponse, error) {
	var out RegisterResponse
	err := c.call(ctx, http.MethodPost, "/v1/games", nil, token, reg, &out)
	return out, err
}

// Deregister removes a game; a non-empty instance must be the one that
// registered it last.
func (c *Client) Deregister(ctx context.Context, token, id, instance string) error {
	q := url.Values{}
	if instance != "" {
		q.Set("instance", instance)
	}
	return c.call(ctx, http.MethodDelete, "/v1/games/"+url.PathEscape(id), q, token, nil, nil)
}

// Games returns one page of the games f selects. Games that fail
// validation (a master of another version, or a hostile one) are left
// out, so a finder never probes more mirrors or stranger addresses than a
// valid registration allows.
func (c *Client) Games(ctx context.Context, f Filter) (GameList, error) {
	var raw json.RawMessage
	if err := c.call(ctx, http.MethodGet, "/v1/games", f.Values(), "", nil, &raw); err != nil {
		return GameList{}, err
	}
	return decodeGameList(raw)
}

// decodeGameList reads and checks a page of games from the master.
func decodeGameList(data []byte) (GameList, error) {
	var page GameList
	if err := json.Unmarshal(data, &page); err != nil {
		return GameList{}, fmt.Errorf("decode game list: %w", err)
	}
	if len(page.Games) > maxPageLimit {
		return GameList{}, fmt.Errorf("master answered %d games, a page holds at most %d", len(page.Games), maxPageLimit)
	}
	if page.Next != "" && ValidID(page.Next) != nil {
		return GameList{}, fmt.Errorf("master answered an invalid next page %q", truncate(page.Next, 40))
	}
	valid := page.Games[:0]
	for _, g := range page.Games {
		if g.GameInfo.Validate() == nil {
			valid = append(valid, g)
		}
	}
	page.Games = valid
	return page, nil
}

// AllGames follows the pages of f until the last or until it holds max
// games (max ≤ 0: no bound).
func (c *Client) AllGames(ctx context.Context, f Filter, max int) ([]Game, error) {
	var all []Game
	for {
		page, err := c.Games(ctx, f)
		if err != nil {
			return all, err
		}
		all = append(all, page.Games...)
		if max > 0 && len(all) >= max {
			return all[:max], nil
		}
		if page.Next == "" {
			return all, nil
		}
		if page.Next <= f.After {
			return all, errors.New("master paged backwards; stopping")
		}
		f.After = page.Next
	}
}

// Game returns one game.
func (c *Client) Game(ctx context.Context, id string) (Game, error) {
	var out Game
	if err := c.call(ctx, http.MethodGet, "/v1/games/"+url.PathEscape(id), nil, "", nil, &out); err != nil {
		return Game{}, err
	}
	if out.ID != id {
		return Game{}, fmt.Errorf("asked the master for game %s, it answered %q", id, truncate(out.ID, 40))
	}
	if err := out.GameInfo.Validate(); err != nil {
		return Game{}, fmt.Errorf("master answered an invalid game %s: %w", id, err)
	}
	return out, nil
}
