package receipt_test

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/receipt"
)

// fixture is a signed receipt, its stored result and the keys that
// publish its signer's key.
type fixture struct {
	signer *receipt.Signer
	r      receipt.Receipt
	body   []byte
	keys   receipt.Keys
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	key, err := receipt.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s := receipt.NewSigner(key, "worker-a")
	body := []byte(`{"call_id":"call-1","name":"transfer_funds","content":"done","is_error":false}`)
	start := time.Date(2026, 12, 4, 20, 0, 0, 123, time.UTC)
	r := s.Sign(receipt.Receipt{
		CallID: "call-1", Tool: "transfer_funds", SpecHash: "s1", ArgsHash: "a1", ReleaseID: "r1",
		ApprovedBy: []string{"alice", "bob"}, ResultHash: receipt.ResultHash(body),
		StartedAt: start, FinishedAt: start.Add(time.Second),
	})
	keys := receipt.KeysFunc(func(_ context.Context, id string) (receipt.PublishedKey, error) {
		if id != s.KeyID() {
			return receipt.PublishedKey{}, receipt.ErrKeyNotFound
		}
		return receipt.PublishedKey{Key: s.PublicKey(), Workers: []string{s.Worker()}}, nil
	})
	return fixture{signer: s, r: r, body: body, keys: keys}
}

func (f fixture) check(t *testing.T, r receipt.Receipt, body []byte) error {
	t.Helper()
	h, err := receipt.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	_, err = receipt.NewChecker(f.keys).Check(t.Context(), "call-1", h, body)
	return err
}

func TestReceiptVerifies(t *testing.T) {
	f := newFixture(t)
	h, err := receipt.Encode(f.r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := receipt.NewChecker(f.keys).Check(t.Context(), "call-1", h, f.body)
	if err != nil {
		t.Fatalf("a genuine receipt failed: %v", err)
	}
	if !reflect.DeepEqual(got.ApprovedBy, []string{"alice", "bob"}) || !got.StartedAt.Equal(f.r.StartedAt) || got.Worker != "worker-a" {
		t.Fatalf("decoded receipt differs: %+v", got)
	}
}

// alter changes one field of r to another value of its type.
func alter(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Int:
		v.SetInt(v.Int() + 1)
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 { // the signature
			b := append([]byte(nil), v.Bytes()...)
			b[0] ^= 1
			v.SetBytes(b)
			return
		}
		s := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(s, v)
		s.Index(v.Len() - 1).SetString(s.Index(v.Len()-1).String() + "x")
		v.Set(s)
	case reflect.Struct:
		if tm, ok := v.Interface().(time.Time); ok {
			v.Set(reflect.ValueOf(tm.Add(time.Nanosecond)))
			return
		}
		t.Fatalf("no alteration for %s", v.Type())
	default:
		t.Fatalf("no alteration for %s", v.Type())
	}
}

// TestReceiptAlteredInAnyFieldFails alters every field of a signed
// receipt, one at a time — found by reflection, so a field added later
// and left out of the signature fails here — and each must fail.
func TestReceiptAlteredInAnyFieldFails(t *testing.T) {
	f := newFixture(t)
	typ := reflect.TypeFor[receipt.Receipt]()
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		t.Run(name, func(t *testing.T) {
			r := f.r
			r.ApprovedBy = append([]string(nil), f.r.ApprovedBy...)
			alter(t, reflect.ValueOf(&r).Elem().Field(i))
			err := f.check(t, r, f.body)
			if !errors.Is(err, receipt.ErrInvalid) {
				t.Fatalf("a receipt with %s altered verified (err %v)", name, err)
			}
			// The signature alone catches it, whatever else the checker
			// looks at.
			if err := receipt.Verify(r, f.signer.PublicKey()); !errors.Is(err, receipt.ErrInvalid) {
				t.Fatalf("the signature of a receipt with %s altered verified (err %v)", name, err)
			}
		})
	}
	// Beyond the fields' values: their arrangement.
	for _, c := range []struct {
		name   string
		change func(*receipt.Receipt)
	}{
		{"approver dropped", func(r *receipt.Receipt) { r.ApprovedBy = r.ApprovedBy[:1] }},
		{"approver added", func(r *receipt.Receipt) { r.ApprovedBy = append(r.ApprovedBy, "mallory") }},
		{"approvers reordered", func(r *receipt.Receipt) { r.ApprovedBy = []string{"bob", "alice"} }},
		{"bytes moved between fields", func(r *receipt.Receipt) { r.CallID, r.Tool = "call-1transfer", "_funds" }},
		{"start cleared", func(r *receipt.Receipt) { r.StartedAt = time.Time{} }},
		{"signature removed", func(r *receipt.Receipt) { r.Signature = nil }},
		{"signed by another key, its own id", func(r *receipt.Receipt) {
			k, _ := receipt.GenerateKey()
			*r = receipt.NewSigner(k, "worker-a").Sign(*r)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := f.r
			r.ApprovedBy = append([]string(nil), f.r.ApprovedBy...)
			c.change(&r)
			if err := f.check(t, r, f.body); !errors.Is(err, receipt.ErrInvalid) {
				t.Fatalf("the altered receipt verified (err %v)", err)
			}
		})
	}
}

func TestReceiptChecksNameTheFailure(t *testing.T) {
	f := newFixture(t)
	other, _ := receipt.GenerateKey()
	wrongWorker := receipt.KeysFunc(func(context.Context, string) (receipt.PublishedKey, error) {
		return receipt.PublishedKey{Key: f.signer.PublicKey(), Workers: []string{"worker-b"}}, nil
	})
	swapped := receipt.KeysFunc(func(context.Context, string) (receipt.PublishedKey, error) {
		// What Redis holds under the id is another key.
		return receipt.PublishedKey{Key: other.Public().(ed25519.PublicKey), Workers: []string{"worker-a"}}, nil
	})
	unreachable := receipt.KeysFunc(func(context.Context, string) (receipt.PublishedKey, error) {
		return receipt.PublishedKey{}, errors.New("connection refused")
	})
	good, _ := receipt.Encode(f.r)
	for _, c := range []struct {
		name   string
		keys   receipt.Keys
		callID string
		header string
		body   []byte
		want   receipt.Check // "" : an error that is not a failed check
	}{
		{"result altered after signing", f.keys, "call-1", good, []byte(strings.Replace(string(f.body), "done", "undone", 1)), receipt.CheckResult},
		{"key not published", receipt.KeysFunc(func(context.Context, string) (receipt.PublishedKey, error) {
			return receipt.PublishedKey{}, receipt.ErrKeyNotFound
		}), "call-1", good, f.body, receipt.CheckKey},
		{"key published by another worker", wrongWorker, "call-1", good, f.body, receipt.CheckKey},
		{"another key under the id", swapped, "call-1", good, f.body, receipt.CheckKey},
		{"another call's receipt", f.keys, "call-2", good, f.body, receipt.CheckCall},
		{"no receipt", f.keys, "call-1", "", f.body, receipt.CheckMissing},
		{"not the header form", f.keys, "call-1", "v2." + strings.TrimPrefix(good, "v1."), f.body, receipt.CheckMalformed},
		{"keys unreachable", unreachable, "call-1", good, f.body, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := receipt.NewChecker(c.keys).Check(t.Context(), c.callID, c.header, c.body)
			if err == nil {
				t.Fatal("verified")
			}
			if got := receipt.CheckOf(err); got != c.want {
				t.Fatalf("failed check %q, want %q (err %v)", got, c.want, err)
			}
		})
	}
}

// TestDecodeRefusesUnsignedFields: a field this version does not know
// would pass unsigned; the receipt is refused instead.
func TestDecodeRefusesUnsignedFields(t *testing.T) {
	f := newFixture(t)
	data, _ := json.Marshal(f.r)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	m["result_code"] = "ok"
	data, _ = json.Marshal(m)
	_, err := receipt.Decode("v1." + base64.RawURLEncoding.EncodeToString(data))
	if receipt.CheckOf(err) != receipt.CheckMalformed {
		t.Fatalf("an unknown field was accepted (err %v)", err)
	}
}

func TestParsePrivateKey(t *testing.T) {
	key, _ := receipt.GenerateKey()
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		data    []byte
		wantErr bool
	}{
		{"pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), false},
		{"raw seed", key.Seed(), false},
		{"text seed", []byte("ed25519:" + base64.StdEncoding.EncodeToString(key.Seed()) + "\n"), false},
		{"pem of another type", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), true},
		{"short seed", key.Seed()[:31], true},
		{"junk", []byte("hello"), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := receipt.ParsePrivateKey(c.data)
			if (err != nil) != c.wantErr {
				t.Fatalf("err %v, want error %v", err, c.wantErr)
			}
			if err == nil && !got.Equal(key) {
				t.Fatal("another key")
			}
		})
	}
}

// BenchmarkSignEncode is what a worker adds to a call it signs a receipt
// for: the result's hash (of a 1 KiB body), the signature and the header
// form.
func BenchmarkSignEncode(b *testing.B) {
	key, _ := receipt.GenerateKey()
	s := receipt.NewSigner(key, "worker-a")
	body := []byte(strings.Repeat("x", 1024))
	now := time.Now()
	for b.Loop() {
		r := s.Sign(receipt.Receipt{CallID: "call-1", Tool: "transfer_funds", SpecHash: "s1", ArgsHash: "a1",
			ResultHash: receipt.ResultHash(body), StartedAt: now, FinishedAt: now})
		if _, err := receipt.Encode(r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify is a verifier's cost per receipt, keys at hand.
func BenchmarkVerify(b *testing.B) {
	key, _ := receipt.GenerateKey()
	s := receipt.NewSigner(key, "worker-a")
	r := s.Sign(receipt.Receipt{CallID: "call-1", Tool: "t"})
	for b.Loop() {
		if err := receipt.Verify(r, s.PublicKey()); err != nil {
			b.Fatal(err)
		}
	}
}
