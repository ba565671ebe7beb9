package mcptool

import (
	"cmp"
	"context"
	"errors"
	"net"
	"net/http"
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
	written  bool  // a request may have reached the server, whole or in part
	statuses []int // the answers' status codes, in order
}

// notTakenStatuses are answers given to a request that was not processed:
// the server did not know its session (404), or it, or a proxy before it,
// is over its rate (429). Not 503: a proxy answers it too when its
// upstream connection broke after the request went through (Envoy's
// "upstream connect error or disconnect/reset before headers").
var notTakenStatuses = []int{http.StatusNotFound, http.StatusTooManyRequests}

// withSendRecord returns ctx carrying a new record for the call's requests.
func withSendRecord(ctx context.Context) (context.Context, *sendRecord) {
	rec := &sendRecord{}
	return context.WithValue(ctx, sentKey{}, rec), rec
}

// notTaken reports that the server certainly did not run the call: no
// request of it may have reached it, or every one that may have was
// answered with a status of a request not processed.
func (r *sendRecord) notTaken() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.written {
		return true
	}
	if len(r.statuses) == 0 {
		return false // it may have gone, and no answer came: it may have run
	}
	for _, s := range r.statuses {
		if !slices.Contains(notTakenStatuses, s) {
			return false
		}
	}
	return true
}

// sent records a request that may have reached the server, and its
// answer's status (0: none came).
func (r *sendRecord) sent(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.written = true
	if status != 0 {
		r.statuses = append(r.statuses, status)
	}
}

// recordingTransport records the POSTs made under a call's context in its
// sendRecord (see above), and passes every request on to next.
type recordingTransport struct {
	next http.RoundTripper
	// netHTTP: next is net/http's own *http.Transport, which sends a POST
	// once and fails a dial before writing anything. Another may resend on
	// its own (a retrying transport), so a dial error it returns may follow
	// an attempt that went.
	netHTTP bool
}

// RoundTrip implements http.RoundTripper. A POST is taken to have gone
// unless net/http's transport failed dialing (or connecting through a
// proxy), which sends nothing: the transport's hooks are not trusted to
// say more (one may fire none), nor another transport's errors (it may
// resend on its own).
func (t recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec, _ := req.Context().Value(sentKey{}).(*sendRecord)
	if rec == nil || req.Method != http.MethodPost {
		return t.next.RoundTrip(req)
	}
	resp, err := t.next.RoundTrip(req)
	switch {
	case err == nil:
		rec.sent(resp.StatusCode)
	case !t.netHTTP || !neverSent(err):
		rec.sent(0)
	}
	return resp, err
}

// neverSent reports an error of a request that failed before any of it
// was written: dialing the server, or connecting through a proxy.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && (op.Op == "dial" || op.Op == "proxyconnect")
}

// recordingClient is c with its transport wrapped in recordingTransport.
func recordingClient(c *http.Client) *http.Client {
	cp := *c
	next := cmp.Or[http.RoundTripper](c.Transport, http.DefaultTransport)
	_, netHTTP := next.(*http.Transport)
	cp.Transport = recordingTransport{next: next, netHTTP: netHTTP}
	return &cp
}
