package webhook

import (
	"errors"
	"net/http"
	"net/netip"
	"testing"
	"time"
)

func TestBlockedReason(t *testing.T) {
	t.Parallel()
	tests := []struct {
		addr    string
		blocked bool
	}{
		{"127.0.0.1", true}, {"127.255.0.9", true}, {"::1", true},
		{"10.1.2.3", true}, {"172.16.0.1", true}, {"172.31.255.255", true}, {"192.168.1.1", true},
		{"fc00::1", true}, {"fd12:3456::1", true},
		{"169.254.169.254", true}, {"fe80::1", true},
		{"0.0.0.0", true}, {"::", true}, {"0.1.2.3", true},
		{"224.0.0.1", true}, {"239.1.1.1", true}, {"ff02::1", true}, {"ff05::2", true},
		{"100.64.0.1", true}, {"100.127.255.255", true},
		{"198.18.0.1", true}, {"240.0.0.1", true}, {"255.255.255.255", true}, {"192.0.0.8", true},
		{"::ffff:127.0.0.1", true}, {"::ffff:10.0.0.1", true}, {"64:ff9b::a00:1", true}, {"64:ff9b::7f00:1", true},
		{"8.8.8.8", false}, {"1.1.1.1", false}, {"100.63.255.255", false}, {"100.128.0.0", false},
		{"172.32.0.1", false}, {"2001:4860:4860::8888", false}, {"::ffff:8.8.8.8", false}, {"64:ff9b::808:808", false},
	}
	for _, tt := range tests {
		reason := blockedReason(netip.MustParseAddr(tt.addr))
		if (reason != "") != tt.blocked {
			t.Errorf("blockedReason(%s) = %q, want blocked=%v", tt.addr, reason, tt.blocked)
		}
	}
}

func TestGuardControl(t *testing.T) {
	t.Parallel()
	err := guardControl("tcp4", "169.254.169.254:80", nil)
	var blocked *BlockedAddressError
	if !errors.As(err, &blocked) || blocked.Address != "169.254.169.254:80" || blocked.Reason != "link-local" {
		t.Fatalf("guardControl(metadata address) = %v", err)
	}
	if err := guardControl("tcp6", "[2001:4860:4860::8888]:443", nil); err != nil {
		t.Fatalf("guardControl(public) = %v", err)
	}
	if err := guardControl("tcp", "nonsense", nil); !errors.Is(err, ErrBlockedAddress) {
		t.Fatalf("guardControl(unparseable) = %v, want refused", err)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		value string
		want  time.Duration
	}{
		{"", 0}, {"1", time.Second}, {" 120 ", 2 * time.Minute}, {"0", 0}, {"-5", 0}, {"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"99999999999", 365 * 24 * time.Hour},
	}
	for _, tt := range tests {
		h := http.Header{}
		if tt.value != "" {
			h.Set("Retry-After", tt.value)
		}
		if got := retryAfter(h, now); got != tt.want {
			t.Errorf("retryAfter(%q) = %s, want %s", tt.value, got, tt.want)
		}
	}
}
