// Package release is how a gated call proves it was approved. The approval
// service signs a [Release] — the call id, the tool, the spec version and a
// hash of the exact arguments approved, an expiry and the approvers — with
// an Ed25519 private key; every worker holds the public keys and runs a
// gated call only when its release verifies against the call it is about to
// run: the worker recomputes the arguments hash itself and fails closed on
// any mismatch. A [Ledger] (a JetStream key-value bucket, which survives
// Redis losing its data) makes a release single-use: it binds the release to
// the one stream message that first presented it, so a redelivery of that
// message may run again (at-least-once) but a copy republished under
// another message id may not. A message that fails is dropped by the
// worker, never answered (PROTOCOL.md, "Refusals"); [Reason] says why.
//
// # Key set-up
//
// Generate a key pair once (`windlass approval keygen`). Give the private
// key to the approval service only ($WINDLASS_RELEASE_KEY) and the public key
// to every worker ($WINDLASS_RELEASE_PUBLIC_KEYS, comma-separated, so that a
// rotation can list the old and the new key). A worker without public keys
// refuses every gated call.
package release

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/internal/argcheck"
)

// Header is the NATS header that carries a release on a released call.
const Header = "Windlass-Release"

// Reserve is the room a release takes in a released call's message beyond
// the call itself: its header (about 600 bytes with two approvers), its
// message id and the origin and trace headers. The dispatcher keeps it free
// when it checks a gated call against the server's max payload, and the
// approval service when a reviewer edits the arguments, so that every
// approved call can be released.
const Reserve = 2048

// ErrInvalid is wrapped by every verification failure.
var ErrInvalid = errors.New("release: invalid release")

// Release is what the approval service attests about one approved call.
type Release struct {
	// CallID is the approved call's id.
	CallID string `json:"call_id"`
	// Tool is the tool's name.
	Tool string `json:"tool"`
	// SpecHash is the spec version the call was approved for.
	SpecHash string `json:"spec_hash,omitempty"`
	// ArgsHash is [ArgumentsHash] of the arguments approved.
	ArgsHash string `json:"args_hash"`
	// ExpiresAt bounds when a worker may still start the call.
	ExpiresAt time.Time `json:"expires_at"`
	// ApprovedBy lists the reviewers who approved.
	ApprovedBy []string `json:"approved_by"`
	// Origin is the dispatcher instance the call's result goes to, as the
	// caller asked: the worker answers there, whatever a copy's
	// Windlass-Origin header says. Empty in releases of older services.
	Origin string `json:"origin,omitempty"`
}

// ArgumentsHash is the hex SHA-256 of the canonical JSON of args (object keys
// sorted, insignificant space removed, numbers as written). Empty or null
// arguments hash as {}.
func ArgumentsHash(args json.RawMessage) (string, error) { return ArgumentsHashWithin(args, 0) }

// ErrTooManyValues is the error of [ArgumentsHashWithin] for arguments of
// more JSON values than its bound.
var ErrTooManyValues = errors.New("release: the arguments hold more JSON values than their tool's bound; not hashed")

// ArgumentsHashWithin is [ArgumentsHash] of arguments of at most
// maxValues JSON values (no bound when it is not positive); more are
// [ErrTooManyValues], counted before anything else reads them. Making
// arguments canonical takes memory by the member or the value (sorting an
// object's members; decoding those with escapes): the bound keeps
// arguments no schema has bounded yet (a call's, as it arrives) from
// making the hash take more.
func ArgumentsHashWithin(args json.RawMessage, maxValues int) (string, error) {
	if maxValues > 0 {
		if _, over := argcheck.Values(args, maxValues); over {
			return "", ErrTooManyValues
		}
	}
	var sum [sha256.Size]byte
	if b := bytes.TrimSpace(args); len(b) > 0 && string(b) != "null" {
		buf := canonicalBuffers.Get().(*[]byte)
		defer canonicalBuffers.Put(buf)
		if out, ok := canonicalFast((*buf)[:0], b); ok {
			*buf = out
			sum = sha256.Sum256(out)
			return hex.EncodeToString(sum[:]), nil
		}
	}
	canon, err := Canonical(args)
	if err != nil {
		return "", err
	}
	sum = sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// canonicalBuffers holds the buffers ArgumentsHash writes canonical forms
// into: the form is hashed, never returned.
var canonicalBuffers = sync.Pool{New: func() any { return new([]byte) }}

// Canonical returns the canonical JSON of args used by [ArgumentsHash].
func Canonical(args json.RawMessage) ([]byte, error) {
	b := bytes.TrimSpace(args)
	if len(b) == 0 || string(b) == "null" {
		return []byte("{}"), nil
	}
	if out, ok := canonicalFast(make([]byte, 0, len(b)), b); ok {
		return out, nil
	}
	return canonicalSlow(b)
}

// canonicalSlow is [Canonical] through encoding/json: it decodes and
// re-encodes, which handles everything (escapes, duplicate keys) and says
// what is wrong with invalid JSON.
func canonicalSlow(b []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("release: arguments are not valid JSON: %w", err)
	}
	if dec.More() {
		return nil, errors.New("release: arguments hold more than one JSON value")
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("release: encode arguments: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// KeyID names a public key: the first 8 bytes of its SHA-256, in hex.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// GenerateKey returns a new key pair, encoded as [ParsePrivateKey] and
// [ParsePublicKey] read them.
func GenerateKey() (private, public string, err error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", "", err
	}
	return "ed25519:" + base64.StdEncoding.EncodeToString(priv.Seed()), "ed25519:" + base64.StdEncoding.EncodeToString(pub), nil
}

// ParsePrivateKey reads "ed25519:<base64 32-byte seed>".
func ParsePrivateKey(s string) (ed25519.PrivateKey, error) {
	b, err := decodeKey(s, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("release: private key: %w", err)
	}
	return ed25519.NewKeyFromSeed(b), nil
}

// ParsePublicKey reads "ed25519:<base64 32-byte public key>".
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := decodeKey(s, ed25519.PublicKeySize)
	if err != nil {
		return nil, fmt.Errorf("release: public key: %w", err)
	}
	return ed25519.PublicKey(b), nil
}

func decodeKey(s string, size int) ([]byte, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "ed25519:")
	if !ok {
		return nil, errors.New(`must start with "ed25519:" followed by base64`)
	}
	b, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	if len(b) != size {
		return nil, fmt.Errorf("must be %d bytes, got %d", size, len(b))
	}
	return b, nil
}

// Signer signs releases with the approval service's private key.
type Signer struct {
	key   ed25519.PrivateKey
	keyID string
}

// NewSigner returns a signer for key.
func NewSigner(key ed25519.PrivateKey) *Signer {
	return &Signer{key: key, keyID: KeyID(key.Public().(ed25519.PublicKey))}
}

// PublicKey returns the signer's public key in the form ParsePublicKey reads.
func (s *Signer) PublicKey() string {
	return "ed25519:" + base64.StdEncoding.EncodeToString(s.key.Public().(ed25519.PublicKey))
}

// Sign encodes r as a header value: "v1.<key id>.<payload>.<signature>",
// payload and signature in unpadded base64url.
func (s *Signer) Sign(r Release) (string, error) {
	payload, err := json.Marshal(r)
	if err != nil {
		return "", fmt.Errorf("release: encode: %w", err)
	}
	p := base64.RawURLEncoding.EncodeToString(payload)
	signed := "v1." + s.keyID + "." + p
	sig := ed25519.Sign(s.key, []byte(signed))
	return signed + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// MessageID is the Nats-Msg-Id of the release of callID: "release:" and
// 32 hex characters derived from the signer's private key (the SHA-256 of
// an Ed25519 signature, which is deterministic, of the call id). The same
// call always gets the same id, so a release published twice (a service
// that crashed between publishing and recording it) is stored once; and
// nobody without the key can predict it, so a message published ahead of
// the release under its id cannot make the stream drop the real one as a
// duplicate.
func (s *Signer) MessageID(callID string) string {
	sum := sha256.Sum256(ed25519.Sign(s.key, []byte("windlass-release-message-id:"+callID)))
	return "release:" + hex.EncodeToString(sum[:16])
}

// Verifier checks releases against the public keys it knows. Safe for
// concurrent use.
type Verifier struct {
	keys map[string]ed25519.PublicKey
}

// NewVerifier returns a verifier that trusts the given public keys.
func NewVerifier(keys ...ed25519.PublicKey) *Verifier {
	v := &Verifier{keys: make(map[string]ed25519.PublicKey, len(keys))}
	for _, k := range keys {
		v.keys[KeyID(k)] = k
	}
	return v
}

// Verify checks a release header against the call a worker is about to run
// and the spec it serves: [Verifier.Authenticate], then the same spec
// version and not expired at now. Any failure wraps [ErrInvalid] and says
// which check failed.
func (v *Verifier) Verify(header string, call windlass.ToolCall, specHash string, now time.Time) (Release, error) {
	r, err := v.Authenticate(header, call)
	if err != nil {
		return r, err
	}
	switch {
	case r.SpecHash != "" && r.SpecHash != specHash:
		return r, invalid(ReasonSpecChanged, "issued for spec %s, the worker serves %s", r.SpecHash, specHash)
	case !now.Before(r.ExpiresAt):
		return r, invalid(ReasonExpired, "expired at %s", r.ExpiresAt.Format(time.RFC3339))
	}
	return r, nil
}

// Authenticate checks that a release header is the approval service's
// release of this very call: signed by a trusted key, for the same call id
// and tool, and for the arguments the call carries (their hash recomputed
// from call.Arguments). A message that passes was released by the
// approval service, whoever published it; whether it may still run (its
// expiry, the spec version, single use) is for the worker to decide next.
// Any failure is an *[InvalidError] wrapping [ErrInvalid].
func (v *Verifier) Authenticate(header string, call windlass.ToolCall) (Release, error) {
	return v.AuthenticateWith(header, call, func() (json.RawMessage, error) { return call.Arguments, nil })
}

// AuthenticateWith is [Verifier.Authenticate] for a call whose arguments
// are not in its message (they travel by reference): args is asked for
// them only once the release is proven the approval service's for this
// call, so a forged message costs no fetch. An error of args is returned
// as it is, not as an *InvalidError: the release is genuine, and its
// arguments could not be had. It hashes arguments of any size; a worker
// uses [Verifier.AuthenticateWithin] with its tool's bound.
func (v *Verifier) AuthenticateWith(header string, call windlass.ToolCall, args func() (json.RawMessage, error)) (Release, error) {
	return v.AuthenticateWithin(header, call, func(Release) int { return 0 }, args)
}

// AuthenticateWithin is [Verifier.AuthenticateWith] for arguments of at
// most maxValues(r) JSON values, r the genuine release (no bound when it
// is not positive): the bound of the tool's spec the release was signed
// for ([windlass.Spec.ArgumentValueLimit]), which the approval service
// held, and its reviewer edited, the arguments within. More are not the
// approved ones and are refused [ReasonArgsMismatch] unhashed. A genuine
// release copied onto a message of other arguments would otherwise make
// the worker hash whatever that message holds (sorting a million members
// takes hundreds of MiB) before it finds they differ. (A worker knows
// only its own spec's bound: for a release of another spec it gives the
// larger of its own and the default.)
func (v *Verifier) AuthenticateWithin(header string, call windlass.ToolCall, maxValues func(Release) int, args func() (json.RawMessage, error)) (Release, error) {
	var r Release
	if header == "" {
		return r, invalid(ReasonNoRelease, "the call carries no release")
	}
	if len(v.keys) == 0 {
		return r, invalid(ReasonNoKeys, "this worker has no release keys configured")
	}
	parts := strings.Split(header, ".")
	if len(parts) != 4 || parts[0] != "v1" {
		return r, invalid(ReasonMalformed, "malformed (want v1.<key id>.<payload>.<signature>)")
	}
	key, ok := v.keys[parts[1]]
	if !ok {
		return r, invalid(ReasonUnknownKey, "signed by unknown key %q", parts[1])
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || !ed25519.Verify(key, []byte(parts[0]+"."+parts[1]+"."+parts[2]), sig) {
		return r, invalid(ReasonBadSignature, "bad signature")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || json.Unmarshal(payload, &r) != nil {
		return r, invalid(ReasonMalformed, "undecodable payload")
	}
	switch {
	case r.ExpiresAt.IsZero():
		return r, invalid(ReasonMalformed, "the release has no expiry")
	case r.CallID != call.ID:
		return r, invalid(ReasonOtherCall, "issued for call %q, not %q", r.CallID, call.ID)
	case r.Tool != call.Name:
		return r, invalid(ReasonOtherCall, "issued for tool %q, not %q", r.Tool, call.Name)
	}
	raw, err := args()
	if err != nil {
		return r, err
	}
	bound := maxValues(r)
	got, err := ArgumentsHashWithin(raw, bound)
	if errors.Is(err, ErrTooManyValues) {
		return r, invalid(ReasonArgsMismatch, "the arguments hold more than %d JSON values, the bound of the tool's spec the release was signed for: not the ones approved", bound)
	}
	if err != nil {
		return r, invalid(ReasonArgsMismatch, "%v", err)
	}
	if got != r.ArgsHash {
		return r, invalid(ReasonArgsMismatch, "the arguments differ from the ones approved (hash %s, approved %s)", got, r.ArgsHash)
	}
	return r, nil
}

// Reason names why a release was refused: the label of the worker's
// refusals metric and the reason of its refusal records.
type Reason string

// The reasons a release is refused.
const (
	// ReasonNoRelease: the call carries no release.
	ReasonNoRelease Reason = "no_release"
	// ReasonNoKeys: the worker trusts no key, so it verifies nothing.
	ReasonNoKeys Reason = "no_keys"
	// ReasonMalformed: the release, or the call message, cannot be read.
	ReasonMalformed Reason = "malformed"
	// ReasonUnknownKey: signed by a key the worker does not trust.
	ReasonUnknownKey Reason = "unknown_key"
	// ReasonBadSignature: the signature does not verify.
	ReasonBadSignature Reason = "bad_signature"
	// ReasonOtherCall: a release of another call (or tool) copied here.
	ReasonOtherCall Reason = "other_call"
	// ReasonArgsMismatch: the arguments are not the ones approved.
	ReasonArgsMismatch Reason = "args_mismatch"
	// ReasonReused: another message already used the release.
	ReasonReused Reason = "reused"
	// ReasonAnswered: the call already has its result (a copy of a
	// released call replayed after the ledger lost its entry).
	ReasonAnswered Reason = "already_answered"
	// ReasonSpecChanged: issued for another spec version ([Verifier.Verify]).
	ReasonSpecChanged Reason = "spec_changed"
	// ReasonExpired: past its expiry ([Verifier.Verify]).
	ReasonExpired Reason = "expired"
)

// InvalidError is a refused release: why, in a word and in a sentence. It
// wraps [ErrInvalid].
type InvalidError struct {
	// Reason classifies the refusal.
	Reason Reason
	// Detail says what was wrong.
	Detail string
}

// Error implements error.
func (e *InvalidError) Error() string { return ErrInvalid.Error() + ": " + e.Detail }

// Unwrap returns [ErrInvalid].
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Is reports whether target is an *InvalidError with the same reason, so
// errors.Is(err, release.ErrReused) works.
func (e *InvalidError) Is(target error) bool {
	t, ok := target.(*InvalidError)
	return ok && t.Reason == e.Reason
}

// ReasonOf is the reason of a refusal error, or "" when err is not one.
func ReasonOf(err error) Reason {
	var ie *InvalidError
	if errors.As(err, &ie) {
		return ie.Reason
	}
	return ""
}

func invalid(reason Reason, format string, args ...any) error {
	return &InvalidError{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}
