package accounts

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Every bad request gets a clear 4xx with an error code and changes
// nothing in the store.
func TestBadInput(t *testing.T) {
	forEachStore(t, func(t *testing.T, open func() *Store) {
		e := newTestEnv(t, open(), func(c *Config) { c.MaxBodyBytes = 4096 })
		c, _ := e.registerAndLogin(t, "olga")
		good := c.Tokens().AccessToken
		before := e.store.counts(t)
		big := `{"name":"` + strings.Repeat("a", 5000) + `","password":"x"}`
		cases := []struct {
			name, method, path, ctype, auth, body string
			status                                int
			code                                  string
		}{
			{"malformed JSON", "POST", "/v1/register", "application/json", "", `{"name": "x",`, 400, CodeBadRequest},
			{"not an object", "POST", "/v1/login", "", "", `[1,2,3]`, 400, CodeBadRequest},
			{"unknown field", "POST", "/v1/register", "", "", `{"name":"peter","password":"12345678","admin":true}`, 400, CodeBadRequest},
			{"trailing data", "POST", "/v1/register", "", "", `{"name":"peter","password":"12345678"} {"x":1}`, 400, CodeBadRequest},
			{"empty body", "POST", "/v1/register", "", "", ``, 400, CodeBadRequest},
			{"wrong type", "POST", "/v1/register", "", "", `{"name":7,"password":"12345678"}`, 400, CodeBadRequest},
			{"oversized body", "POST", "/v1/register", "", "", big, 413, CodeTooLarge},
			{"oversized save", "PUT", "/v1/character", "", "Bearer " + good, `{"character":{"region":"` + strings.Repeat("1", 5000) + `"}}`, 413, CodeTooLarge},
			{"form instead of JSON", "POST", "/v1/register", "application/x-www-form-urlencoded", "", `name=x`, 415, CodeUnsupportedMT},
			// What a cross-site page can send without a preflight.
			{"no content type", "POST", "/v1/login", "-", "", `{"name":"olga","password":"password-olga","peer_id":"12D3KooWGRUVh4ShuHuaC2Ne6tujCJbsbxJUUZDnyBbPzdRTPm9Q"}`, 415, CodeUnsupportedMT},
			{"text/plain JSON", "POST", "/v1/register", "text/plain", "", `{"name":"peter","password":"12345678"}`, 415, CodeUnsupportedMT},
			{"admin token without Bearer", "GET", "/v1/admin/sessions", "", testAdminToken, ``, 403, CodeForbidden},
			{"SQL in register name", "POST", "/v1/register", "", "", `{"name":"robert'); DROP TABLE accounts;--","password":"12345678"}`, 400, CodeBadRequest},
			{"SQL in login name", "POST", "/v1/login", "", "", `{"name":"' OR '1'='1","password":"' OR '1'='1","peer_id":"x"}`, 400, CodeBadRequest},
			{"SQL-ish valid name, wrong password", "POST", "/v1/login", "", "", `{"name":"olga--","password":"x","peer_id":"12D3KooWGRUVh4ShuHuaC2Ne6tujCJbsbxJUUZDnyBbPzdRTPm9Q"}`, 401, CodeUnauthorized},
			{"bad peer ID", "POST", "/v1/login", "", "", `{"name":"olga","password":"password-olga","peer_id":"not-a-peer"}`, 400, CodeBadRequest},
			{"garbage token", "GET", "/v1/character", "", "Bearer garbage", ``, 401, CodeUnauthorized},
			{"forged token", "GET", "/v1/character", "", "Bearer " + good[:len(good)-4] + "AAAA", ``, 401, CodeUnauthorized},
			{"token in wrong scheme", "GET", "/v1/character", "", "Basic " + good, ``, 401, CodeUnauthorized},
			{"no token", "PUT", "/v1/character", "", "", `{"character":{}}`, 401, CodeUnauthorized},
			{"garbage token on lease", "POST", "/v1/leases/1,1/acquire", "", "Bearer ow1.e30.AAAA", ``, 401, CodeUnauthorized},
			{"bad region", "POST", "/v1/leases/x';--/acquire", "", "Bearer " + good, ``, 400, CodeBadRequest},
			{"renew without id", "POST", "/v1/leases/1,1/renew", "", "Bearer " + good, `{}`, 400, CodeBadRequest},
			{"garbage refresh token", "POST", "/v1/refresh", "", "", `{"refresh_token":"'; DELETE FROM sessions;--"}`, 401, CodeUnauthorized},
			{"garbage logout", "POST", "/v1/logout", "", "", `{"refresh_token":"owr1.nope"}`, 401, CodeUnauthorized},
			{"user token on admin API", "POST", "/v1/admin/accounts/olga/disable", "", "Bearer " + good, ``, 403, CodeForbidden},
			{"admin: SQL in name", "POST", "/v1/admin/accounts/x'%20OR%201=1/disable", "", "Bearer " + testAdminToken, ``, 400, CodeBadRequest},
			{"admin: bad limit", "GET", "/v1/admin/sessions?limit=-1", "", "Bearer " + testAdminToken, ``, 400, CodeBadRequest},
			{"unknown endpoint", "GET", "/v1/nope", "", "", ``, 404, CodeNotFound},
			{"save: negative base version", "PUT", "/v1/character", "", "Bearer " + good, `{"character":{},"base_version":-1}`, 400, CodeBadRequest},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				req, err := http.NewRequest(tc.method, e.http.URL+tc.path, strings.NewReader(tc.body))
				if err != nil {
					t.Fatal(err)
				}
				switch tc.ctype {
				case "": // the common case: JSON
					req.Header.Set("Content-Type", "application/json")
				case "-": // none at all
				default:
					req.Header.Set("Content-Type", tc.ctype)
				}
				if tc.auth != "" {
					req.Header.Set("Authorization", tc.auth)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body := readAll(t, resp)
				var eb ErrorBody
				if err := json.Unmarshal([]byte(body), &eb); err != nil {
					t.Fatalf("answer is not an error body: %q", body)
				}
				if resp.StatusCode != tc.status || eb.Error.Code != tc.code || eb.Error.Message == "" {
					t.Fatalf("got %d %q %q, want %d %q", resp.StatusCode, eb.Error.Code, eb.Error.Message, tc.status, tc.code)
				}
			})
		}
		after := e.store.counts(t)
		if !reflect.DeepEqual(before, after) {
			t.Fatalf("refused requests changed the store: %v -> %v", before, after)
		}
		// And the account still works.
		if _, err := c.LoadCharacter(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}
