package accounts

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzDecodeRequest feeds arbitrary bodies to the request decoder for
// every request type: it must never panic, and every refusal must be a 4xx
// API error.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range []string{
		`{"name":"alice","password":"12345678"}`,
		`{"name":"alice","password":"x","peer_id":"12D3KooWGRUVh4ShuHuaC2Ne6tujCJbsbxJUUZDnyBbPzdRTPm9Q"}`,
		`{"character":{"region":"1,2","x":1,"y":2,"inventory":[{"kind":"a","count":1}]},"base_version":3}`,
		`{"lease_id":18446744073709551615}`,
		`{"refresh_token":"owr1.x"} {}`,
		`[`, ``, `null`, `{"x":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		targets := []any{&RegisterRequest{}, &LoginRequest{}, &RefreshRequest{}, &SaveRequest{}, &PasswordRequest{}, &LeaseRequest{}, &VerifyRequest{}}
		for _, dst := range targets {
			err := decodeJSON(http.MaxBytesReader(nil, io.NopCloser(bytes.NewReader(body)), 4096), dst)
			if err == nil {
				if sr, ok := dst.(*SaveRequest); ok {
					sr.Character.Validate() // must not panic either
				}
				continue
			}
			var he *httpError
			if !errors.As(err, &he) || statusOf(he.code) < 400 || statusOf(he.code) >= 500 {
				t.Fatalf("decode %T: error %v is not a 4xx API error", dst, err)
			}
		}
	})
}

// FuzzHandlers posts arbitrary bodies to every endpoint of a real server on
// SQLite: no panic, no 5xx.
func FuzzHandlers(f *testing.F) {
	f.Add("/v1/register", []byte(`{"name":"fuzzy","password":"12345678"}`))
	f.Add("/v1/login", []byte(`{"name":"fuzzy","password":"12345678","peer_id":"12D3KooWGRUVh4ShuHuaC2Ne6tujCJbsbxJUUZDnyBbPzdRTPm9Q"}`))
	f.Add("/v1/refresh", []byte(`{"refresh_token":"owr1.AAAA"}`))
	f.Add("/v1/tokens/verify", []byte(`{"token":"ow1.e30.AAAA","peer_id":"x"}`))
	f.Add("/v1/leases/1,1/renew", []byte(`{"lease_id":1}`))
	store, err := OpenStore(context.Background(), "sqlite:"+f.TempDir()+"/fuzz.db", "")
	if err != nil {
		f.Fatal(err)
	}
	defer store.Close()
	e := newTestServer(f, store)
	f.Fuzz(func(t *testing.T, path string, body []byte) {
		if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "?#%") || len(path) > 200 {
			return
		}
		for _, c := range []byte(path) {
			if c <= 0x20 || c >= 0x7f {
				return
			}
		}
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodGet} {
			req := httptest.NewRequest(method, path, bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+string(bytes.ToValidUTF8(body[:min(len(body), 64)], nil)))
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			e.Handler().ServeHTTP(w, req)
			if w.Code >= 500 {
				t.Fatalf("%s %s %q: %d %s", method, path, body, w.Code, w.Body.String())
			}
		}
	})
}
