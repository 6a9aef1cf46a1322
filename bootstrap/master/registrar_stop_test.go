package master

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// cancelOnSend is a transport that ends the registrar's run while its
// registration is on the way, then fails the request, as a master that
// is gone would.
type cancelOnSend struct{ cancel context.CancelFunc }

func (c cancelOnSend) RoundTrip(*http.Request) (*http.Response, error) {
	c.cancel()
	return nil, errCut
}

// A registrar stopped while a registration is on its way returns: the
// send it gave up on leaves its next registration due at once, which must
// not keep the loop from seeing that its context ended. (It spun there,
// sending, for good: a test's kill of a registrar hung until the test
// binary's timeout.)
func TestRegistrarStopsWhenCancelledDuringASend(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := NewRegistrar(RegistrarConfig{Master: "http://127.0.0.1:1", Token: testToken, Game: testGame("stopped", 1),
		Logger: quiet(), HTTPClient: &http.Client{Transport: cancelOnSend{cancel}}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return within 30 s of its context ending during a send")
	}
}
