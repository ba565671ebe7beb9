// Package bearer checks bearer tokens against a set of SHA-256 hashes, the
// one way the fleet's HTTP services authenticate: a service is configured
// with the hashes only, never the tokens, and a presented token is hashed
// and compared with every known hash in constant time.
package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Hash returns the lowercase hex SHA-256 of a token: the form a [Set]
// stores.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Entry is one known token: a name for logs and decisions, and the hex
// SHA-256 of the token.
type Entry struct {
	Name   string
	SHA256 string
}

// Set is a set of known token hashes. It is immutable and safe for
// concurrent use.
type Set struct {
	entries []entry
}

type entry struct {
	name string
	sum  []byte
}

// ErrBadHash is wrapped by [NewSet]'s error for a hash that is not 64 hex
// characters.
var ErrBadHash = errors.New("bearer: a token hash must be 64 hex characters (the SHA-256 of the token)")

// NewSet builds a set from entries. A hash that is not 64 hex characters is
// an error wrapping [ErrBadHash] that names the entry's index and name.
func NewSet(entries []Entry) (*Set, error) {
	s := &Set{}
	for i, e := range entries {
		sum, err := hex.DecodeString(strings.TrimSpace(e.SHA256))
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("entry %d (%s): %w", i, e.Name, ErrBadHash)
		}
		s.entries = append(s.entries, entry{name: e.Name, sum: sum})
	}
	return s, nil
}

// Len is the number of entries.
func (s *Set) Len() int { return len(s.entries) }

// Lookup returns the name of the entry whose token this is. It hashes the
// token and compares the hash with every entry in constant time, without
// an early exit, so the time taken says nothing about which entry matched
// or how much of a hash did. An empty token matches nothing.
func (s *Set) Lookup(token string) (name string, ok bool) {
	if token == "" {
		return "", false
	}
	sum := sha256.Sum256([]byte(token))
	for _, e := range s.entries {
		if subtle.ConstantTimeCompare(sum[:], e.sum) == 1 {
			name, ok = e.name, true
		}
	}
	return name, ok
}

// FromRequest returns the token of an "Authorization: Bearer <token>"
// header ("bearer" in any case), or false when there is none.
func FromRequest(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
