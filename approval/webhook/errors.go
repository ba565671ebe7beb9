package webhook

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Errors callers branch on with [errors.Is].
var (
	// ErrInvalidSecret is returned by [ParseSecret] for a malformed secret;
	// the wrapping error names the rule that failed.
	ErrInvalidSecret = errors.New("webhook: invalid secret")
	// ErrInvalidConfig is returned by [New]; the wrapping error names the
	// field and the fix.
	ErrInvalidConfig = errors.New("webhook: invalid config")
	// ErrInvalidEvent is reported in every [Result] of a [Sender.Deliver]
	// whose event cannot be sent (bad id or type, data that does not
	// marshal to JSON). Nothing was sent.
	ErrInvalidEvent = errors.New("webhook: invalid event")
	// ErrUnknownEndpoint is reported by [Sender.DeliverTo] for a URL that
	// is not one of the Sender's endpoints.
	ErrUnknownEndpoint = errors.New("webhook: unknown endpoint")

	// ErrMissingHeaders is returned by [Verify] when webhook-id,
	// webhook-timestamp or webhook-signature is absent; the wrapping error
	// lists the missing ones.
	ErrMissingHeaders = errors.New("webhook: missing webhook headers")
	// ErrTimestamp is returned by [Verify] when webhook-timestamp is not
	// integer unix seconds or is outside the tolerance (a replay, or a
	// clock far off).
	ErrTimestamp = errors.New("webhook: timestamp not acceptable")
	// ErrBadSignature is returned by [Verify] when no v1 signature in
	// webhook-signature matches any of the secrets.
	ErrBadSignature = errors.New("webhook: no matching signature")

	// ErrDisabled is reported for an endpoint that answered 410 Gone: in
	// the [Result] of the delivery that got the 410 (wrapping its
	// [*StatusError]) and of every later delivery, which skips it.
	ErrDisabled = errors.New("webhook: endpoint disabled")
	// ErrExhausted is reported when an endpoint still failed once
	// Config.MaxElapsed was spent on it; the wrapping error carries the
	// last attempt's error.
	ErrExhausted = errors.New("webhook: retries exhausted")
	// ErrBlockedAddress matches every [*BlockedAddressError].
	ErrBlockedAddress = errors.New("webhook: address blocked")
)

// StatusError is an attempt that got a response other than 2xx. Find it with
// [errors.As] in [Result.Err] or [Attempt.Err].
type StatusError struct {
	// StatusCode is the response's status code.
	StatusCode int
	// RetryAfter is the delay the receiver asked for with Retry-After on a
	// 429 or 503, zero when absent.
	RetryAfter time.Duration
	// Location is the Location header of a 3xx response, which is never
	// followed.
	Location string
}

// Error implements error.
func (e *StatusError) Error() string {
	msg := fmt.Sprintf("endpoint answered %d %s", e.StatusCode, http.StatusText(e.StatusCode))
	switch {
	case e.StatusCode >= 300 && e.StatusCode < 400 && e.Location != "":
		msg += fmt.Sprintf(" (redirect to %q not followed: configure the final URL)", e.Location)
	case e.StatusCode >= 300 && e.StatusCode < 400:
		msg += " (redirects are not followed: configure the final URL)"
	case e.RetryAfter > 0:
		msg += fmt.Sprintf(" (Retry-After %s)", e.RetryAfter)
	}
	return msg
}

// BlockedAddressError is a connection the SSRF guard refused: the endpoint's
// host resolved to an address that is not publicly routable. It is never
// retried. Set Config.AllowPrivate to deliver to such addresses (local
// development).
type BlockedAddressError struct {
	// Address is the "ip:port" the dialer was about to connect to.
	Address string
	// Reason names the range, such as "loopback" or "private (RFC 1918)".
	Reason string
}

// Error implements error.
func (e *BlockedAddressError) Error() string {
	return fmt.Sprintf("webhook: refusing to connect to %s: %s address (set Config.AllowPrivate to allow)", e.Address, e.Reason)
}

// Is reports whether target is [ErrBlockedAddress].
func (e *BlockedAddressError) Is(target error) bool { return target == ErrBlockedAddress }
