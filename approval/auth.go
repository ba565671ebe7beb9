package approval

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
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
	// Groups are the reviewer groups this reviewer belongs to (see
	// ToolPolicy.ReviewerGroups); each a valid group name ([ValidateGroup]).
	// None: the reviewer may decide only the tools whose policy names no
	// groups.
	Groups []string
}

// NewToken returns a new random bearer token.
func NewToken() string { return "wlr_" + strings.ToLower(rand.Text()) }

// HashToken returns the hex SHA-256 of a token, the form Reviewer stores.
func HashToken(token string) string { return bearer.Hash(token) }

// reviewerForm is the form of a --reviewers entry, for error messages.
const reviewerForm = "want name=<sha256 of the token in hex>, optionally followed by :groups=g1+g2"

// ParseReviewer reads "name=<sha256 hex>" or
// "name=<sha256 hex>:groups=finance+ops", the form of --reviewers entries:
// the reviewer's name, the SHA-256 of their token, and the groups they
// belong to (none without the groups option).
func ParseReviewer(s string) (Reviewer, error) {
	name, rest, ok := strings.Cut(s, "=")
	if !ok {
		return Reviewer{}, fmt.Errorf("approval: reviewer %q: %s", s, reviewerForm)
	}
	parts := strings.Split(rest, ":")
	r := Reviewer{Name: strings.TrimSpace(name), TokenSHA256: strings.TrimSpace(parts[0])}
	for _, opt := range parts[1:] {
		k, v, _ := strings.Cut(opt, "=")
		if strings.TrimSpace(k) != "groups" {
			return Reviewer{}, fmt.Errorf("approval: reviewer %q: unknown option %q (%s)", r.Name, k, reviewerForm)
		}
		if r.Groups != nil {
			return Reviewer{}, fmt.Errorf("approval: reviewer %q: groups= given twice", r.Name)
		}
		groups, err := ParseGroups(v)
		if err != nil {
			return Reviewer{}, fmt.Errorf("approval: reviewer %q: %w", r.Name, err)
		}
		r.Groups = groups
	}
	return r, nil
}

// ParseGroups reads a list of group names joined by '+' ("finance+ops"),
// the form of the groups= and reviewers= options of the command's flags.
// Each name must be valid ([ValidateGroup]); the list must not be empty.
func ParseGroups(s string) ([]string, error) {
	var out []string
	for g := range strings.SplitSeq(s, "+") {
		g = strings.TrimSpace(g)
		if err := ValidateGroup(g); err != nil {
			return nil, err
		}
		out = append(out, g)
	}
	return out, nil
}

// ValidateGroup checks a reviewer group's name: 1 to 64 letters, digits,
// '_' or '-' (the rule of tool names).
func ValidateGroup(g string) error {
	if g == "" || len(g) > 64 {
		return fmt.Errorf("approval: group %q: a group name is 1 to 64 letters, digits, '_' or '-' (got %d characters)", g, len(g))
	}
	for i := 0; i < len(g); i++ {
		c := g[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("approval: group %q: a group name is 1 to 64 letters, digits, '_' or '-' (character %q at byte %d is not)", g, rune(c), i)
		}
	}
	return nil
}

// normalizeGroups returns groups sorted, without duplicates; nil for none.
func normalizeGroups(groups []string) []string {
	if len(groups) == 0 {
		return nil
	}
	out := slices.Clone(groups)
	slices.Sort(out)
	return slices.Compact(out)
}

type authenticator struct {
	tokens *bearer.Set
	groups map[string][]string // reviewer name -> groups, sorted
}

func newAuthenticator(reviewers []Reviewer) (*authenticator, error) {
	seen := map[string]bool{}
	groups := map[string][]string{}
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
		for _, g := range r.Groups {
			if err := ValidateGroup(g); err != nil {
				return nil, fmt.Errorf("approval: Config.Reviewers[%d] (%s).Groups: %w", i, r.Name, err)
			}
		}
		seen[r.Name] = true
		groups[r.Name] = normalizeGroups(r.Groups)
		entries = append(entries, bearer.Entry{Name: r.Name, SHA256: r.TokenSHA256})
	}
	tokens, err := bearer.NewSet(entries)
	if err != nil {
		return nil, fmt.Errorf("approval: Config.Reviewers: %w", err)
	}
	return &authenticator{tokens: tokens, groups: groups}, nil
}

// reviewer returns the reviewer whose token this is, comparing hashes in
// constant time against every reviewer (no early exit).
func (a *authenticator) reviewer(token string) (string, bool) {
	return a.tokens.Lookup(token)
}

// mayDecide reports whether reviewer may see and decide a call whose tool's
// policy names groups: anyone when it names none (as before groups), else
// a configured reviewer who is a member of one of them.
func (a *authenticator) mayDecide(reviewer string, groups []string) bool {
	if len(groups) == 0 {
		return true
	}
	mine := a.groups[reviewer]
	return slices.ContainsFunc(groups, func(g string) bool { return slices.Contains(mine, g) })
}
