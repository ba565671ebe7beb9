package windlass_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/windlass-dev/windlass"
)

type addArgs struct {
	A int `json:"a"`
	B int `json:"b"`
}

// A typed function becomes a tool; its schema comes from the input struct.
func ExampleFunc() {
	add := windlass.MustFunc("add", func(ctx context.Context, in addArgs) (int, error) {
		return in.A + in.B, nil
	}, windlass.WithDoc("Add two numbers."))

	schema, _ := add.Spec().Schema(windlass.StyleOpenAI)
	fmt.Println(schema["function"].(map[string]any)["name"])

	result, err := windlass.Run(context.Background(), add, addArgs{A: 1, B: 2})
	if err != nil {
		panic(err)
	}
	fmt.Println(result.Content)
	// Output:
	// add
	// 3
}

func ExampleSpec_Schema() {
	ping := windlass.MustFunc("ping", func(ctx context.Context, _ struct{}) (string, error) {
		return "pong", nil
	}, windlass.WithDoc("Ping."))

	schema, _ := ping.Spec().Schema(windlass.StyleAnthropic)
	fmt.Println(schema["name"])
	// Output: ping
}

type echoArgs struct {
	Text string `json:"text"`
}

// Invoke runs a model's call and never fails: errors come back as results.
func ExampleInvoke() {
	echo := windlass.MustFunc("echo", func(ctx context.Context, in echoArgs) (string, error) {
		return in.Text, nil
	}, windlass.WithDoc("Echo text."))

	result := windlass.Invoke(context.Background(), echo, windlass.ToolCall{
		ID: "call_1", Name: "echo", Arguments: json.RawMessage(`{"text":"hi"}`),
	})
	fmt.Println(result.Content)

	bad := windlass.Invoke(context.Background(), echo, windlass.ToolCall{
		ID: "call_2", Name: "echo", Arguments: json.RawMessage(`{"text":42}`),
	})
	fmt.Println(bad.IsError, bad.Error.Code)
	// Output:
	// hi
	// true invalid_arguments
}

func ExampleRender() {
	fmt.Println(windlass.Render(map[string]int{"a": 1}))
	fmt.Println(windlass.Render("plain"))
	// Output:
	// {"a":1}
	// plain
}

// A tool that is not a Go function: a spec with a hand-written schema and a
// body over raw JSON (a proxy, a dynamically generated tool).
func ExampleNewTool() {
	search, err := windlass.NewTool(windlass.Spec{
		Name:        "search",
		Description: "Search the product catalogue.",
		Parameters: map[string]any{
			"type":       "object",
			"properties": map[string]any{"q": map[string]any{"type": "string"}},
			"required":   []string{"q"},
		},
	}, func(ctx context.Context, args json.RawMessage) (any, error) {
		var in struct{ Q string }
		if err := json.Unmarshal(args, &in); err != nil {
			return nil, err
		}
		return []string{in.Q + " (hardcover)", in.Q + " (paperback)"}, nil
	})
	if err != nil {
		panic(err)
	}
	result, _ := windlass.Run(context.Background(), search, map[string]string{"q": "Dune"})
	fmt.Println(result.Content)
	// Output: ["Dune (hardcover)","Dune (paperback)"]
}

// A tool reads its call's id from its context to make side effects idempotent.
func ExampleCallInfoFromContext() {
	charge := windlass.MustFunc("charge", func(ctx context.Context, _ struct{}) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		return fmt.Sprintf("charged once for %s (attempt %d)", info.ID, info.Attempt), nil
	})
	result := windlass.Invoke(context.Background(), charge, windlass.ToolCall{ID: "call_42", Attempt: 2})
	fmt.Println(result.Content)
	// Output: charged once for call_42 (attempt 2)
}
