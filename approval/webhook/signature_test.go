package webhook_test

import (
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/approval/webhook"
)

// The published test vector of the Standard Webhooks reference libraries:
// github.com/standard-webhooks/standard-webhooks, libraries/go/webhook_test.go
// (TestWebhookSign) and libraries/python/tests/test_webhooks.py
// (test_sign_function), which use the same secret, message id, timestamp,
// payload and expected signature.
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorPayload   = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

func TestSignSpecVector(t *testing.T) {
	t.Parallel()
	secret, err := webhook.ParseSecret(vectorSecret)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(vectorTimestamp, 0)
	if got := webhook.Sign([]webhook.Secret{secret}, vectorID, ts, []byte(vectorPayload)); got != vectorSignature {
		t.Fatalf("Sign = %q, want %q", got, vectorSignature)
	}

	// Verify accepts the vector too, given a tolerance that reaches back to 2021.
	h := http.Header{}
	h.Set(webhook.HeaderID, vectorID)
	h.Set(webhook.HeaderTimestamp, strconv.Itoa(vectorTimestamp))
	h.Set(webhook.HeaderSignature, vectorSignature)
	if err := webhook.Verify([]webhook.Secret{secret}, h, []byte(vectorPayload), time.Since(ts)+time.Hour); err != nil {
		t.Fatalf("Verify(vector) = %v", err)
	}
	if err := webhook.Verify([]webhook.Secret{secret}, h, []byte(vectorPayload), 0); !errors.Is(err, webhook.ErrTimestamp) {
		t.Fatalf("Verify(vector, default tolerance) = %v, want ErrTimestamp", err)
	}
}

func TestSignSeveralSecrets(t *testing.T) {
	t.Parallel()
	a, b := webhook.NewSecret(), webhook.NewSecret()
	ts := time.Unix(1700000000, 0)
	both := webhook.Sign([]webhook.Secret{a, {}, b}, "msg_1", ts, []byte("{}"))
	parts := strings.Split(both, " ")
	if len(parts) != 2 {
		t.Fatalf("Sign with two secrets (and a zero one) = %q, want two signatures", both)
	}
	if parts[0] != webhook.Sign([]webhook.Secret{a}, "msg_1", ts, []byte("{}")) ||
		parts[1] != webhook.Sign([]webhook.Secret{b}, "msg_1", ts, []byte("{}")) {
		t.Fatalf("Sign with two secrets = %q, want each secret's signature in order", both)
	}
	if got := webhook.Sign(nil, "msg_1", ts, nil); got != "" {
		t.Fatalf("Sign without secrets = %q, want empty", got)
	}
}

func TestParseSecret(t *testing.T) {
	t.Parallel()
	key := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }
	tests := []struct {
		name    string
		in      string
		wantErr string // substring; "" means valid
	}{
		{name: "spec vector", in: vectorSecret},
		{name: "64 bytes", in: "whsec_" + key(64)},
		{name: "padded", in: "whsec_" + key(25)},
		{name: "unpadded", in: "whsec_" + strings.TrimRight(key(25), "=")},
		{name: "empty", in: "", wantErr: `must start with "whsec_"`},
		{name: "no prefix", in: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", wantErr: `must start with "whsec_"`},
		{name: "other prefix", in: "whsk_" + key(32), wantErr: `must start with "whsec_"`},
		{name: "not base64", in: "whsec_not*base64!!", wantErr: "must be standard base64"},
		{name: "url alphabet", in: "whsec_" + strings.Repeat("-_", 16), wantErr: "must be standard base64"},
		{name: "nothing after prefix", in: "whsec_", wantErr: "must be 24 to 64 bytes, got 0"},
		{name: "too short", in: "whsec_" + key(23), wantErr: "must be 24 to 64 bytes, got 23"},
		{name: "too long", in: "whsec_" + key(65), wantErr: "must be 24 to 64 bytes, got 65"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := webhook.ParseSecret(tt.in)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseSecret(%q) = %v", tt.in, err)
				}
				if s.IsZero() {
					t.Fatal("ParseSecret returned the zero Secret")
				}
				if again, err := webhook.ParseSecret(s.String()); err != nil || again != s {
					t.Fatalf("ParseSecret(String()) = %v, %v; want the same secret", again, err)
				}
				return
			}
			if !errors.Is(err, webhook.ErrInvalidSecret) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseSecret(%q) = %v, want ErrInvalidSecret naming %q", tt.in, err, tt.wantErr)
			}
		})
	}
}

func TestNewSecret(t *testing.T) {
	t.Parallel()
	a, b := webhook.NewSecret(), webhook.NewSecret()
	if a == b || a.IsZero() {
		t.Fatal("NewSecret returned equal or zero secrets")
	}
	parsed, err := webhook.ParseSecret(a.String())
	if err != nil || parsed != a {
		t.Fatalf("ParseSecret(NewSecret().String()) = %v, %v", parsed, err)
	}
	if !strings.HasPrefix(a.String(), "whsec_") {
		t.Fatalf("String() = %q, want the whsec_ form", a.String())
	}
	if v := slog.AnyValue(a).Resolve().String(); strings.Contains(v, a.String()[6:]) {
		t.Fatalf("slog value %q reveals the key", v)
	}
	if (webhook.Secret{}).String() != "" {
		t.Fatal("zero Secret's String() is not empty")
	}
}

// signedHeader returns the headers a sender would send.
func signedHeader(secrets []webhook.Secret, id string, ts time.Time, body []byte) http.Header {
	h := http.Header{}
	h.Set(webhook.HeaderID, id)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(webhook.HeaderSignature, webhook.Sign(secrets, id, ts, body))
	return h
}

func TestVerify(t *testing.T) {
	t.Parallel()
	secret, other := webhook.NewSecret(), webhook.NewSecret()
	body := []byte(`{"type":"approval.requested","timestamp":"2026-01-02T03:04:05Z","data":{"call_id":"c1"}}`)
	now := time.Now()
	tests := []struct {
		name      string
		secrets   []webhook.Secret
		header    func() http.Header
		body      []byte
		tolerance time.Duration
		wantErr   error
		wantText  string
	}{
		{name: "valid", header: func() http.Header { return signedHeader([]webhook.Secret{secret}, "msg_1", now, body) }},
		{name: "valid, header names in canonical case", header: func() http.Header {
			h := http.Header{}
			for k, v := range signedHeader([]webhook.Secret{secret}, "msg_1", now, body) {
				h[http.CanonicalHeaderKey(k)] = v
			}
			return h
		}},
		{name: "one of several signatures matches", header: func() http.Header {
			return signedHeader([]webhook.Secret{other, secret}, "msg_1", now, body)
		}},
		{name: "one of several secrets matches", secrets: []webhook.Secret{other, secret}, header: func() http.Header {
			return signedHeader([]webhook.Secret{secret}, "msg_1", now, body)
		}},
		{name: "signatures on several header lines", header: func() http.Header {
			h := signedHeader([]webhook.Secret{other}, "msg_1", now, body)
			h.Add(webhook.HeaderSignature, webhook.Sign([]webhook.Secret{secret}, "msg_1", now, body))
			return h
		}},
		{name: "unknown versions and garbage are skipped", header: func() http.Header {
			h := signedHeader([]webhook.Secret{secret}, "msg_1", now, body)
			h.Set(webhook.HeaderSignature, "v1a,AAAA v1,@@@ nocomma "+h.Get(webhook.HeaderSignature))
			return h
		}},
		{name: "within a custom tolerance", tolerance: time.Hour, header: func() http.Header {
			return signedHeader([]webhook.Secret{secret}, "msg_1", now.Add(-50*time.Minute), body)
		}},
		{name: "tampered body", body: []byte(strings.Replace(string(body), `"c1"`, `"c2"`, 1)),
			header:  func() http.Header { return signedHeader([]webhook.Secret{secret}, "msg_1", now, body) },
			wantErr: webhook.ErrBadSignature},
		{name: "tampered id", header: func() http.Header {
			h := signedHeader([]webhook.Secret{secret}, "msg_1", now, body)
			h.Set(webhook.HeaderID, "msg_2")
			return h
		}, wantErr: webhook.ErrBadSignature},
		{name: "tampered timestamp", header: func() http.Header {
			h := signedHeader([]webhook.Secret{secret}, "msg_1", now, body)
			h.Set(webhook.HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10))
			return h
		}, wantErr: webhook.ErrBadSignature},
		{name: "wrong secret", header: func() http.Header { return signedHeader([]webhook.Secret{other}, "msg_1", now, body) },
			wantErr: webhook.ErrBadSignature},
		{name: "v1a only", header: func() http.Header {
			h := signedHeader([]webhook.Secret{secret}, "msg_1", now, body)
			h.Set(webhook.HeaderSignature, "v1a"+strings.TrimPrefix(h.Get(webhook.HeaderSignature), "v1"))
			return h
		}, wantErr: webhook.ErrBadSignature},
		{name: "no secrets", secrets: []webhook.Secret{}, header: func() http.Header {
			return signedHeader([]webhook.Secret{secret}, "msg_1", now, body)
		}, wantErr: webhook.ErrBadSignature, wantText: "no secret"},
		{name: "old timestamp", header: func() http.Header {
			return signedHeader([]webhook.Secret{secret}, "msg_1", now.Add(-6*time.Minute), body)
		}, wantErr: webhook.ErrTimestamp, wantText: "tolerance of 5m0s"},
		{name: "future timestamp", header: func() http.Header {
			return signedHeader([]webhook.Secret{secret}, "msg_1", now.Add(6*time.Minute), body)
		}, wantErr: webhook.ErrTimestamp},
		{name: "beyond a custom tolerance", tolerance: time.Minute, header: func() http.Header {
			return signedHeader([]webhook.Secret{secret}, "msg_1", now.Add(-2*time.Minute), body)
		}, wantErr: webhook.ErrTimestamp},
		{name: "timestamp not an integer", header: func() http.Header {
			h := signedHeader([]webhook.Secret{secret}, "msg_1", now, body)
			h.Set(webhook.HeaderTimestamp, now.Format(time.RFC3339))
			return h
		}, wantErr: webhook.ErrTimestamp, wantText: "not integer unix seconds"},
		{name: "no headers", header: func() http.Header { return http.Header{} },
			wantErr: webhook.ErrMissingHeaders, wantText: "webhook-id, webhook-timestamp, webhook-signature"},
		{name: "missing id", header: func() http.Header {
			h := signedHeader([]webhook.Secret{secret}, "msg_1", now, body)
			h.Del(webhook.HeaderID)
			return h
		}, wantErr: webhook.ErrMissingHeaders, wantText: "webhook-id"},
		{name: "missing timestamp", header: func() http.Header {
			h := signedHeader([]webhook.Secret{secret}, "msg_1", now, body)
			h.Del(webhook.HeaderTimestamp)
			return h
		}, wantErr: webhook.ErrMissingHeaders, wantText: "webhook-timestamp"},
		{name: "empty signature", header: func() http.Header {
			h := signedHeader([]webhook.Secret{secret}, "msg_1", now, body)
			h.Set(webhook.HeaderSignature, " ")
			return h
		}, wantErr: webhook.ErrMissingHeaders, wantText: "webhook-signature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			secrets := tt.secrets
			if secrets == nil {
				secrets = []webhook.Secret{secret}
			}
			b := tt.body
			if b == nil {
				b = body
			}
			err := webhook.Verify(secrets, tt.header(), b, tt.tolerance)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Verify = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("Verify = %v, want %v containing %q", err, tt.wantErr, tt.wantText)
			}
		})
	}
}
