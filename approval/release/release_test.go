package release_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestArgumentsHashIsCanonical(t *testing.T) {
	t.Parallel()
	a, _ := release.ArgumentsHash(json.RawMessage(`{"b": 1, "a": {"y": [1, 2.50], "x": "é<"}}`))
	b, _ := release.ArgumentsHash(json.RawMessage(`{"a":{"x":"é<","y":[1,2.50]},"b":1}`))
	if a != b {
		t.Errorf("key order or spacing changed the hash: %s vs %s", a, b)
	}
	c, _ := release.ArgumentsHash(json.RawMessage(`{"a":{"x":"é<","y":[1,2.5]},"b":1}`))
	if c == a {
		t.Error("a different number text gave the same hash") // 2.50 vs 2.5: the reviewer saw the text
	}
	empty, _ := release.ArgumentsHash(nil)
	null, _ := release.ArgumentsHash(json.RawMessage(`null`))
	obj, _ := release.ArgumentsHash(json.RawMessage(`{}`))
	if empty != obj || null != obj {
		t.Error("empty, null and {} must hash alike")
	}
	if _, err := release.ArgumentsHash(json.RawMessage(`{"a":`)); err == nil {
		t.Error("invalid JSON hashed")
	}
}

// TestArgumentsHashWithinDoesNotDecodePastItsBound: arguments of more
// values than the bound are ErrTooManyValues before anything reads them —
// those the hash would decode (an escape) and those it would only sort (a
// million members: 268 MiB of members, found by a review helper) alike;
// within it they hash as ArgumentsHash does.
func TestArgumentsHashWithinDoesNotDecodePastItsBound(t *testing.T) {
	var members strings.Builder
	members.WriteString(`{`)
	for i := range 1_000_000 {
		if i > 0 {
			members.WriteByte(',')
		}
		fmt.Fprintf(&members, `"%07d":0`, 999_999-i)
	}
	members.WriteString(`}`)
	for _, args := range []json.RawMessage{
		json.RawMessage(`{"s":"a\nb","xs":[` + strings.Repeat("0,", 1<<20) + `0]}`),
		json.RawMessage(members.String()),
	} {
		var err error
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = release.ArgumentsHashWithin(args, 1000)
		runtime.ReadMemStats(&after)
		if grown := after.TotalAlloc - before.TotalAlloc; !errors.Is(err, release.ErrTooManyValues) || grown > 1<<20 {
			t.Errorf("over the bound (%.20s…): %v, %d bytes allocated; want ErrTooManyValues, nothing read", args, err, grown)
		}
		want, _ := release.ArgumentsHash(args)
		if got, err := release.ArgumentsHashWithin(args, 2_000_000); err != nil || got != want {
			t.Errorf("within the bound (%.20s…): %s, %v; want %s", args, got, err, want)
		}
	}
}

func TestSignAndVerify(t *testing.T) {
	t.Parallel()
	priv, pub, err := release.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	key, err := release.ParsePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	pubKey, err := release.ParsePublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	signer := release.NewSigner(key)
	if signer.PublicKey() != pub {
		t.Errorf("PublicKey() = %s, want %s", signer.PublicKey(), pub)
	}
	otherPriv, _, _ := release.GenerateKey()
	otherKey, _ := release.ParsePrivateKey(otherPriv)

	args := json.RawMessage(`{"to":"bob","amount":5}`)
	hash, _ := release.ArgumentsHash(args)
	now := time.Now()
	good := release.Release{CallID: "c1", Tool: "pay", SpecHash: "s1", ArgsHash: hash, ExpiresAt: now.Add(time.Minute), ApprovedBy: []string{"alice"}}
	call := windlass.ToolCall{ID: "c1", Name: "pay", Arguments: args}
	v := release.NewVerifier(pubKey)

	header, err := signer.Sign(good)
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Verify(header, call, "s1", now)
	if err != nil || got.ApprovedBy[0] != "alice" {
		t.Fatalf("Verify(good) = %+v, %v", got, err)
	}

	sign := func(r release.Release, s *release.Signer) string {
		h, err := s.Sign(r)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	withCall := func(f func(*windlass.ToolCall)) windlass.ToolCall { c := call; f(&c); return c }
	tampered := []byte(header)
	tampered[len(tampered)-3] ^= 1
	tests := []struct {
		name   string
		header string
		call   windlass.ToolCall
		spec   string
		now    time.Time
		want   string
		reason release.Reason
	}{
		{name: "no release", header: "", call: call, spec: "s1", now: now, want: "no release", reason: release.ReasonNoRelease},
		{name: "garbage", header: "v1.x", call: call, spec: "s1", now: now, want: "malformed", reason: release.ReasonMalformed},
		{name: "unknown key", header: sign(good, release.NewSigner(otherKey)), call: call, spec: "s1", now: now, want: "unknown key", reason: release.ReasonUnknownKey},
		{name: "tampered signature", header: string(tampered), call: call, spec: "s1", now: now, want: "signature", reason: release.ReasonBadSignature},
		{name: "other call", header: header, call: withCall(func(c *windlass.ToolCall) { c.ID = "c2" }), spec: "s1", now: now, want: "issued for call", reason: release.ReasonOtherCall},
		{name: "other tool", header: header, call: withCall(func(c *windlass.ToolCall) { c.Name = "refund" }), spec: "s1", now: now, want: "issued for tool", reason: release.ReasonOtherCall},
		{name: "other spec", header: header, call: call, spec: "s2", now: now, want: "spec", reason: release.ReasonSpecChanged},
		{name: "expired", header: header, call: call, spec: "s1", now: now.Add(2 * time.Minute), want: "expired", reason: release.ReasonExpired},
		{name: "edited arguments", header: header, call: withCall(func(c *windlass.ToolCall) { c.Arguments = json.RawMessage(`{"to":"mallory","amount":5}`) }), spec: "s1", now: now, want: "arguments differ", reason: release.ReasonArgsMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := v.Verify(tt.header, tt.call, tt.spec, tt.now)
			if !errors.Is(err, release.ErrInvalid) || !strings.Contains(err.Error(), tt.want) || release.ReasonOf(err) != tt.reason {
				t.Errorf("Verify = %v (reason %q), want ErrInvalid mentioning %q, reason %q", err, release.ReasonOf(err), tt.want, tt.reason)
			}
		})
	}
	// Authenticate leaves the spec and the expiry to the worker.
	if _, err := v.Authenticate(header, call); err != nil {
		t.Errorf("Authenticate(good) = %v", err)
	}
	if _, err := release.NewVerifier().Verify(header, call, "s1", now); !errors.Is(err, release.ErrInvalid) || release.ReasonOf(err) != release.ReasonNoKeys {
		t.Errorf("a verifier without keys accepted a release: %v", err)
	}
}

func TestParseKeyErrors(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "rsa:abc", "ed25519:not base64!", "ed25519:AAAA"} {
		if _, err := release.ParsePublicKey(s); err == nil {
			t.Errorf("ParsePublicKey(%q) accepted", s)
		}
		if _, err := release.ParsePrivateKey(s); err == nil {
			t.Errorf("ParsePrivateKey(%q) accepted", s)
		}
	}
}

func TestLedgerMakesReleasesSingleUse(t *testing.T) {
	t.Parallel()
	js, err := jetstream.New(testserver.StartNATS(t).Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	kv, err := layout.EnsureReleases(t.Context(), js, layout.StreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l := release.NewLedger(kv)
	exp := time.Now().Add(time.Minute)
	if fresh, err := l.Claim(t.Context(), "c1", 7, exp); err != nil || !fresh {
		t.Fatalf("first claim: fresh=%v, %v", fresh, err)
	}
	if fresh, err := l.Claim(t.Context(), "c1", 7, exp); err != nil || fresh {
		t.Errorf("a redelivery of the same message: fresh=%v, %v; want a repeated claim", fresh, err)
	}
	err = func() error { _, err := l.Claim(t.Context(), "c1", 8, exp); return err }()
	if !errors.Is(err, release.ErrReused) || !errors.Is(err, release.ErrInvalid) || release.ReasonOf(err) != release.ReasonReused {
		t.Errorf("a copy under another message was accepted: %v", err)
	}
	if fresh, err := l.Claim(t.Context(), "c2", 8, exp); err != nil || !fresh {
		t.Errorf("another call: fresh=%v, %v", fresh, err)
	}
	// A claim is kept until its release expires (and a minute more): the
	// key carries its own TTL.
	e, err := kv.Get(t.Context(), layout.CallToken("c1"))
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Value()) != "7" {
		t.Errorf("the claim holds %q, want the stream sequence 7", e.Value())
	}
	st, err := js.Stream(t.Context(), "KV_"+layout.ReleasesBucket)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(t.Context(), e.Revision())
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := time.ParseDuration(m.Header.Get("Nats-TTL"))
	if err != nil || ttl < time.Minute+50*time.Second || ttl > 2*time.Minute+time.Second {
		t.Errorf("the claim's TTL is %q (%v), want about the release's minute plus a minute", m.Header.Get("Nats-TTL"), err)
	}
	// The ledger lives in NATS: NATS down, it cannot say, and says so.
}

func TestMessageIDIsStableAndUnguessable(t *testing.T) {
	t.Parallel()
	newSigner := func() *release.Signer {
		priv, _, _ := release.GenerateKey()
		key, _ := release.ParsePrivateKey(priv)
		return release.NewSigner(key)
	}
	a, b := newSigner(), newSigner()
	// The same call, from a second signer on the same key (a restarted
	// service): the same id.
	priv, _, _ := release.GenerateKey()
	key, _ := release.ParsePrivateKey(priv)
	first, restarted := release.NewSigner(key), release.NewSigner(key)
	if id := first.MessageID("c1"); restarted.MessageID("c1") != id {
		t.Error("the same call got two message ids")
	}
	if a.MessageID("c1") == a.MessageID("c2") {
		t.Error("two calls got one message id")
	}
	if a.MessageID("c1") == b.MessageID("c1") {
		t.Error("another key gave the same message id: it does not depend on the key")
	}
	// A call id that 32 hex characters cannot hold by chance ("c1" is in
	// about one id in nine).
	if id := a.MessageID("call-1"); !strings.HasPrefix(id, "release:") || len(id) != len("release:")+32 || strings.Contains(id, "call-1") {
		t.Errorf("message id %q: want release: and 32 hex characters, not the call id", id)
	}
}
