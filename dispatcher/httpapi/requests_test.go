package httpapi_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
)

// TestListTools lists the fleet's tools in each style.
func TestListTools(t *testing.T) {
	f := newFleet(t, httpapi.Config{})
	cases := []struct {
		query string
		style windlass.Style
		name  func(map[string]any) any // where the style keeps the name
		key   string                   // a key the style's entries have
	}{
		{"", windlass.StyleOpenAI, func(m map[string]any) any { return m["function"].(map[string]any)["name"] }, "function"},
		{"?style=openai", windlass.StyleOpenAI, func(m map[string]any) any { return m["function"].(map[string]any)["name"] }, "type"},
		{"?style=anthropic", windlass.StyleAnthropic, func(m map[string]any) any { return m["name"] }, "input_schema"},
		{"?style=gemini", windlass.StyleGemini, func(m map[string]any) any { return m["name"] }, "parameters"},
	}
	for _, tc := range cases {
		t.Run(string(tc.style)+tc.query, func(t *testing.T) {
			r := f.do("GET", "/v1/tools"+tc.query, "")
			if r.status != http.StatusOK {
				t.Fatalf("got %s", r)
			}
			var list httpapi.ToolList
			r.decode(t, &list)
			var names []string
			for _, tool := range list.Tools {
				if _, ok := tool[tc.key]; !ok {
					t.Errorf("%s entry %v lacks %q", tc.style, tool, tc.key)
				}
				names = append(names, tc.name(tool).(string))
			}
			if list.Style != tc.style || strings.Join(names, ",") != "add,count,fail,slow" {
				t.Errorf("style %q, tools %v; want %s with add,count,fail,slow", list.Style, names, tc.style)
			}
		})
	}
}

// TestBadRequests sends what the API must refuse, each with a JSON error
// naming the problem.
func TestBadRequests(t *testing.T) {
	f := newFleet(t, httpapi.Config{MaxBodyBytes: 4096})
	cases := []struct {
		name, method, path, body, contentType string
		status                                int
		code                                  windlass.ErrorCode
		mention                               string
	}{
		{"UnknownStyle", "GET", "/v1/tools?style=cohere", "", "", 400, httpapi.CodeInvalidRequest, "openai, anthropic or gemini"},
		{"UnknownStyleNamesTheStyles", "GET", "/v1/tools?style=claude", "", "", 400, httpapi.CodeInvalidRequest, `style "claude" is not known: use ` + windlass.StyleChoices()},
		{"UnknownField", "POST", "/v1/calls", `{"tool":"add","argumnets":{}}`, "application/json", 400, windlass.CodeInvalidCall, `unknown field "argumnets"`},
		{"BadJSON", "POST", "/v1/calls", `{"tool":"add",`, "application/json", 400, windlass.CodeInvalidCall, "request body"},
		{"EmptyBody", "POST", "/v1/calls", ``, "application/json", 400, windlass.CodeInvalidCall, "empty"},
		{"TrailingData", "POST", "/v1/calls", `{"tool":"add"} {}`, "application/json", 400, windlass.CodeInvalidCall, "trailing"},
		{"WrongType", "POST", "/v1/calls", `{"tool":7}`, "application/json", 400, windlass.CodeInvalidCall, "tool"},
		{"MissingTool", "POST", "/v1/calls", `{"arguments":{}}`, "application/json", 400, windlass.CodeInvalidCall, `"tool" is required`},
		{"NegativeWait", "POST", "/v1/calls", `{"tool":"add","wait_ms":-1}`, "application/json", 400, windlass.CodeInvalidCall, "wait_ms"},
		{"TimeoutPastMax", "POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":2},"timeout_ms":9223372036855}`, "application/json", 400, windlass.CodeInvalidCall, `"timeout_ms" must be at most 9223372036854`},
		{"TimeoutFarPastMax", "POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":2},"timeout_ms":9000000000000000000}`, "application/json", 400, windlass.CodeInvalidCall, `"timeout_ms" must be at most 9223372036854`},
		{"TimeoutPastInt64", "POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":2},"timeout_ms":1e20}`, "application/json", 400, windlass.CodeInvalidCall, "timeout_ms"},
		{"WaitPastMax", "POST", "/v1/calls", `{"tool":"add","arguments":{"a":1,"b":2},"wait_ms":9223372036855}`, "application/json", 400, windlass.CodeInvalidCall, `"wait_ms" must be at most 9223372036854`},
		{"BadOwnID", "POST", "/v1/calls", `{"tool":"add","id":"has space"}`, "application/json", 400, windlass.CodeInvalidCall, `"id"`},
		{"NotJSON", "POST", "/v1/calls", `tool=add`, "application/x-www-form-urlencoded", 415, httpapi.CodeUnsupportedMediaType, "application/json"},
		{"HugeBody", "POST", "/v1/calls", `{"tool":"add","arguments":{"a":"` + strings.Repeat("x", 10000) + `"}}`, "application/json", 413, windlass.CodePayloadTooLarge, "4096 bytes"},
		{"UnknownTool", "POST", "/v1/calls", `{"tool":"nope","arguments":{}}`, "application/json", 404, windlass.CodeUnknownTool, `"nope"`},
		{"InvalidArguments", "POST", "/v1/calls", `{"tool":"add","arguments":{"a":"one","b":2}}`, "application/json", 422, windlass.CodeInvalidArguments, "$.a"},
		{"ArgumentsNotObject", "POST", "/v1/calls", `{"tool":"add","arguments":[1]}`, "application/json", 422, windlass.CodeInvalidArguments, "object"},
		{"BadCallIDInPath", "GET", "/v1/calls/" + strings.Repeat("x", 200), "", "", 400, windlass.CodeInvalidCall, "call id"},
		{"UnknownRoute", "GET", "/v2/everything", "", "", 404, httpapi.CodeNotFound, "/v2/everything"},
		{"WrongMethod", "PUT", "/v1/tools", "", "", 405, httpapi.CodeMethodNotAllowed, "GET"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := f.send(tc.method, tc.path, tc.body, func(r *http.Request) {
				if tc.contentType != "" {
					r.Header.Set("Content-Type", tc.contentType)
				}
			})
			var body httpapi.ErrorBody
			r.decode(t, &body)
			if r.status != tc.status || body.Error.Code != tc.code || !strings.Contains(body.Error.Message, tc.mention) {
				t.Errorf("got %s; want %d %s mentioning %q", r, tc.status, tc.code, tc.mention)
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}
