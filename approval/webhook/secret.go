package webhook

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"strings"
)

// SecretPrefix starts the serialized form of every [Secret].
const SecretPrefix = "whsec_"

// Lengths of a secret's key, in bytes. The specification asks for random
// keys of 24 to 64 bytes (192 to 512 bits).
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
	// newSecretBytes is the length of the keys NewSecret makes.
	newSecretBytes = 32
)

// Secret is an endpoint's HMAC-SHA256 signing key. Make one with
// [ParseSecret] or [NewSecret]; the zero Secret is no key, ignored by [Sign]
// and [Verify] and refused by [New]. A Secret is immutable, comparable with
// ==, and safe to share between goroutines.
type Secret struct {
	key string
}

// ParseSecret parses the serialized form "whsec_<base64 of the key>". The key
// is standard base64 (RFC 4648 §4, padding optional) and must decode to
// MinSecretBytes to MaxSecretBytes bytes. Errors wrap [ErrInvalidSecret],
// name the rule that failed and never echo the secret.
func ParseSecret(s string) (Secret, error) {
	enc, ok := strings.CutPrefix(s, SecretPrefix)
	if !ok {
		return Secret{}, fmt.Errorf("%w: must start with %q", ErrInvalidSecret, SecretPrefix)
	}
	key, err := base64.StdEncoding.DecodeString(enc)
	if err != nil && !strings.Contains(enc, "=") {
		key, err = base64.RawStdEncoding.DecodeString(enc)
	}
	if err != nil {
		return Secret{}, fmt.Errorf("%w: the part after %q must be standard base64: %w", ErrInvalidSecret, SecretPrefix, err)
	}
	if len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return Secret{}, fmt.Errorf("%w: the key must be %d to %d bytes, got %d", ErrInvalidSecret, MinSecretBytes, MaxSecretBytes, len(key))
	}
	return Secret{key: string(key)}, nil
}

// NewSecret returns a fresh random 32-byte secret from crypto/rand. Give its
// [Secret.String] form to the receiver.
func NewSecret() Secret {
	key := make([]byte, newSecretBytes)
	_, _ = rand.Read(key) // never fails (crypto/rand, Go 1.24+)
	return Secret{key: string(key)}
}

// String returns the serialized form "whsec_<base64>", which reveals the key.
// The zero Secret gives "".
func (s Secret) String() string {
	if s.key == "" {
		return ""
	}
	return SecretPrefix + base64.StdEncoding.EncodeToString([]byte(s.key))
}

// LogValue keeps the key out of structured logs: slog records a Secret as
// "whsec_[redacted]".
func (s Secret) LogValue() slog.Value {
	return slog.StringValue(SecretPrefix + "[redacted]")
}

// IsZero reports whether s is the zero Secret (no key).
func (s Secret) IsZero() bool { return s.key == "" }
