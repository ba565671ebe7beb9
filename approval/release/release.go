// Package release is how a gated call proves it was approved. The approval
// service signs a [Release] — the call id, the tool, the spec version and a
// hash of the exact arguments approved, an expiry and the approvers — with
// an Ed25519 private key; every worker holds the public keys and runs a
// gated call only when its release verifies against the call it is about to
// run: the worker recomputes the arguments hash itself and fails closed on
// any mismatch. A [Ledger] in Redis makes a release single-use: it binds the
// release to the one stream message that first presented it, so a redelivery
// of that message may run again (at-least-once) but a copy republished under
// another message id may not.
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
	"time"

	"github.com/windlass-dev/windlass"
)

// Header is the NATS header that carries a release on a released call.
const Header = "Windlass-Release"

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
}

// ArgumentsHash is the hex SHA-256 of the canonical JSON of args (object keys
// sorted, insignificant space removed, numbers as written). Empty or null
// arguments hash as {}.
func ArgumentsHash(args json.RawMessage) (string, error) {
	canon, err := Canonical(args)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// Canonical returns the canonical JSON of args used by [ArgumentsHash].
func Canonical(args json.RawMessage) ([]byte, error) {
	b := bytes.TrimSpace(args)
	if len(b) == 0 || string(b) == "null" {
		return []byte("{}"), nil
	}
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
// and the spec it serves: signature by a trusted key, same call id and tool,
// same spec version, an arguments hash recomputed from call.Arguments, and
// not expired at now. Any failure wraps [ErrInvalid] and says which check
// failed.
func (v *Verifier) Verify(header string, call windlass.ToolCall, specHash string, now time.Time) (Release, error) {
	var r Release
	if header == "" {
		return r, fmt.Errorf("%w: the call carries no release", ErrInvalid)
	}
	parts := strings.Split(header, ".")
	if len(parts) != 4 || parts[0] != "v1" {
		return r, fmt.Errorf("%w: malformed (want v1.<key id>.<payload>.<signature>)", ErrInvalid)
	}
	key, ok := v.keys[parts[1]]
	if !ok {
		return r, fmt.Errorf("%w: signed by unknown key %q", ErrInvalid, parts[1])
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || !ed25519.Verify(key, []byte(parts[0]+"."+parts[1]+"."+parts[2]), sig) {
		return r, fmt.Errorf("%w: bad signature", ErrInvalid)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || json.Unmarshal(payload, &r) != nil {
		return r, fmt.Errorf("%w: undecodable payload", ErrInvalid)
	}
	switch {
	case r.CallID != call.ID:
		return r, fmt.Errorf("%w: issued for call %q, not %q", ErrInvalid, r.CallID, call.ID)
	case r.Tool != call.Name:
		return r, fmt.Errorf("%w: issued for tool %q, not %q", ErrInvalid, r.Tool, call.Name)
	case r.SpecHash != "" && r.SpecHash != specHash:
		return r, fmt.Errorf("%w: issued for spec %s, the worker serves %s", ErrInvalid, r.SpecHash, specHash)
	case !now.Before(r.ExpiresAt):
		return r, fmt.Errorf("%w: expired at %s", ErrInvalid, r.ExpiresAt.Format(time.RFC3339))
	}
	got, err := ArgumentsHash(call.Arguments)
	if err != nil {
		return r, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if got != r.ArgsHash {
		return r, fmt.Errorf("%w: the arguments differ from the ones approved (hash %s, approved %s)", ErrInvalid, got, r.ArgsHash)
	}
	return r, nil
}
