package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// GenerateKey returns a new private key.
func GenerateKey() (ed25519.PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("receipt: generate key: %w", err)
	}
	return priv, nil
}

// ParsePrivateKey reads a worker's private key from the contents of a key
// file, in any of these forms:
//   - PEM, "PRIVATE KEY" (PKCS #8), as `openssl genpkey -algorithm ed25519`
//     writes it;
//   - the raw 32-byte seed;
//   - "ed25519:" and the standard base64 of the 32-byte seed, as
//     `windlass approval keygen` prints private keys.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	if block, _ := pem.Decode(data); block != nil {
		if block.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("receipt: key file: PEM block %q, want \"PRIVATE KEY\" (PKCS #8)", block.Type)
		}
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("receipt: key file: %w", err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("receipt: key file: a %T, want an Ed25519 key", k)
		}
		return priv, nil
	}
	if len(data) == ed25519.SeedSize {
		return ed25519.NewKeyFromSeed(data), nil
	}
	text := string(bytes.TrimSpace(data))
	if rest, ok := strings.CutPrefix(text, "ed25519:"); ok {
		seed, err := base64.StdEncoding.DecodeString(rest)
		if err != nil || len(seed) != ed25519.SeedSize {
			return nil, fmt.Errorf("receipt: key file: \"ed25519:\" must be followed by the base64 of a %d-byte seed", ed25519.SeedSize)
		}
		return ed25519.NewKeyFromSeed(seed), nil
	}
	return nil, errors.New("receipt: key file: want a PEM PKCS #8 Ed25519 key, a raw 32-byte seed, or ed25519:<base64 seed>")
}
