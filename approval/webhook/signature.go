package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The headers of a Standard Webhooks request. [http.Header] methods accept
// them in any case.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
)

// DefaultTolerance is how far webhook-timestamp may be from the receiver's
// clock, in either direction, when [Verify] is given a tolerance of zero.
const DefaultTolerance = 5 * time.Minute

// signatureVersion identifies symmetric (HMAC-SHA256) signatures.
const signatureVersion = "v1"

// Sign returns the webhook-signature header value for a message: for each
// secret, in order, "v1,<base64 of HMAC-SHA256(key, id.unix.body)>" where
// unix is ts in unix seconds, joined by single spaces. Sign with the new and
// the old secret during a rotation: receivers accept either. Zero secrets
// are skipped; with none left the result is "".
func Sign(secrets []Secret, id string, ts time.Time, body []byte) string {
	unix := strconv.FormatInt(ts.Unix(), 10)
	var b strings.Builder
	for _, s := range secrets {
		if s.IsZero() {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(signatureVersion)
		b.WriteByte(',')
		b.WriteString(base64.StdEncoding.EncodeToString(mac(s, id, unix, body)))
	}
	return b.String()
}

// mac is HMAC-SHA256 under s of the signed content "id.timestamp.body".
func mac(s Secret, id, timestamp string, body []byte) []byte {
	h := hmac.New(sha256.New, []byte(s.key))
	h.Write([]byte(id))
	h.Write([]byte{'.'})
	h.Write([]byte(timestamp))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}

// Verify checks a received webhook: header must carry webhook-id,
// webhook-timestamp and webhook-signature, the timestamp must be within
// tolerance of the local clock (DefaultTolerance when tolerance is zero or
// negative), and at least one v1 signature must match one of secrets
// (compared in constant time with [hmac.Equal]). Signatures of other
// versions, such as v1a, are ignored. body must be the raw request body,
// byte for byte: do not decode and re-encode the JSON before verifying.
//
// The error is nil when the webhook is authentic, else it wraps
// [ErrMissingHeaders], [ErrTimestamp] or [ErrBadSignature]. After a
// successful Verify, use webhook-id as the idempotency key: a delivery can
// arrive more than once.
func Verify(secrets []Secret, header http.Header, body []byte, tolerance time.Duration) error {
	id := header.Get(HeaderID)
	timestamp := header.Get(HeaderTimestamp)
	signatures := strings.Join(header.Values(HeaderSignature), " ")
	if err := allPresent(HeaderID, id, HeaderTimestamp, timestamp, HeaderSignature, signatures); err != nil {
		return err
	}
	if err := checkTimestamp(timestamp, tolerance); err != nil {
		return err
	}
	var want [][]byte
	for _, s := range secrets {
		if !s.IsZero() {
			want = append(want, mac(s, id, timestamp, body))
		}
	}
	if len(want) == 0 {
		return fmt.Errorf("%w: no secret to verify with", ErrBadSignature)
	}
	for _, field := range strings.Fields(signatures) {
		if got, ok := signatureOf(field); ok && slices.ContainsFunc(want, func(w []byte) bool { return hmac.Equal(got, w) }) {
			return nil
		}
	}
	return fmt.Errorf("%w: none of the %s signatures matches a known secret", ErrBadSignature, signatureVersion)
}

// allPresent names every header, of the name and value pairs, that is
// missing or blank.
func allPresent(pairs ...string) error {
	var missing []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if strings.TrimSpace(pairs[i+1]) == "" {
			missing = append(missing, pairs[i])
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrMissingHeaders, strings.Join(missing, ", "))
	}
	return nil
}

// checkTimestamp accepts integer unix seconds within tolerance of the
// local clock (DefaultTolerance when tolerance is not positive).
func checkTimestamp(timestamp string, tolerance time.Duration) error {
	unix, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not integer unix seconds", ErrTimestamp, HeaderTimestamp, timestamp)
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	if age := time.Since(time.Unix(unix, 0)); age > tolerance || age < -tolerance {
		return fmt.Errorf("%w: %s %d is %s from now, beyond the tolerance of %s", ErrTimestamp, HeaderTimestamp, unix, age.Abs().Round(time.Second), tolerance)
	}
	return nil
}

// signatureOf decodes one "v1,<base64>" field; false for another version
// or a field that does not decode.
func signatureOf(field string) ([]byte, bool) {
	version, encoded, ok := strings.Cut(field, ",")
	if !ok || version != signatureVersion {
		return nil, false
	}
	got, err := base64.StdEncoding.DecodeString(encoded)
	return got, err == nil
}
