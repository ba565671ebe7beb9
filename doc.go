// Package windlass is the core tool model of the Windlass fleet: one Tool
// abstraction for every capability an AI agent can call, and the wire types
// that carry calls and results between processes.
//
// A tool is described by a [Spec] (name, model-facing description, JSON
// Schema of its arguments, timeout, whether a human must approve it) and
// executed through [Tool.Call]. Most tools are typed Go functions wrapped by
// [Func], which derives the argument schema from the input struct; [NewTool]
// wraps a spec and a function over raw JSON for dynamic tools and proxies.
//
// [Invoke] runs a tool for a model: it never fails, turning errors, timeouts,
// panics and cancellation into a [ToolResult] with IsError set so the model can
// recover. [Run] is the direct-use counterpart that returns an error instead.
// [Render] gives every tool's output the same text form.
//
// [Spec.Schema] renders a tool definition in the format a provider expects
// (OpenAI, Anthropic or Gemini). [ToolCall] and [ToolResult] are the JSON wire
// types documented in PROTOCOL.md at the repository root.
//
// This package does no network I/O; the registry, worker, dispatcher and
// approval packages build the distributed fleet on top of it.
package windlass
