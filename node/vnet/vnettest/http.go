package vnettest

import (
	"net/http"
	"net/http/httptest"
)

// HandlerTransport is an http.RoundTripper that serves each request by
// calling Handler in the caller's goroutine, as if it came from
// 127.0.0.1. Tests reach an HTTP service (the account server) through it
// instead of a socket: a goroutine waiting on a socket is not durably
// blocked, so it would stop a synctest bubble's clock.
type HandlerTransport struct{ Handler http.Handler }

func (t HandlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := req.Context().Err(); err != nil {
		return nil, err
	}
	in := req.Clone(req.Context())
	in.RemoteAddr, in.RequestURI = "127.0.0.1:40000", req.URL.RequestURI()
	if in.Body == nil {
		in.Body = http.NoBody
	}
	rec := httptest.NewRecorder()
	t.Handler.ServeHTTP(rec, in)
	return rec.Result(), nil
}
