package approval

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/windlass-dev/windlass/internal/bearer"
)

// Reviewer is a person allowed to decide on held calls. The service keeps
// only the SHA-256 of the reviewer's bearer token.
type Reviewer struct {
	// Name identifies the reviewer in decisions and the audit log.
	Name string
	// TokenSHA256 is [HashToken] of the reviewer's bearer token, in hex.
	TokenSHA256 string
}

// NewToken returns a new random bearer token.
func NewToken() string { return "wlr_" + strings.ToLower(rand.Text()) }

// HashToken returns the hex SHA-256 of a token, the form Reviewer stores.
func HashToken(token string) string { return bearer.Hash(token) }

// ParseReviewer reads "name=<sha256 hex>", the form of --reviewer flags.
func ParseReviewer(s string) (Reviewer, error) {
	name, hash, ok := strings.Cut(s, "=")
	if !ok {
		return Reviewer{}, fmt.Errorf("approval: reviewer %q: want name=<sha256 of the token in hex>", s)
	}
	return Reviewer{Name: strings.TrimSpace(name), TokenSHA256: strings.TrimSpace(hash)}, nil
}

type authenticator struct {
	tokens *bearer.Set
}

func newAuthenticator(reviewers []Reviewer) (*authenticator, error) {
	seen := map[string]bool{}
	entries := make([]bearer.Entry, 0, len(reviewers))
	for i, r := range reviewers {
		h, err := hex.DecodeString(r.TokenSHA256)
		switch {
		case r.Name == "" || strings.ContainsAny(r.Name, ", \t\n"):
			return nil, fmt.Errorf("approval: Config.Reviewers[%d].Name %q must be non-empty without commas or spaces", i, r.Name)
		case err != nil || len(h) != sha256.Size:
			return nil, fmt.Errorf("approval: Config.Reviewers[%d] (%s).TokenSHA256 must be 64 hex characters (approval.HashToken of the token)", i, r.Name)
		case seen[r.Name]:
			return nil, fmt.Errorf("approval: Config.Reviewers: %q appears twice", r.Name)
		}
		seen[r.Name] = true
		entries = append(entries, bearer.Entry{Name: r.Name, SHA256: r.TokenSHA256})
	}
	tokens, err := bearer.NewSet(entries)
	if err != nil {
		return nil, fmt.Errorf("approval: Config.Reviewers: %w", err)
	}
	return &authenticator{tokens: tokens}, nil
}

// reviewer returns the reviewer whose token this is, comparing hashes in
// constant time against every reviewer (no early exit).
func (a *authenticator) reviewer(token string) (string, bool) {
	return a.tokens.Lookup(token)
}
