package approval

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
)

// validateIdentity checks IdentityHeader and TrustedProxies: both or
// neither, a header name of token characters that is not one the service
// or a proxy reads for something else.
func (c Config) validateIdentity() error {
	switch h := c.IdentityHeader; {
	case h == "" && len(c.TrustedProxies) == 0:
		return nil
	case h == "":
		return errors.New("approval: Config.TrustedProxies is set without Config.IdentityHeader: name the header the proxy sets (X-Forwarded-User)")
	case len(c.TrustedProxies) == 0:
		return fmt.Errorf("approval: Config.IdentityHeader %q needs Config.TrustedProxies: the addresses of the proxies whose header is believed", h)
	case strings.ContainsFunc(h, func(r rune) bool { return !isTokenRune(r) }):
		return fmt.Errorf("approval: Config.IdentityHeader %q must be a header name (letters, digits and !#$%%&'*+-.^_`|~)", h)
	}
	switch http.CanonicalHeaderKey(c.IdentityHeader) {
	case "Authorization", "Cookie", "Host", "Origin", "Content-Type", "X-Forwarded-For":
		return fmt.Errorf("approval: Config.IdentityHeader %q is a header with another meaning; use the proxy's user header (X-Forwarded-User)", c.IdentityHeader)
	}
	for i, p := range c.TrustedProxies {
		if !p.IsValid() {
			return fmt.Errorf("approval: Config.TrustedProxies[%d] is not a valid prefix", i)
		}
	}
	return nil
}

// isTokenRune reports whether r may appear in a header name (RFC 9110 token).
func isTokenRune(r rune) bool {
	return r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

// identityError is a request whose proxy identity is refused.
type identityError struct {
	status        int
	code, message string
}

// proxyReviewer returns the reviewer an authenticating proxy names in
// Config.IdentityHeader: "" when the service has no such header or the
// request does not carry it (the bearer token decides then). The header is
// believed only from Config.TrustedProxies, judged by the TCP peer's
// address; from anywhere else it is refused, as is a name that is not a
// configured reviewer's or a header given twice.
func (s *Service) proxyReviewer(r *http.Request) (string, *identityError) {
	h := s.cfg.IdentityHeader
	if h == "" {
		return "", nil
	}
	values := r.Header.Values(h)
	if len(values) == 0 {
		return "", nil
	}
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil || !s.trustedProxy(peer.Addr().Unmap()) {
		return "", &identityError{http.StatusForbidden, "untrusted_identity",
			fmt.Sprintf("the %s header is believed only from the service's trusted proxies; this request came from another address", h)}
	}
	if len(values) > 1 {
		return "", &identityError{http.StatusBadRequest, "bad_request", fmt.Sprintf("the %s header appears %d times; the proxy must set it once", h, len(values))}
	}
	name := strings.TrimSpace(values[0])
	if _, ok := s.auth.groups[name]; !ok {
		return "", &identityError{http.StatusUnauthorized, "unauthorized", fmt.Sprintf("the proxy's user %q is not a configured reviewer", name)}
	}
	return name, nil
}

// trustedProxy reports whether addr is one of Config.TrustedProxies.
func (s *Service) trustedProxy(addr netip.Addr) bool {
	for _, p := range s.cfg.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}
