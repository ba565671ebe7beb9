package httpapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
)

// openAPIDoc is the part of an OpenAPI document the tests read.
type openAPIDoc struct {
	OpenAPI string `json:"openapi"`
	Info    struct {
		Title, Version string
	} `json:"info"`
	Paths map[string]map[string]json.RawMessage `json:"paths"`
}

type operation struct {
	OperationID string                     `json:"operationId"`
	Parameters  []map[string]any           `json:"parameters"`
	Responses   map[string]json.RawMessage `json:"responses"`
}

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

// TestOpenAPIMatchesRoutes checks the document's paths and methods against
// the route table the mux is built from, both ways: a route added without
// docs, or docs without a route, fails.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc openAPIDoc
	if err := json.Unmarshal(httpapi.OpenAPI(), &doc); err != nil {
		t.Fatalf("the OpenAPI document does not parse: %v", err)
	}
	var documented, served []string
	for path, item := range doc.Paths {
		for method := range item {
			if slices.Contains(httpMethods, method) {
				documented = append(documented, strings.ToUpper(method)+" "+path)
			}
		}
	}
	for _, r := range httpapi.Routes() {
		served = append(served, r.Method+" "+r.Path)
	}
	slices.Sort(documented)
	slices.Sort(served)
	for _, r := range served {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is served but not in openapi.json", r)
		}
	}
	for _, r := range documented {
		if !slices.Contains(served, r) {
			t.Errorf("openapi.json documents %s, which the handler does not serve", r)
		}
	}
}

// TestOpenAPIDocument checks that the document is a well-formed OpenAPI
// 3.1 document: version and info, an operationId and responses on every
// operation, every path parameter declared, every $ref resolving, and every
// schema a valid JSON Schema (2020-12, OpenAPI 3.1's dialect).
func TestOpenAPIDocument(t *testing.T) {
	raw := httpapi.OpenAPI()
	var doc openAPIDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1.") || doc.Info.Title == "" || doc.Info.Version == "" {
		t.Fatalf("openapi %q, info %+v: want 3.1.x with a title and a version", doc.OpenAPI, doc.Info)
	}
	var whole any
	if err := json.Unmarshal(raw, &whole); err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	pathParam := regexp.MustCompile(`\{([^}]+)\}`)
	for path, item := range doc.Paths {
		var shared []map[string]any
		if p, ok := item["parameters"]; ok {
			if err := json.Unmarshal(p, &shared); err != nil {
				t.Fatalf("%s parameters: %v", path, err)
			}
		}
		for method, rawOp := range item {
			if !slices.Contains(httpMethods, method) {
				continue
			}
			var op operation
			if err := json.Unmarshal(rawOp, &op); err != nil {
				t.Fatalf("%s %s: %v", method, path, err)
			}
			if op.OperationID == "" || ids[op.OperationID] {
				t.Errorf("%s %s: operationId %q missing or repeated", method, path, op.OperationID)
			}
			ids[op.OperationID] = true
			if len(op.Responses) == 0 {
				t.Errorf("%s %s: no responses", method, path)
			}
			for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
				if !declares(whole, append(shared, op.Parameters...), m[1]) {
					t.Errorf("%s %s: path parameter %q is not declared", method, path, m[1])
				}
			}
		}
	}
	for _, ref := range refs(whole) {
		if resolve(whole, ref) == nil {
			t.Errorf("$ref %q does not resolve", ref)
		}
	}
	c := schemaCompiler(t)
	for name := range resolve(whole, "#/components/schemas").(map[string]any) {
		if _, err := c.Compile("openapi.json#/components/schemas/" + name); err != nil {
			t.Errorf("schema %s: %v", name, err)
		}
	}
}

// TestOpenAPIStylesAreWindlassStyles holds the document's style enums
// (the query parameter of GET /v1/tools, ToolList.style and
// CallRequest.style) and the
// parameter's default to windlass.Styles and windlass.DefaultStyle: the
// document is a static file, so a new style must be added to it by hand.
func TestOpenAPIStylesAreWindlassStyles(t *testing.T) {
	var whole any
	if err := json.Unmarshal(httpapi.OpenAPI(), &whole); err != nil {
		t.Fatal(err)
	}
	var want []any
	for _, s := range windlass.Styles {
		want = append(want, string(s))
	}
	var param map[string]any
	params, _ := resolve(whole, "#/paths/~1v1~1tools/get/parameters").([]any)
	for _, p := range params {
		if p, ok := p.(map[string]any); ok && p["name"] == "style" {
			param = p
		}
	}
	if param == nil {
		t.Fatal("GET /v1/tools has no style parameter")
	}
	enums := map[string]any{
		"GET /v1/tools style parameter": resolve(param, "#/schema/enum"),
		"ToolList.style":                resolve(whole, "#/components/schemas/ToolList/properties/style/enum"),
		"CallRequest.style":             resolve(whole, "#/components/schemas/CallRequest/properties/style/enum"),
	}
	for where, got := range enums {
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: enum %v, want windlass.Styles %v", where, got, want)
		}
	}
	if got := resolve(param, "#/schema/default"); got != string(windlass.DefaultStyle) {
		t.Errorf("GET /v1/tools style parameter: default %v, want windlass.DefaultStyle %q", got, windlass.DefaultStyle)
	}
}

// TestOpenAPIDescribesResponses validates real answers of the server
// against the schemas the document gives for them, and serves the
// document itself.
func TestOpenAPIDescribesResponses(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	check := func(r response, schema string) {
		t.Helper()
		matchesSchema(t, r, schema)
	}
	check(f.do("GET", "/v1/tools?style=anthropic", ""), "ToolList")
	done := f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":2}}`)
	check(done, "Call")
	check(f.do("POST", "/v1/calls", `{"tool":"slow","arguments":{"ms":1},"async":true}`), "Call")
	check(f.do("POST", "/v1/calls", `{"tool":"add","extra":1}`), "ErrorBody")
	check(f.do("POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":2},"spec_hash":"0123456789abcdef","style":"gemini"}`), "ErrorBody")
	var call httpapi.Call
	done.decode(t, &call)
	check(f.do("DELETE", "/v1/calls/"+call.ID, ""), "ErrorBody")

	served := f.do("GET", "/v1/openapi.json", "")
	if served.status != http.StatusOK || !bytes.Equal(served.body, httpapi.OpenAPI()) {
		t.Errorf("GET /v1/openapi.json = %d, %d bytes; want the embedded document", served.status, len(served.body))
	}
}

// matchesSchema checks r's body against the document's schema of that
// name (Call, ErrorBody...).
func matchesSchema(t *testing.T, r response, schema string) {
	t.Helper()
	s, err := schemaCompiler(t).Compile("openapi.json#/components/schemas/" + schema)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(r.body))
	if err != nil {
		t.Fatalf("%s: %v", r, err)
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("%s does not match %s: %v", r, schema, err)
	}
}

// schemaCompiler compiles the document's schemas as JSON Schema 2020-12.
func schemaCompiler(t *testing.T) *jsonschema.Compiler {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(httpapi.OpenAPI()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("openapi.json", doc); err != nil {
		t.Fatal(err)
	}
	return c
}

// declares reports whether params declare the path parameter name.
func declares(doc any, params []map[string]any, name string) bool {
	for _, p := range params {
		if ref, ok := p["$ref"].(string); ok {
			p, _ = resolve(doc, ref).(map[string]any)
		}
		if p["in"] == "path" && p["name"] == name && p["required"] == true {
			return true
		}
	}
	return false
}

// refs lists every $ref in v.
func refs(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "$ref" {
				out = append(out, s)
			}
			out = append(out, refs(x)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, refs(x)...)
		}
	}
	return out
}

// resolve follows a local JSON pointer ("#/a/b"); nil when it leads
// nowhere.
func resolve(doc any, ref string) any {
	ptr, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	cur := doc
	for _, tok := range strings.Split(ptr, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		if cur, ok = m[tok]; !ok {
			return nil
		}
	}
	return cur
}

// TestOpenAPICallIDIsValidateCallID: the document's call id schemas (the
// path parameter and CallRequest.id) accept exactly the ids
// windlass.ValidateCallID accepts, so a client generated from the document
// refuses what the server would.
func TestOpenAPICallIDIsValidateCallID(t *testing.T) {
	var whole any
	if err := json.Unmarshal(httpapi.OpenAPI(), &whole); err != nil {
		t.Fatal(err)
	}
	ids := []string{"call_1", "toolu_01A", ".", "..", "~!#$%&'()*+,-./:;<=>?@[]^_`{|}", strings.Repeat("x", 128),
		"", strings.Repeat("x", 129), "a b", `a"b`, `a\b`, "é", "a\tb", "a\x7fb"}
	for where, ptr := range map[string]string{
		"path parameter": "#/components/parameters/CallID/schema",
		"CallRequest.id": "#/components/schemas/CallRequest/properties/id",
	} {
		schema, _ := resolve(whole, ptr).(map[string]any)
		pattern, _ := schema["pattern"].(string)
		re, err := regexp.Compile(pattern)
		if pattern == "" || err != nil {
			t.Fatalf("%s: pattern %q: %v", where, pattern, err)
		}
		minLen, _ := schema["minLength"].(float64)
		maxLen, _ := schema["maxLength"].(float64)
		excluded, _ := resolve(schema, "#/not/enum").([]any)
		for _, id := range ids {
			doc := re.MatchString(id) && len(id) >= int(minLen) && len(id) <= int(maxLen) && !slices.Contains(excluded, any(id))
			if valid := windlass.ValidateCallID(id) == nil; doc != valid {
				t.Errorf("%s: id %q: the document says valid=%v, ValidateCallID %v", where, id, doc, valid)
			}
		}
	}
}
