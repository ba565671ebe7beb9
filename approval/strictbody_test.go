package approval_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/windlass-dev/windlass/approval"
)

// TestDecisionBodiesAreDecodedStrictly: a decision body that encoding/json
// read one way among several (a case variant of a name matched, the last
// of a name given twice taken, invalid UTF-8 replaced by U+FFFD, a second
// JSON value after the first ignored) is refused 400 bad_request naming
// the field and the rule, in the edited arguments too, and decides
// nothing: the call stays pending and does not run.
func TestDecisionBodiesAreDecodedStrictly(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	cases := []struct {
		name, decision, body, mention string // {hash} in body: the held call's args_hash
	}{
		{"CaseVariantOfArgsHash", "approve", `{"ARGS_HASH":"{hash}"}`,
			`unknown field "ARGS_HASH" (field names are case-sensitive: did you mean "args_hash"?)`},
		{"DuplicateArgsHash", "approve", `{"args_hash":"not-what-alice-saw","args_hash":"{hash}"}`, `duplicate field "args_hash"`},
		{"DuplicateInEditedArguments", "approve", `{"args_hash":"{hash}","arguments":{"to":"bob","amount":1,"to":"mallory"}}`,
			`duplicate field "arguments/to"`},
		{"InvalidUTF8InEditedArguments", "approve", "{\"args_hash\":\"{hash}\",\"arguments\":{\"to\":\"bo\xffb\",\"amount\":1}}",
			`invalid UTF-8 in field "arguments/to"`},
		{"TrailingData", "approve", `{"args_hash":"{hash}"} {"arguments":{"to":"mallory","amount":1}}`, `trailing data after the JSON value`},
		{"CaseVariantOfReason", "reject", `{"Reason":"looks like fraud"}`, `unknown field "Reason"`},
		{"DuplicateNoRetry", "reject", `{"reason":"r","no_retry":false,"no_retry":true}`, `duplicate field "no_retry"`},
		{"InvalidUTF8InReason", "reject", "{\"reason\":\"fra\xffud\"}", `invalid UTF-8 in field "reason"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := f.submit(payArgs{To: "bob", Amount: 1})
			h := f.held(id)
			status, code, msg := f.postRaw(t, "/v1/approvals/"+id+"/"+tc.decision, "alice", strings.ReplaceAll(tc.body, "{hash}", h.ArgsHash))
			if status != http.StatusBadRequest || code != "bad_request" || !strings.HasPrefix(msg, "body: "+tc.mention) {
				t.Errorf("%s = %d %s %q; want 400 bad_request: body: %s", tc.decision, status, code, msg, tc.mention)
			}
			if got := f.held(id); got.Status != approval.StatusPending || len(got.Approvers) > 0 {
				t.Errorf("after the refused %s the call is %s, approvers %v; want it pending, undecided", tc.decision, got.Status, got.Approvers)
			}
		})
	}
	if n := f.runs.Load(); n != 0 {
		t.Errorf("pay ran %d times", n)
	}
}

// postRaw POSTs body, as it is, as reviewer, and reads the error's code
// and message.
func (f *fleet) postRaw(t *testing.T, path, reviewer, body string) (status int, code, msg string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "POST", f.api.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+f.tokens[reviewer])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	_ = json.Unmarshal(b, &e)
	return resp.StatusCode, e.Error.Code, e.Error.Message
}
