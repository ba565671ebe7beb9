package windlass_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
)

func TestValidateName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		input   string
		wantErr bool
	}{
		{name: "letters", input: "search"},
		{name: "mixed", input: "get_Weather-2"},
		{name: "digit first", input: "2fa"},
		{name: "dash first", input: "-x"},
		{name: "64 characters", input: strings.Repeat("a", 64)},
		{name: "empty", input: "", wantErr: true},
		{name: "65 characters", input: strings.Repeat("a", 65), wantErr: true},
		{name: "dot", input: "a.b", wantErr: true},
		{name: "space", input: "a b", wantErr: true},
		{name: "star wildcard", input: "a*", wantErr: true},
		{name: "gt wildcard", input: ">", wantErr: true},
		{name: "non-ASCII", input: "caf\u00e9", wantErr: true},
		{name: "slash", input: "a/b", wantErr: true},
		{name: "newline", input: "a\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := windlass.ValidateName(tt.input)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ValidateName(%q) = %v, wantErr %v", tt.input, err, tt.wantErr)
			}
			if err == nil {
				return
			}
			if !errors.Is(err, windlass.ErrInvalidSpec) {
				t.Errorf("error %v does not wrap ErrInvalidSpec", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, windlass.NamePattern) {
				t.Errorf("error %q does not name the rule %s", msg, windlass.NamePattern)
			}
			if !strings.Contains(msg, strconv.Quote(tt.input)) {
				t.Errorf("error %q does not quote the bad name %q", msg, tt.input)
			}
		})
	}
}

func TestSpecDefaults(t *testing.T) {
	t.Parallel()
	s := windlass.Spec{Name: "x"}.WithDefaults()
	if s.Timeout != windlass.DefaultTimeout || windlass.DefaultTimeout != 30*time.Second {
		t.Errorf("timeout = %s, want %s (30s)", s.Timeout, windlass.DefaultTimeout)
	}
	got, _ := json.Marshal(s.Parameters)
	if string(got) != `{"properties":{},"type":"object"}` {
		t.Errorf("default parameters = %s", got)
	}
}

func TestSpecValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		spec      windlass.Spec
		wantField string // "" means valid
	}{
		{name: "minimal", spec: windlass.Spec{Name: "ok"}},
		{name: "bad name", spec: windlass.Spec{Name: "no.dots"}, wantField: "name"},
		{name: "negative timeout", spec: windlass.Spec{Name: "ok", Timeout: -time.Second}, wantField: "timeout"},
		{name: "array parameters", spec: windlass.Spec{Name: "ok", Parameters: map[string]any{"type": "array"}}, wantField: "parameters.type"},
		{name: "untyped parameters", spec: windlass.Spec{Name: "ok", Parameters: map[string]any{}}, wantField: "parameters.type"},
		{name: "properties not object", spec: windlass.Spec{Name: "ok", Parameters: map[string]any{"type": "object", "properties": 3}}, wantField: "parameters.properties"},
		{name: "unencodable", spec: windlass.Spec{Name: "ok", Parameters: map[string]any{"type": "object", "x": make(chan int)}}, wantField: "parameters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.spec.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !errors.Is(err, windlass.ErrInvalidSpec) || !strings.Contains(err.Error(), tt.wantField) {
				t.Fatalf("Validate() = %v, want an ErrInvalidSpec naming %q", err, tt.wantField)
			}
		})
	}
}

func TestSpecJSONAndHash(t *testing.T) {
	t.Parallel()
	a := windlass.Spec{Name: "x", Description: "d", Timeout: 1500 * time.Millisecond, RequiresApproval: true,
		Parameters: map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}}}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"name":"x","description":"d","parameters":{"properties":{"q":{"type":"string"}},"type":"object"},"timeout_ms":1500,"requires_approval":true}`
	if string(b) != want {
		t.Fatalf("json = %s\nwant   %s", b, want)
	}
	var back windlass.Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Hash() != a.Hash() {
		t.Errorf("hash changed across a JSON round trip: %s vs %s", back.Hash(), a.Hash())
	}
	if len(a.Hash()) != 32 {
		t.Errorf("hash %q: want 32 hex characters", a.Hash())
	}
	changed := a
	changed.Description = "other"
	if changed.Hash() == a.Hash() {
		t.Error("hash did not change with the description")
	}
	if (windlass.Spec{Name: "x"}).Hash() != (windlass.Spec{Name: "x"}).WithDefaults().Hash() {
		t.Error("hash differs between a spec and the same spec with its defaults filled in")
	}
	// The bound on argument values is in the JSON and the hash only when
	// set: a spec without it keeps the hash it had before the field.
	big := a
	big.MaxArgumentValues = 200_000
	if b, err := json.Marshal(big); err != nil || !strings.HasSuffix(string(b), `,"max_argument_values":200000}`) {
		t.Errorf("json with a bound = %s, %v", b, err)
	} else if err := json.Unmarshal(b, &back); err != nil || back.MaxArgumentValues != 200_000 || back.Hash() != big.Hash() || big.Hash() == a.Hash() {
		t.Errorf("round trip of a bound: %+v, %v; hashes %s %s %s", back, err, back.Hash(), big.Hash(), a.Hash())
	}
	if err := json.Unmarshal([]byte(`{"name":"x","max_argument_values":-1}`), &back); !errors.Is(err, windlass.ErrInvalidSpec) {
		t.Errorf("a negative max_argument_values decodes: %v", err)
	}
}
