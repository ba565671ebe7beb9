// Package webhook delivers signed webhooks to the approval dashboard, and
// verifies them on the receiving side, following the Standard Webhooks
// specification (https://www.standardwebhooks.com, version 1.0.0).
//
// # Signatures
//
// Every request carries three headers: webhook-id (the event's id, the
// receiver's idempotency key, the same on every retry), webhook-timestamp
// (unix seconds of the attempt) and webhook-signature: a space-separated
// list of "v1,<base64 HMAC-SHA256>" over "<id>.<timestamp>.<body>", one per
// secret of the endpoint, so that secrets can be rotated without downtime.
// Secrets are written "whsec_<base64>" ([ParseSecret], [NewSecret]).
// Receivers call [Verify], which compares in constant time and refuses stale
// timestamps.
//
// # Delivery
//
// A [Sender] posts each [Event] as the JSON object
// {"type": ..., "timestamp": ..., "data": ...} to every configured endpoint
// at once and retries with exponential backoff and jitter, bounded by
// Config.MaxElapsed:
//   - 2xx: delivered;
//   - 429, 5xx, timeouts and network errors: retried; a Retry-After header
//     on 429 or 503 (seconds or an HTTP date) delays the next attempt at
//     least that long;
//   - 410 Gone: the endpoint is disabled for the life of the Sender
//     ([Sender.Disabled]) and skipped by later deliveries;
//   - 3xx: a failure, never followed (update the URL instead), not retried;
//   - any other status: a permanent failure, not retried.
//
// # Server-side request forgery
//
// Endpoint URLs are configuration, but a dashboard URL that resolves to an
// internal address could be used to reach internal services. Unless
// Config.AllowPrivate is set, the Sender's own HTTP client refuses to connect
// to loopback, private, link-local, shared (CGNAT), unspecified, multicast
// and reserved addresses. The check runs on the address actually dialled,
// after DNS resolution, so a name that resolves to a public address at
// configuration time and to an internal one later (DNS rebinding) is still
// refused. Such a refusal is a [*BlockedAddressError] and is not retried.
package webhook
