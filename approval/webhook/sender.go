package webhook

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Defaults of [Config].
const (
	DefaultMaxElapsed      = 24 * time.Hour
	DefaultInitialInterval = time.Second
	DefaultMaxInterval     = 5 * time.Minute
	DefaultTimeout         = 10 * time.Second
)

// userAgent identifies the Sender's requests.
const userAgent = "windlass-webhook/1"

// maxDrain bounds the response body read (and discarded) so that the
// connection can be reused.
const maxDrain = 64 << 10

// Endpoint is one receiver of webhooks.
type Endpoint struct {
	// URL is where events are posted: http or https, with a host. It also
	// names the endpoint in [Result], [Attempt] and [Sender.Disabled].
	URL string
	// Secrets sign every request, one signature each: normally one; during
	// a rotation the new and the old, so the receiver accepts the request
	// whichever it knows. At least one is required.
	Secrets []Secret
}

// Config configures a [Sender]. Zero values mean the documented defaults.
type Config struct {
	// Endpoints receive every event. At least one is required; URLs must
	// be distinct.
	Endpoints []Endpoint
	// Client sends the requests. Default: a client built by the package
	// with no proxy, whose dialer enforces the SSRF guard (see
	// AllowPrivate). A Client given here is used with its own Transport, so
	// the guard does not apply: supply one only with a trusted egress path
	// (such as a filtering proxy). Either way redirects are never followed:
	// the Sender uses a copy whose CheckRedirect returns
	// [http.ErrUseLastResponse].
	Client *http.Client
	// AllowPrivate lets the package-built client connect to loopback,
	// private, link-local and other non-public addresses. Default false;
	// set it for development against localhost.
	AllowPrivate bool
	// MaxElapsed bounds the retrying of one event to one endpoint: no
	// attempt starts later than MaxElapsed after the first (an attempt in
	// flight may still take up to Timeout), and a Retry-After that would
	// push the next attempt past it ends the delivery at once. Default 24h.
	MaxElapsed time.Duration
	// InitialInterval is the wait before the first retry; later waits grow
	// exponentially (×1.5, ±50% jitter). Default 1s.
	InitialInterval time.Duration
	// MaxInterval caps the wait between attempts (a Retry-After may ask
	// for longer). Default 5m.
	MaxInterval time.Duration
	// Timeout bounds each attempt, from dialling to the response headers
	// and the drained body. Default 10s.
	Timeout time.Duration
	// Logger receives the Sender's logs: attempts at debug, failed
	// deliveries and disabled endpoints at warn. Default: discard.
	Logger *slog.Logger
	// OnAttempt, when set, is called after every attempt, from the
	// goroutine delivering to that endpoint: it must be safe for concurrent
	// use (endpoints are served in parallel) and should return quickly.
	OnAttempt func(Attempt)
}

func (c Config) withDefaults() Config {
	c.MaxElapsed = cmp.Or(c.MaxElapsed, DefaultMaxElapsed)
	c.InitialInterval = cmp.Or(c.InitialInterval, DefaultInitialInterval)
	c.MaxInterval = cmp.Or(c.MaxInterval, DefaultMaxInterval)
	c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks c after defaults.
func (c Config) validate() error {
	if len(c.Endpoints) == 0 {
		return fmt.Errorf("%w: Config.Endpoints is empty: add at least one Endpoint", ErrInvalidConfig)
	}
	seen := make(map[string]int, len(c.Endpoints))
	for i, ep := range c.Endpoints {
		field := fmt.Sprintf("Config.Endpoints[%d]", i)
		if err := validateURL(ep.URL); err != nil {
			return fmt.Errorf("%w: %s.URL: %w", ErrInvalidConfig, field, err)
		}
		if j, dup := seen[ep.URL]; dup {
			return fmt.Errorf("%w: %s.URL duplicates Config.Endpoints[%d].URL: list each endpoint once", ErrInvalidConfig, field, j)
		}
		seen[ep.URL] = i
		if len(ep.Secrets) == 0 {
			return fmt.Errorf("%w: %s.Secrets is empty: add a secret from ParseSecret or NewSecret", ErrInvalidConfig, field)
		}
		for k, s := range ep.Secrets {
			if s.IsZero() {
				return fmt.Errorf("%w: %s.Secrets[%d] is the zero Secret: use ParseSecret or NewSecret", ErrInvalidConfig, field, k)
			}
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"MaxElapsed", c.MaxElapsed}, {"InitialInterval", c.InitialInterval},
		{"MaxInterval", c.MaxInterval}, {"Timeout", c.Timeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("%w: Config.%s must not be negative, got %s", ErrInvalidConfig, d.name, d.v)
		}
	}
	if c.InitialInterval > c.MaxInterval {
		return fmt.Errorf("%w: Config.InitialInterval (%s) must not exceed Config.MaxInterval (%s)", ErrInvalidConfig, c.InitialInterval, c.MaxInterval)
	}
	return nil
}

// validateURL accepts absolute http and https URLs with a host.
func validateURL(raw string) error {
	if raw == "" {
		return errors.New("empty: set the receiver's http or https URL")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q not allowed: use http or https", u.Scheme)
	}
	if u.Hostname() == "" {
		return fmt.Errorf("%s has no host", u.Redacted())
	}
	return nil
}

// Event is one webhook message.
type Event struct {
	// ID is the webhook-id: the receiver's idempotency key, the same on
	// every attempt. Default "msg_" and 26 random characters. It must be
	// printable ASCII without spaces or full stops.
	ID string
	// Type is the full-stop delimited event type, such as
	// "approval.requested". Required.
	Type string
	// Timestamp is when the event occurred (not when it is delivered).
	// Default: the time Deliver is called.
	Timestamp time.Time
	// Data is the event's data, marshalled with encoding/json.
	Data any
}

// payload is the body of every request: the specification's recommended
// shape.
type payload struct {
	Type      string `json:"type"`
	Timestamp string `json:"timestamp"`
	Data      any    `json:"data"`
}

// validateID rejects ids that would break the signed content
// "id.timestamp.body" or the header.
func validateID(id string) error {
	if len(id) > 256 {
		return fmt.Errorf("ID is %d bytes long, at most 256 are allowed", len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' || c == '.' {
			return fmt.Errorf("ID %q has %q at byte %d: use printable ASCII without spaces or full stops", id, c, i)
		}
	}
	return nil
}

// encode validates ev, applies its defaults and returns its id and body.
func encode(ev Event) (string, []byte, error) {
	id := ev.ID
	if id == "" {
		id = "msg_" + rand.Text()
	}
	if err := validateID(id); err != nil {
		return id, nil, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	if strings.TrimSpace(ev.Type) == "" {
		return id, nil, fmt.Errorf("%w: Type is empty: name the event, such as %q", ErrInvalidEvent, "approval.requested")
	}
	ts := ev.Timestamp
	if ts.IsZero() {
		ts = time.Now()
	}
	body, err := json.Marshal(payload{Type: ev.Type, Timestamp: ts.UTC().Format(time.RFC3339Nano), Data: ev.Data})
	if err != nil {
		return id, nil, fmt.Errorf("%w: Data does not marshal to JSON: %w", ErrInvalidEvent, err)
	}
	return id, body, nil
}

// Attempt is one request to one endpoint, as given to Config.OnAttempt.
type Attempt struct {
	// URL is the endpoint's configured URL.
	URL string
	// EventID is the webhook-id sent.
	EventID string
	// Number counts the attempts of this delivery to this endpoint, from 1.
	Number int
	// Start is when the attempt began.
	Start time.Time
	// Duration is how long the attempt took.
	Duration time.Duration
	// StatusCode is the response's status, 0 when there was none.
	StatusCode int
	// Err is nil when the endpoint accepted the event, else why not: a
	// [*StatusError], a [*BlockedAddressError], a network or timeout
	// error.
	Err error
	// NextDelay is the wait before the next attempt, 0 when none follows.
	NextDelay time.Duration
}

// Result is the outcome of delivering one event to one endpoint.
type Result struct {
	// URL is the endpoint's configured URL.
	URL string
	// EventID is the webhook-id sent (the generated one when Event.ID was
	// empty).
	EventID string
	// Attempts is the number of requests made, 0 when none was.
	Attempts int
	// StatusCode is the last response's status, 0 when there was none.
	StatusCode int
	// Disabled reports that the endpoint is disabled: it answered 410 Gone
	// now or earlier.
	Disabled bool
	// Err is nil when the event was delivered. Otherwise it wraps the
	// cause, found with errors.Is or errors.As: [ErrInvalidEvent],
	// [ErrDisabled], [ErrExhausted] (with the last attempt's error), a
	// [*StatusError], a [*BlockedAddressError], or the context's error.
	Err error
}

// endpoint is an Endpoint prepared for sending.
type endpoint struct {
	url      string
	redacted string // for logs and errors
	secrets  []Secret
}

// Sender delivers signed events to a fixed set of endpoints. It is safe for
// concurrent use. The only state it keeps is the set of endpoints disabled
// by 410 Gone, for its own lifetime.
type Sender struct {
	endpoints       []endpoint
	client          *http.Client
	ownClient       bool
	maxElapsed      time.Duration
	initialInterval time.Duration
	maxInterval     time.Duration
	timeout         time.Duration
	logger          *slog.Logger
	onAttempt       func(Attempt)

	mu       sync.Mutex
	disabled map[string]bool
}

// New returns a Sender configured by cfg. Errors wrap [ErrInvalidConfig] and
// name the field.
func New(cfg Config) (*Sender, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &Sender{
		maxElapsed:      cfg.MaxElapsed,
		initialInterval: cfg.InitialInterval,
		maxInterval:     cfg.MaxInterval,
		timeout:         cfg.Timeout,
		logger:          cfg.Logger,
		onAttempt:       cfg.OnAttempt,
		disabled:        map[string]bool{},
	}
	for _, ep := range cfg.Endpoints {
		u, _ := url.Parse(ep.URL) // validated
		s.endpoints = append(s.endpoints, endpoint{url: ep.URL, redacted: u.Redacted(), secrets: append([]Secret(nil), ep.Secrets...)})
	}
	if cfg.Client != nil {
		c := *cfg.Client
		c.CheckRedirect = noRedirect
		s.client = &c
	} else {
		s.client = &http.Client{Transport: newTransport(cfg.AllowPrivate), CheckRedirect: noRedirect}
		s.ownClient = true
	}
	return s, nil
}

// noRedirect makes the client return a 3xx response instead of following it.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// newTransport is the package-built client's transport: no proxy (a proxy
// would make the SSRF guard check the proxy's address instead of the
// target's), guarded dialer unless allowPrivate.
func newTransport(allowPrivate bool) *http.Transport {
	return &http.Transport{
		Proxy:                 nil,
		DialContext:           newDialer(allowPrivate).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// CloseIdleConnections closes the idle keep-alive connections of the client
// the Sender built; a Client given in Config is left alone. The Sender stays
// usable. Call it when done with the Sender so that no connection
// goroutine outlives it.
func (s *Sender) CloseIdleConnections() {
	if s.ownClient {
		s.client.CloseIdleConnections()
	}
}

// Disabled reports whether the endpoint with this configured URL answered
// 410 Gone to this Sender, which then skips it.
func (s *Sender) Disabled(url string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disabled[url]
}

func (s *Sender) disable(url string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disabled[url] = true
}

// Deliver posts ev to every endpoint in parallel, retrying each as the
// package documentation describes, and returns when every endpoint has
// succeeded or failed: one Result per configured endpoint, in Config order.
// Disabled endpoints are skipped (their Result wraps [ErrDisabled]). The
// body and webhook-id are the same on every attempt; webhook-timestamp and
// the signatures are fresh each time. Canceling ctx stops retries and
// in-flight requests. No goroutine started by Deliver outlives it.
func (s *Sender) Deliver(ctx context.Context, ev Event) []Result {
	results := make([]Result, len(s.endpoints))
	id, body, err := encode(ev)
	if err != nil {
		for i, ep := range s.endpoints {
			results[i] = Result{URL: ep.url, EventID: id, Err: fmt.Errorf("webhook: delivering %s to %s: %w", id, ep.redacted, err)}
		}
		return results
	}
	var wg sync.WaitGroup
	for i := range s.endpoints {
		wg.Go(func() { results[i] = s.deliverTo(ctx, &s.endpoints[i], id, body) })
	}
	wg.Wait()
	return results
}

// URLs returns the configured endpoints' URLs, in Config order: each names
// one endpoint for [Sender.DeliverTo].
func (s *Sender) URLs() []string {
	out := make([]string, len(s.endpoints))
	for i, ep := range s.endpoints {
		out[i] = ep.url
	}
	return out
}

// DeliverTo posts ev to the one endpoint configured with url, retrying as
// Deliver does, and returns its Result: so that a caller can give each
// endpoint a queue of its own, and one slow endpoint hold back no other.
// A url that is not configured gives a Result wrapping
// [ErrUnknownEndpoint]; nothing is sent.
func (s *Sender) DeliverTo(ctx context.Context, url string, ev Event) Result {
	for i := range s.endpoints {
		if ep := &s.endpoints[i]; ep.url == url {
			id, body, err := encode(ev)
			if err != nil {
				return Result{URL: url, EventID: id, Err: fmt.Errorf("webhook: delivering %s to %s: %w", id, ep.redacted, err)}
			}
			return s.deliverTo(ctx, ep, id, body)
		}
	}
	return Result{URL: url, EventID: ev.ID, Err: fmt.Errorf("%w: %q is not one of the sender's endpoints", ErrUnknownEndpoint, url)}
}

// outcome is what one attempt came to.
type outcome struct {
	status     int
	err        error
	retryAfter time.Duration
	permanent  bool // do not retry
	gone       bool // 410: disable the endpoint
}

// deliverTo delivers one event to one endpoint, retrying.
func (s *Sender) deliverTo(ctx context.Context, ep *endpoint, id string, body []byte) Result {
	res := Result{URL: ep.url, EventID: id}
	log := s.logger.With(slog.String("endpoint", ep.redacted), slog.String("event_id", id))
	wrap := func(err error) error { return fmt.Errorf("webhook: delivering %s to %s: %w", id, ep.redacted, err) }
	if s.Disabled(ep.url) {
		res.Disabled = true
		res.Err = wrap(fmt.Errorf("%w (it answered 410 Gone earlier)", ErrDisabled))
		return res
	}

	// The attempt just made waits in pending until the delay after it is
	// known (the schedule reports it), or the retrying ends.
	var pending *Attempt
	flush := func(next time.Duration) {
		if pending == nil {
			return
		}
		a := *pending
		pending = nil
		if next != backoff.Stop {
			a.NextDelay = next
		}
		attrs := []slog.Attr{slog.Int("attempt", a.Number), slog.Int("status", a.StatusCode),
			slog.Duration("duration", a.Duration), slog.Duration("next_delay", a.NextDelay)}
		if a.Err != nil {
			attrs = append(attrs, slog.String("error", a.Err.Error()))
		}
		log.LogAttrs(ctx, slog.LevelDebug, "webhook attempt", attrs...)
		if s.onAttempt != nil {
			s.onAttempt(a)
		}
	}
	sched := newSchedule(s.initialInterval, s.maxInterval, s.maxElapsed, flush)

	start := time.Now()
	var (
		lastErr   error
		permanent bool
	)
	op := func() error {
		flush(0)
		if s.Disabled(ep.url) { // a concurrent delivery got 410
			res.Disabled = true
			permanent = true
			lastErr = fmt.Errorf("%w (it answered 410 Gone to another delivery)", ErrDisabled)
			return backoff.Permanent(lastErr)
		}
		res.Attempts++
		a := Attempt{URL: ep.url, EventID: id, Number: res.Attempts, Start: time.Now()}
		out := s.attempt(ctx, ep, id, body)
		a.Duration, a.StatusCode, a.Err = time.Since(a.Start), out.status, out.err
		pending = &a
		res.StatusCode = out.status
		lastErr = out.err
		switch {
		case out.err == nil:
			return nil
		case out.gone:
			s.disable(ep.url)
			res.Disabled = true
			lastErr = fmt.Errorf("%w: %w", ErrDisabled, out.err)
			log.LogAttrs(ctx, slog.LevelWarn, "webhook endpoint disabled", slog.Int("status", out.status))
			permanent = true
			return backoff.Permanent(lastErr)
		case out.permanent:
			permanent = true
			return backoff.Permanent(out.err)
		}
		sched.floor = out.retryAfter
		return out.err
	}
	err := backoff.Retry(op, backoff.WithContext(sched, ctx))
	flush(0)

	switch {
	case err == nil:
		log.LogAttrs(ctx, slog.LevelDebug, "webhook delivered", slog.Int("attempts", res.Attempts))
		return res
	case permanent:
		res.Err = wrap(lastErr)
	case ctx.Err() != nil:
		res.Err = wrap(fmt.Errorf("stopped after %d attempts: %w (last attempt: %w)", res.Attempts, context.Cause(ctx), lastErr))
	default:
		res.Err = wrap(fmt.Errorf("%w after %d attempts in %s: %w", ErrExhausted, res.Attempts, time.Since(start).Round(time.Millisecond), lastErr))
	}
	log.LogAttrs(ctx, slog.LevelWarn, "webhook delivery failed", slog.Int("attempts", res.Attempts), slog.String("error", res.Err.Error()))
	return res
}

// attempt makes one signed request and classifies its outcome.
func (s *Sender) attempt(ctx context.Context, ep *endpoint, id string, body []byte) outcome {
	actx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, ep.url, bytes.NewReader(body))
	if err != nil {
		return outcome{err: fmt.Errorf("building the request: %w", err), permanent: true}
	}
	ts := time.Now()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set(HeaderID, id)
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	req.Header.Set(HeaderSignature, Sign(ep.secrets, id, ts, body))

	resp, err := s.client.Do(req)
	if err != nil {
		var blocked *BlockedAddressError
		return outcome{err: err, permanent: errors.As(err, &blocked)}
	}
	_, drainErr := io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
	_ = resp.Body.Close()

	code := resp.StatusCode
	switch {
	case code >= 200 && code < 300:
		if drainErr != nil { // accepted: the body is informational
			s.logger.LogAttrs(ctx, slog.LevelDebug, "webhook response body unreadable",
				slog.String("endpoint", ep.redacted), slog.String("event_id", id), slog.String("error", drainErr.Error()))
		}
		return outcome{status: code}
	case code == http.StatusGone:
		return outcome{status: code, err: &StatusError{StatusCode: code}, gone: true, permanent: true}
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		wait := retryAfter(resp.Header, time.Now())
		return outcome{status: code, err: &StatusError{StatusCode: code, RetryAfter: wait}, retryAfter: wait}
	case code >= 500:
		return outcome{status: code, err: &StatusError{StatusCode: code}}
	case code >= 300 && code < 400:
		return outcome{status: code, err: &StatusError{StatusCode: code, Location: resp.Header.Get("Location")}, permanent: true}
	default:
		return outcome{status: code, err: &StatusError{StatusCode: code}, permanent: true}
	}
}
