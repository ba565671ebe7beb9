package mcptool

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// retrying is a transport that sends a request again on its own when an
// attempt fails, as hashicorp/go-retryablehttp's RoundTripper does for a
// request whose body it can rewind, returning an error that wraps the last
// attempt's.
type retrying struct {
	base  http.RoundTripper
	addrs []string // the address each attempt goes to
	body  []byte
}

func (r *retrying) RoundTrip(req *http.Request) (*http.Response, error) {
	var err error
	for i, addr := range r.addrs {
		attempt := req.Clone(req.Context())
		attempt.URL.Host = addr
		attempt.Body = io.NopCloser(bytes.NewReader(r.body))
		var resp *http.Response
		if resp, err = r.base.RoundTrip(attempt); err == nil {
			return resp, nil
		}
		err = fmt.Errorf("attempt %d: %w", i+1, err)
	}
	return nil, fmt.Errorf("giving up after %d attempt(s): %w", len(r.addrs), err)
}

// TestARequestSentThenFailingToDialIsTaken: the call's POST reaches the
// server, which takes it and then loses the connection; the transport
// (Config.HTTPClient's, one that resends on its own) tries again, and that
// attempt fails dialing (the server restarting). The error wraps a dial
// *net.OpError; at cb4804a that said nothing went, and a tool not marked
// read-only or idempotent was sent again. Only net/http's own transport's
// dial errors say so. (Found by a review helper.)
func TestARequestSentThenFailingToDialIsTaken(t *testing.T) {
	var received atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		received.Add(1) // taken: the tool runs
		c, _, _ := http.NewResponseController(w).Hijack()
		_ = c.Close() // its answer lost
	}))
	defer srv.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	down := ln.Addr().String()
	_ = ln.Close() // nothing listens there: a dial is refused

	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"charge"}}`)
	ctx, rec := withSendRecord(t.Context())
	tr := recordingTransport{next: &retrying{base: &http.Transport{}, addrs: []string{srv.Listener.Addr().String(), down}, body: body}}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/mcp", bytes.NewReader(body))
	_, err := tr.RoundTrip(req)
	t.Logf("RoundTrip: %v; the server received %d POSTs; notTaken = %v", err, received.Load(), rec.notTaken())
	if received.Load() == 1 && rec.notTaken() {
		t.Errorf("the server took the POST, yet the record says it certainly did not (neverSent(%v)): the call would be sent again", err)
	}
}
