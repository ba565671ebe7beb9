package approval

import (
	"net/netip"
	"testing"
)

// TestValidateIdentity: IdentityHeader and TrustedProxies go together, and
// the header must be a header name with no other meaning.
func TestValidateIdentity(t *testing.T) {
	t.Parallel()
	lan := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	tests := []struct {
		name    string
		header  string
		proxies []netip.Prefix
		want    string
	}{
		{"neither", "", nil, ""},
		{"both", "X-Forwarded-User", lan, ""},
		{"proxies alone", "", lan, "approval: Config.TrustedProxies is set without Config.IdentityHeader: name the header the proxy sets (X-Forwarded-User)"},
		{"header alone", "X-Forwarded-User", nil, `approval: Config.IdentityHeader "X-Forwarded-User" needs Config.TrustedProxies: the addresses of the proxies whose header is believed`},
		{"not a header name", "X User", lan, "approval: Config.IdentityHeader \"X User\" must be a header name (letters, digits and !#$%&'*+-.^_`|~)"},
		{"authorization", "authorization", lan, `approval: Config.IdentityHeader "authorization" is a header with another meaning; use the proxy's user header (X-Forwarded-User)`},
		{"invalid prefix", "X-Forwarded-User", []netip.Prefix{{}}, "approval: Config.TrustedProxies[0] is not a valid prefix"},
	}
	for _, tt := range tests {
		err := Config{IdentityHeader: tt.header, TrustedProxies: tt.proxies}.validateIdentity()
		if got := errText(err); got != tt.want {
			t.Errorf("%s: validateIdentity() = %q, want %q", tt.name, got, tt.want)
		}
	}
}
