package mcptool

import (
	"cmp"
	"context"
	"net/http"
	"net/http/httptrace"
	"slices"
	"sync"
)

// A call's own request tells whether the server may have taken it. The
// SDK's errors cannot: it reports a refused dial, a 429 from a proxy and
// an answer lost after the server ran the call alike ("rejected by
// transport"), and a 404 that another request of the session got fails
// every call in flight on it with ErrSessionMissing. So the bridge's HTTP
// client records, for the POSTs made under a call's context, whether one
// was written to a connection and what the server answered it.

// sentKey is the context key of a call's *sendRecord.
type sentKey struct{}

// sendRecord is what became of the POSTs of one call.
type sendRecord struct {
	mu       sync.Mutex
	written  bool  // a request was written, whole or in part
	statuses []int // the answers' status codes, in order
}

// notTakenStatuses are answers a server (or a proxy before it) gives a
// request it did not process: it did not know the session (404), it is
// over its rate (429), it is unavailable (503).
var notTakenStatuses = []int{http.StatusNotFound, http.StatusTooManyRequests, http.StatusServiceUnavailable}

// withSendRecord returns ctx carrying a new record for the call's requests.
func withSendRecord(ctx context.Context) (context.Context, *sendRecord) {
	rec := &sendRecord{}
	return context.WithValue(ctx, sentKey{}, rec), rec
}

// notTaken reports that the server certainly did not run the call: no
// request of it was written, or every one written was answered with a
// status of a request not processed.
func (r *sendRecord) notTaken() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.written {
		return true
	}
	if len(r.statuses) == 0 {
		return false // written, and no answer: it may have run
	}
	for _, s := range r.statuses {
		if !slices.Contains(notTakenStatuses, s) {
			return false
		}
	}
	return true
}

func (r *sendRecord) wrote() {
	r.mu.Lock()
	r.written = true
	r.mu.Unlock()
}

func (r *sendRecord) answered(status int) {
	r.mu.Lock()
	r.statuses = append(r.statuses, status)
	r.mu.Unlock()
}

// recordingTransport records the POSTs made under a call's context in its
// sendRecord (see above), and passes every request on to next.
type recordingTransport struct{ next http.RoundTripper }

// RoundTrip implements http.RoundTripper.
func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec, _ := req.Context().Value(sentKey{}).(*sendRecord)
	if rec == nil || req.Method != http.MethodPost {
		return t.next.RoundTrip(req)
	}
	// Written whole or in part, even with an error: some of it may have
	// left. A dial that fails writes nothing.
	trace := &httptrace.ClientTrace{WroteHeaders: rec.wrote, WroteRequest: func(httptrace.WroteRequestInfo) { rec.wrote() }}
	resp, err := t.next.RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if err == nil {
		rec.answered(resp.StatusCode)
	}
	return resp, err
}

// recordingClient is c with its transport wrapped in recordingTransport.
func recordingClient(c *http.Client) *http.Client {
	cp := *c
	cp.Transport = recordingTransport{next: cmp.Or[http.RoundTripper](c.Transport, http.DefaultTransport)}
	return &cp
}
