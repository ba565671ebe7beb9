package httpapi

import (
	"crypto/rand"
	"fmt"
	"strings"

	"github.com/windlass-dev/windlass/internal/bearer"
	"github.com/windlass-dev/windlass/limits"
)

// APIKey is a key a client may present. The service keeps only the key's
// SHA-256.
type APIKey struct {
	// Name identifies the key in logs (api_key). Default: "key-" and the
	// first 8 characters of the hash.
	Name string
	// SHA256 is [HashAPIKey] of the key: 64 hex characters.
	SHA256 string
}

// NewAPIKey returns a new random API key.
func NewAPIKey() string { return "wlk_" + strings.ToLower(rand.Text()) }

// HashAPIKey returns the hex SHA-256 of a key, the form [APIKey] stores.
func HashAPIKey(key string) string { return bearer.Hash(key) }

// ParseAPIKey reads "name=<sha256 hex>" or a bare "<sha256 hex>", the form
// of the --api-keys flag and of the lines of an API key file.
func ParseAPIKey(s string) (APIKey, error) {
	s = strings.TrimSpace(s)
	k := APIKey{SHA256: s}
	if name, hash, ok := strings.Cut(s, "="); ok {
		k = APIKey{Name: strings.TrimSpace(name), SHA256: strings.TrimSpace(hash)}
		if k.Name == "" {
			return APIKey{}, fmt.Errorf("httpapi: API key %q: empty name before '='", s)
		}
	}
	if _, err := bearer.NewSet([]bearer.Entry{{SHA256: k.SHA256}}); err != nil {
		return APIKey{}, fmt.Errorf("httpapi: API key entry %q: want [name=]<sha256 of the key in hex> (windlass dispatcher apikey prints one), not the key itself", abbrev(s))
	}
	return k, nil
}

// abbrev shows the start of what may be a secret.
func abbrev(s string) string {
	if len(s) > 6 {
		return s[:6] + "…"
	}
	return s
}

// newKeySet checks the configured keys: valid hashes, unique names.
func newKeySet(keys []APIKey) (*bearer.Set, error) {
	seen := map[string]bool{}
	entries := make([]bearer.Entry, 0, len(keys))
	for i, k := range keys {
		hash := strings.ToLower(strings.TrimSpace(k.SHA256))
		name := k.Name
		if name == "" && len(hash) >= 8 {
			name = "key-" + hash[:8]
		}
		if err := limits.ValidateKey(name); err != nil {
			return nil, fmt.Errorf("httpapi: Config.APIKeys[%d]: name %q: it is the key calls are counted for by the fleet's limits: %w", i, name, err)
		}
		if seen[name] {
			return nil, fmt.Errorf("httpapi: Config.APIKeys[%d]: name %q appears twice", i, name)
		}
		seen[name] = true
		entries = append(entries, bearer.Entry{Name: name, SHA256: hash})
	}
	set, err := bearer.NewSet(entries)
	if err != nil {
		return nil, fmt.Errorf("httpapi: Config.APIKeys: %w", err)
	}
	return set, nil
}
