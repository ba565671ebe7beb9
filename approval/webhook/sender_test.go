package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/approval/webhook"
)

// received is one request a receiver got.
type received struct {
	at     time.Time
	header http.Header
	body   []byte
}

// receiver is a real HTTP server on 127.0.0.1 that records every request
// and answers with respond, given the request's 1-based number.
type receiver struct {
	srv *httptest.Server

	mu   sync.Mutex
	reqs []received
}

func newReceiver(t *testing.T, respond func(n int, w http.ResponseWriter, r *http.Request, body []byte)) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.reqs = append(rc.reqs, received{at: time.Now(), header: r.Header.Clone(), body: body})
		n := len(rc.reqs)
		rc.mu.Unlock()
		respond(n, w, r, body)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) URL() string { return rc.srv.URL }

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.reqs...)
}

// status answers every request with code.
func status(code int) func(int, http.ResponseWriter, *http.Request, []byte) {
	return func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(code) }
}

// verifying answers 204 to requests Verify accepts with secrets, else 401.
func verifying(secrets ...webhook.Secret) func(int, http.ResponseWriter, *http.Request, []byte) {
	return func(_ int, w http.ResponseWriter, r *http.Request, body []byte) {
		if err := webhook.Verify(secrets, r.Header, body, 0); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// newSender builds a Sender with tiny backoff intervals, allowed to reach
// 127.0.0.1, unless cfg says otherwise.
func newSender(t *testing.T, cfg webhook.Config) *webhook.Sender {
	t.Helper()
	if cfg.InitialInterval == 0 {
		cfg.InitialInterval = 5 * time.Millisecond
	}
	if cfg.MaxInterval == 0 {
		cfg.MaxInterval = 20 * time.Millisecond
	}
	s, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.CloseIdleConnections)
	return s
}

// attempts records Config.OnAttempt calls.
type attempts struct {
	mu   sync.Mutex
	list []webhook.Attempt
}

func (a *attempts) record(at webhook.Attempt) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.list = append(a.list, at)
}

func (a *attempts) all() []webhook.Attempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]webhook.Attempt(nil), a.list...)
}

func one(t *testing.T, results []webhook.Result) webhook.Result {
	t.Helper()
	if len(results) != 1 {
		t.Fatalf("got %d results, want 1", len(results))
	}
	return results[0]
}

func statusOf(err error) int {
	var se *webhook.StatusError
	if errors.As(err, &se) {
		return se.StatusCode
	}
	return 0
}

func TestDeliverSignedRequest(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	rc := newReceiver(t, verifying(secret))
	s := newSender(t, webhook.Config{Endpoints: []webhook.Endpoint{{URL: rc.URL() + "/hooks", Secrets: []webhook.Secret{secret}}}, AllowPrivate: true})

	occurred := time.Date(2026, 3, 4, 5, 6, 7, 890000000, time.FixedZone("CET", 3600))
	res := one(t, s.Deliver(t.Context(), webhook.Event{
		Type: "approval.requested", Timestamp: occurred, Data: map[string]any{"call_id": "c1", "tool": "transfer_funds"},
	}))
	if res.Err != nil || res.StatusCode != http.StatusNoContent || res.Attempts != 1 {
		t.Fatalf("Result = %+v, want delivered in one attempt with 204", res)
	}
	if !strings.HasPrefix(res.EventID, "msg_") || len(res.EventID) < 20 {
		t.Fatalf("generated EventID = %q, want msg_ and random characters", res.EventID)
	}
	reqs := rc.requests()
	if len(reqs) != 1 {
		t.Fatalf("receiver got %d requests, want 1", len(reqs))
	}
	h := reqs[0].header
	if got := h.Get("Content-Type"); got != "application/json" {
		t.Errorf("content-type = %q", got)
	}
	if got := h.Get("webhook-id"); got != res.EventID {
		t.Errorf("webhook-id = %q, want %q", got, res.EventID)
	}
	unix, err := strconv.ParseInt(h.Get("webhook-timestamp"), 10, 64)
	if err != nil || time.Since(time.Unix(unix, 0)).Abs() > 5*time.Second {
		t.Errorf("webhook-timestamp = %q, want the attempt's unix seconds", h.Get("webhook-timestamp"))
	}
	if !strings.HasPrefix(h.Get("webhook-signature"), "v1,") {
		t.Errorf("webhook-signature = %q", h.Get("webhook-signature"))
	}
	var body struct {
		Type      string         `json:"type"`
		Timestamp string         `json:"timestamp"`
		Data      map[string]any `json:"data"`
	}
	if err := json.Unmarshal(reqs[0].body, &body); err != nil {
		t.Fatalf("body %s: %v", reqs[0].body, err)
	}
	ts, err := time.Parse(time.RFC3339, body.Timestamp)
	if body.Type != "approval.requested" || err != nil || !ts.Equal(occurred) || body.Data["call_id"] != "c1" {
		t.Fatalf("body = %s, want the event's type, RFC 3339 timestamp and data", reqs[0].body)
	}
}

func TestDeliverRotation(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret := webhook.NewSecret(), webhook.NewSecret()
	knowsOld := newReceiver(t, verifying(oldSecret))
	knowsNew := newReceiver(t, verifying(newSecret))
	knowsNeither := newReceiver(t, verifying(webhook.NewSecret()))
	both := []webhook.Secret{newSecret, oldSecret}
	s := newSender(t, webhook.Config{AllowPrivate: true, Endpoints: []webhook.Endpoint{
		{URL: knowsOld.URL(), Secrets: both},
		{URL: knowsNew.URL(), Secrets: both},
		{URL: knowsNeither.URL(), Secrets: both},
	}})
	results := s.Deliver(t.Context(), webhook.Event{Type: "approval.requested", Data: "x"})
	for i, want := range []int{http.StatusNoContent, http.StatusNoContent, http.StatusUnauthorized} {
		if results[i].StatusCode != want || (want == http.StatusNoContent) != (results[i].Err == nil) {
			t.Errorf("endpoint %d: Result = %+v, want status %d", i, results[i], want)
		}
	}
	if sig := knowsOld.requests()[0].header.Get("webhook-signature"); len(strings.Fields(sig)) != 2 {
		t.Errorf("webhook-signature = %q, want two signatures", sig)
	}
}

func TestDeliverRetries503(t *testing.T) {
	t.Parallel()
	const failures = 3
	secret := webhook.NewSecret()
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		if n <= failures {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		verifying(secret)(n, w, r, body)
	})
	var rec attempts
	s := newSender(t, webhook.Config{
		Endpoints:    []webhook.Endpoint{{URL: rc.URL(), Secrets: []webhook.Secret{secret}}},
		AllowPrivate: true, OnAttempt: rec.record,
	})
	res := one(t, s.Deliver(t.Context(), webhook.Event{ID: "msg_retry", Type: "approval.requested"}))
	if res.Err != nil || res.Attempts != failures+1 || res.StatusCode != http.StatusNoContent {
		t.Fatalf("Result = %+v, want delivered on attempt %d", res, failures+1)
	}

	reqs := rc.requests()
	if len(reqs) != failures+1 {
		t.Fatalf("receiver got %d requests, want %d", len(reqs), failures+1)
	}
	for i, r := range reqs {
		if got := r.header.Get("webhook-id"); got != "msg_retry" {
			t.Errorf("request %d: webhook-id = %q, want the same id on every attempt", i+1, got)
		}
		if string(r.body) != string(reqs[0].body) {
			t.Errorf("request %d: body changed between attempts", i+1)
		}
		// Each attempt's signature is over its own timestamp.
		if err := webhook.Verify([]webhook.Secret{secret}, r.header, r.body, 0); err != nil {
			t.Errorf("request %d: %v", i+1, err)
		}
	}

	got := rec.all()
	if len(got) != failures+1 {
		t.Fatalf("OnAttempt called %d times, want %d", len(got), failures+1)
	}
	for i, a := range got {
		last := i == failures
		if a.Number != i+1 || a.URL != rc.URL() || a.EventID != "msg_retry" || a.Duration <= 0 || a.Start.IsZero() {
			t.Errorf("attempt %d = %+v", i+1, a)
		}
		switch {
		case !last && (a.StatusCode != 503 || statusOf(a.Err) != 503 || a.NextDelay <= 0):
			t.Errorf("attempt %d = %+v, want 503 with a next delay", i+1, a)
		case last && (a.StatusCode != 204 || a.Err != nil || a.NextDelay != 0):
			t.Errorf("attempt %d = %+v, want 204 and no next delay", i+1, a)
		}
	}
}

func TestDeliverHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusTooManyRequests, http.StatusServiceUnavailable} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, func(n int, w http.ResponseWriter, _ *http.Request, _ []byte) {
				if n == 1 {
					w.Header().Set("Retry-After", "1")
					w.WriteHeader(code)
					return
				}
				w.WriteHeader(http.StatusOK)
			})
			var rec attempts
			s := newSender(t, webhook.Config{
				Endpoints:    []webhook.Endpoint{{URL: rc.URL(), Secrets: []webhook.Secret{webhook.NewSecret()}}},
				AllowPrivate: true, OnAttempt: rec.record, MaxElapsed: 30 * time.Second,
			})
			res := one(t, s.Deliver(t.Context(), webhook.Event{Type: "approval.requested"}))
			if res.Err != nil || res.Attempts != 2 {
				t.Fatalf("Result = %+v, want delivered on the second attempt", res)
			}
			reqs := rc.requests()
			if gap := reqs[1].at.Sub(reqs[0].at); gap < time.Second {
				t.Fatalf("second attempt came %s after the first, want at least the Retry-After of 1s", gap)
			}
			first := rec.all()[0]
			var se *webhook.StatusError
			if !errors.As(first.Err, &se) || se.RetryAfter != time.Second || first.NextDelay < time.Second {
				t.Fatalf("first attempt = %+v, want a StatusError with RetryAfter 1s and NextDelay ≥ 1s", first)
			}
		})
	}
}

func TestDeliverRetryAfterBeyondMaxElapsed(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(_ int, w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	s := newSender(t, webhook.Config{
		Endpoints:    []webhook.Endpoint{{URL: rc.URL(), Secrets: []webhook.Secret{webhook.NewSecret()}}},
		AllowPrivate: true, MaxElapsed: time.Minute,
	})
	start := time.Now()
	res := one(t, s.Deliver(t.Context(), webhook.Event{Type: "approval.requested"}))
	if !errors.Is(res.Err, webhook.ErrExhausted) || res.Attempts != 1 || statusOf(res.Err) != 503 {
		t.Fatalf("Result = %+v, want ErrExhausted after one attempt", res)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Fatalf("Deliver took %s, want it to give up at once", elapsed)
	}
}

func TestDeliverGoneDisablesEndpoint(t *testing.T) {
	t.Parallel()
	gone := newReceiver(t, status(http.StatusGone))
	healthy := newReceiver(t, status(http.StatusOK))
	secrets := []webhook.Secret{webhook.NewSecret()}
	s := newSender(t, webhook.Config{AllowPrivate: true, Endpoints: []webhook.Endpoint{
		{URL: gone.URL(), Secrets: secrets}, {URL: healthy.URL(), Secrets: secrets},
	}})

	results := s.Deliver(t.Context(), webhook.Event{Type: "approval.requested"})
	r := results[0]
	if !errors.Is(r.Err, webhook.ErrDisabled) || statusOf(r.Err) != http.StatusGone || !r.Disabled || r.Attempts != 1 {
		t.Fatalf("410 Result = %+v, want ErrDisabled wrapping a 410 StatusError after one attempt", r)
	}
	if !s.Disabled(gone.URL()) || s.Disabled(healthy.URL()) {
		t.Fatal("Disabled does not report the 410 endpoint (only)")
	}
	if results[1].Err != nil {
		t.Fatalf("healthy endpoint: %v", results[1].Err)
	}

	results = s.Deliver(t.Context(), webhook.Event{Type: "approval.decided"})
	r = results[0]
	if !errors.Is(r.Err, webhook.ErrDisabled) || !r.Disabled || r.Attempts != 0 {
		t.Fatalf("later Result = %+v, want ErrDisabled without an attempt", r)
	}
	if n := len(gone.requests()); n != 1 {
		t.Fatalf("disabled endpoint got %d requests, want only the first", n)
	}
	if results[1].Err != nil || len(healthy.requests()) != 2 {
		t.Fatalf("healthy endpoint: %v, %d requests; want both events", results[1].Err, len(healthy.requests()))
	}
}

func TestDeliverPermanentFailures(t *testing.T) {
	t.Parallel()
	for _, code := range []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotFound, http.StatusRequestEntityTooLarge} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, status(code))
			s := newSender(t, webhook.Config{
				Endpoints:    []webhook.Endpoint{{URL: rc.URL(), Secrets: []webhook.Secret{webhook.NewSecret()}}},
				AllowPrivate: true,
			})
			res := one(t, s.Deliver(t.Context(), webhook.Event{Type: "approval.requested"}))
			if statusOf(res.Err) != code || res.Attempts != 1 || errors.Is(res.Err, webhook.ErrExhausted) || res.Disabled {
				t.Fatalf("Result = %+v, want a permanent %d StatusError after one attempt", res, code)
			}
			if n := len(rc.requests()); n != 1 {
				t.Fatalf("receiver got %d requests, want 1 (no retry)", n)
			}
		})
	}
}

func TestDeliverDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	target := newReceiver(t, status(http.StatusOK))
	redirector := newReceiver(t, func(_ int, w http.ResponseWriter, r *http.Request, _ []byte) {
		http.Redirect(w, r, target.URL()+"/elsewhere", http.StatusFound)
	})
	s := newSender(t, webhook.Config{
		Endpoints:    []webhook.Endpoint{{URL: redirector.URL(), Secrets: []webhook.Secret{webhook.NewSecret()}}},
		AllowPrivate: true,
	})
	res := one(t, s.Deliver(t.Context(), webhook.Event{Type: "approval.requested"}))
	var se *webhook.StatusError
	if !errors.As(res.Err, &se) || se.StatusCode != http.StatusFound || se.Location != target.URL()+"/elsewhere" || res.Attempts != 1 {
		t.Fatalf("Result = %+v, want a 302 StatusError with its Location after one attempt", res)
	}
	if n := len(target.requests()); n != 0 {
		t.Fatalf("redirect target got %d requests, want 0", n)
	}
	if n := len(redirector.requests()); n != 1 {
		t.Fatalf("endpoint got %d requests, want 1", n)
	}
}

func TestDeliverRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusOK))
	port := rc.srv.Listener.Addr().String()
	port = port[strings.LastIndex(port, ":")+1:]
	tests := []struct {
		name     string
		url      string
		wantAddr string // substring of the refused address
	}{
		{name: "loopback IPv4 literal", url: rc.URL(), wantAddr: "127.0.0.1:" + port},
		{name: "localhost name", url: "http://localhost:" + port + "/hook", wantAddr: ":" + port},
		{name: "IPv4-mapped IPv6 loopback", url: "http://[::ffff:127.0.0.1]:" + port, wantAddr: "127.0.0.1"},
		{name: "unspecified", url: "http://0.0.0.0:" + port, wantAddr: "0.0.0.0:" + port},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var rec attempts
			s := newSender(t, webhook.Config{
				Endpoints: []webhook.Endpoint{{URL: tt.url, Secrets: []webhook.Secret{webhook.NewSecret()}}},
				OnAttempt: rec.record,
			})
			res := one(t, s.Deliver(t.Context(), webhook.Event{Type: "approval.requested"}))
			var blocked *webhook.BlockedAddressError
			if !errors.As(res.Err, &blocked) || !errors.Is(res.Err, webhook.ErrBlockedAddress) {
				t.Fatalf("Result.Err = %v, want a BlockedAddressError", res.Err)
			}
			if !strings.Contains(blocked.Address, tt.wantAddr) || !strings.Contains(res.Err.Error(), blocked.Address) ||
				!strings.Contains(res.Err.Error(), "refusing to connect") {
				t.Fatalf("Result.Err = %v (address %q), want it to name the address %q", res.Err, blocked.Address, tt.wantAddr)
			}
			if res.Attempts != 1 || len(rec.all()) != 1 || errors.Is(res.Err, webhook.ErrExhausted) {
				t.Fatalf("Result = %+v, want one attempt, not retried", res)
			}
		})
	}
	t.Cleanup(func() {
		if n := len(rc.requests()); n != 0 {
			t.Errorf("receiver got %d requests, want none", n)
		}
	})
}

func TestDeliverMaxElapsedBoundsRetrying(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusInternalServerError))
	const maxElapsed = 300 * time.Millisecond
	var rec attempts
	s := newSender(t, webhook.Config{
		Endpoints:    []webhook.Endpoint{{URL: rc.URL(), Secrets: []webhook.Secret{webhook.NewSecret()}}},
		AllowPrivate: true, MaxElapsed: maxElapsed, InitialInterval: 10 * time.Millisecond, MaxInterval: 40 * time.Millisecond,
		OnAttempt: rec.record,
	})
	start := time.Now()
	res := one(t, s.Deliver(t.Context(), webhook.Event{Type: "approval.requested"}))
	elapsed := time.Since(start)
	if !errors.Is(res.Err, webhook.ErrExhausted) || statusOf(res.Err) != 500 || res.Attempts < 2 {
		t.Fatalf("Result = %+v, want ErrExhausted wrapping the last 500 after several attempts", res)
	}
	if elapsed > maxElapsed+2*time.Second { // MaxElapsed, one more attempt, slack for -race
		t.Fatalf("Deliver took %s, want about MaxElapsed (%s)", elapsed, maxElapsed)
	}
	got := rec.all()
	if len(got) != res.Attempts || got[len(got)-1].NextDelay != 0 {
		t.Fatalf("OnAttempt got %d attempts (last %+v), want %d ending without a next delay", len(got), got[len(got)-1], res.Attempts)
	}
	if last := got[len(got)-1].Start; last.Sub(start) > maxElapsed {
		t.Fatalf("last attempt started %s after Deliver, past MaxElapsed", last.Sub(start))
	}
}

func TestDeliverRetriesTimeouts(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request, _ []byte) {
		if n == 1 {
			<-r.Context().Done() // hang until the sender gives up on the attempt
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	var rec attempts
	s := newSender(t, webhook.Config{
		Endpoints: []webhook.Endpoint{{URL: rc.URL(), Secrets: []webhook.Secret{webhook.NewSecret()}}},
		// A second long enough for the answering attempt on a loaded
		// machine (at 300 ms, CI once saw it time out too).
		AllowPrivate: true, Timeout: time.Second, OnAttempt: rec.record,
	})
	res := one(t, s.Deliver(t.Context(), webhook.Event{Type: "approval.requested"}))
	if res.Err != nil || res.Attempts != 2 || res.StatusCode != http.StatusAccepted {
		t.Fatalf("Result = %+v, want delivered on the second attempt", res)
	}
	if first := rec.all()[0]; !errors.Is(first.Err, context.DeadlineExceeded) || first.StatusCode != 0 {
		t.Fatalf("first attempt = %+v, want a deadline error", first)
	}
}

func TestDeliverStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusServiceUnavailable))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	s := newSender(t, webhook.Config{
		Endpoints:    []webhook.Endpoint{{URL: rc.URL(), Secrets: []webhook.Secret{webhook.NewSecret()}}},
		AllowPrivate: true, InitialInterval: time.Hour, MaxInterval: time.Hour,
		OnAttempt: func(webhook.Attempt) { cancel() }, // during the hour-long wait
	})
	res := one(t, s.Deliver(ctx, webhook.Event{Type: "approval.requested"}))
	if !errors.Is(res.Err, context.Canceled) || statusOf(res.Err) != 503 || res.Attempts != 1 {
		t.Fatalf("Result = %+v, want context.Canceled with the last 503", res)
	}
}

func TestDeliverInvalidEvent(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, status(http.StatusOK))
	s := newSender(t, webhook.Config{
		Endpoints:    []webhook.Endpoint{{URL: rc.URL(), Secrets: []webhook.Secret{webhook.NewSecret()}}},
		AllowPrivate: true,
	})
	tests := []struct {
		name string
		ev   webhook.Event
		want string
	}{
		{name: "no type", ev: webhook.Event{}, want: "Type is empty"},
		{name: "full stop in id", ev: webhook.Event{ID: "msg.1", Type: "a.b"}, want: "full stops"},
		{name: "space in id", ev: webhook.Event{ID: "msg 1", Type: "a.b"}, want: "without spaces"},
		{name: "data not JSON", ev: webhook.Event{Type: "a.b", Data: make(chan int)}, want: "does not marshal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := one(t, s.Deliver(t.Context(), tt.ev))
			if !errors.Is(res.Err, webhook.ErrInvalidEvent) || !strings.Contains(res.Err.Error(), tt.want) || res.Attempts != 0 {
				t.Fatalf("Result = %+v, want ErrInvalidEvent naming %q", res, tt.want)
			}
		})
	}
	if n := len(rc.requests()); n != 0 {
		t.Fatalf("receiver got %d requests, want none", n)
	}
}

func TestDeliverConcurrently(t *testing.T) {
	t.Parallel()
	secret := webhook.NewSecret()
	steady := newReceiver(t, verifying(secret))
	flaky := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request, body []byte) {
		if n%2 == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		verifying(secret)(n, w, r, body)
	})
	s := newSender(t, webhook.Config{AllowPrivate: true, Endpoints: []webhook.Endpoint{
		{URL: steady.URL(), Secrets: []webhook.Secret{secret}}, {URL: flaky.URL(), Secrets: []webhook.Secret{secret}},
	}})
	const events = 16
	var wg sync.WaitGroup
	errs := make(chan error, events*2)
	for i := range events {
		wg.Go(func() {
			for _, r := range s.Deliver(t.Context(), webhook.Event{ID: fmt.Sprintf("msg_%d", i), Type: "approval.requested", Data: i}) {
				if r.Err != nil {
					errs <- r.Err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, rc := range []*receiver{steady, flaky} {
		ids := map[string]bool{}
		for _, r := range rc.requests() {
			ids[r.header.Get("webhook-id")] = true
		}
		if len(ids) != events {
			t.Errorf("%s got %d distinct events, want %d", rc.URL(), len(ids), events)
		}
	}
}

func TestNewValidatesConfig(t *testing.T) {
	t.Parallel()
	ok := []webhook.Secret{webhook.NewSecret()}
	tests := []struct {
		name    string
		cfg     webhook.Config
		wantErr string
	}{
		{name: "valid", cfg: webhook.Config{Endpoints: []webhook.Endpoint{{URL: "https://dash.example.com/hooks", Secrets: ok}}}},
		{name: "no endpoints", cfg: webhook.Config{}, wantErr: "Config.Endpoints is empty"},
		{name: "empty URL", cfg: webhook.Config{Endpoints: []webhook.Endpoint{{Secrets: ok}}}, wantErr: "Config.Endpoints[0].URL: empty"},
		{name: "ftp", cfg: webhook.Config{Endpoints: []webhook.Endpoint{{URL: "ftp://dash.example.com", Secrets: ok}}}, wantErr: `Config.Endpoints[0].URL: scheme "ftp" not allowed`},
		{name: "relative", cfg: webhook.Config{Endpoints: []webhook.Endpoint{{URL: "/hooks", Secrets: ok}}}, wantErr: `scheme "" not allowed`},
		{name: "no host", cfg: webhook.Config{Endpoints: []webhook.Endpoint{{URL: "https:///hooks", Secrets: ok}}}, wantErr: "has no host"},
		{name: "not a URL", cfg: webhook.Config{Endpoints: []webhook.Endpoint{{URL: "http://a b\x7f", Secrets: ok}}}, wantErr: "not a URL"},
		{name: "duplicate", cfg: webhook.Config{Endpoints: []webhook.Endpoint{
			{URL: "https://a.example.com", Secrets: ok}, {URL: "https://a.example.com", Secrets: ok},
		}}, wantErr: "Config.Endpoints[1].URL duplicates Config.Endpoints[0].URL"},
		{name: "no secrets", cfg: webhook.Config{Endpoints: []webhook.Endpoint{{URL: "https://a.example.com"}}}, wantErr: "Config.Endpoints[0].Secrets is empty"},
		{name: "zero secret", cfg: webhook.Config{Endpoints: []webhook.Endpoint{{URL: "https://a.example.com", Secrets: []webhook.Secret{{}}}}}, wantErr: "Secrets[0] is the zero Secret"},
		{name: "negative timeout", cfg: webhook.Config{Endpoints: []webhook.Endpoint{{URL: "https://a.example.com", Secrets: ok}}, Timeout: -time.Second}, wantErr: "Config.Timeout must not be negative"},
		{name: "negative max elapsed", cfg: webhook.Config{Endpoints: []webhook.Endpoint{{URL: "https://a.example.com", Secrets: ok}}, MaxElapsed: -1}, wantErr: "Config.MaxElapsed must not be negative"},
		{name: "initial above max", cfg: webhook.Config{Endpoints: []webhook.Endpoint{{URL: "https://a.example.com", Secrets: ok}}, InitialInterval: time.Hour}, wantErr: "Config.InitialInterval (1h0m0s) must not exceed Config.MaxInterval (5m0s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := webhook.New(tt.cfg)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New = %v", err)
				}
				s.CloseIdleConnections()
				return
			}
			if !errors.Is(err, webhook.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New = %v, want ErrInvalidConfig naming %q", err, tt.wantErr)
			}
		})
	}
}
