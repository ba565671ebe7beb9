// Package dispatcher is the caller's side of the fleet: an agent backend
// lists the fleet's tools in its model's format, and hands the model's tool
// calls to a [Dispatcher], which checks them, publishes them onto the NATS
// subject of the tool and returns the result.
//
// A Dispatcher keeps an in-memory view of the registry (it never asks Redis
// on the path of a call) and one core NATS subscription for the results of
// its own calls ("windlass.result.<instance>.*"): never one subscription per
// call, and never other instances' results. Results are also kept in the
// results stream, so [Dispatcher.Wait] and [Dispatcher.Result] work for a
// call submitted on any instance — agent backends behind a load balancer.
//
// Before publishing, a call is refused with a result error of code
// unknown_tool, no_worker (unless [AllowNoWorker]), invalid_arguments (naming
// the field and the rule) or payload_too_large (arguments over
// Config.PayloadLimit). Arguments that make the call's message larger than
// Config.InlineLimit travel by reference, through the fleet's object
// store, and so does a large result: every method returns the whole value,
// fetched and checked against its SHA-256 (PROTOCOL.md, "Payloads by
// reference"). Calls of a tool that requires approval go to the approval
// subject instead of the tool's.
//
// The calls stream is bounded (Config.Limits.MaxQueuedCalls, 100,000 calls queued
// or running by default): a call the NATS server refuses because the
// stream is full is answered overloaded at once, with a retry-after
// ([windlass.CallError.RetryAfter]), never retried until its deadline nor
// answered unavailable; nothing of it is stored. A dispatcher given a
// bound applies it to an existing stream too, so give every dispatcher of
// a fleet the same one (PROTOCOL.md, "Bounded queue").
//
// Every wait is bounded: by the call's deadline ([WithTimeout],
// [WithDeadline], or the context's deadline), else by the tool's timeout
// plus Config.QueueAllowance (plus Config.ApprovalWait for a gated tool,
// whose call first waits for a human; the approval service holds it at most
// until that deadline and restarts the execution deadline at release).
//
// # Metrics
//
// Every call is counted once in windlass.dispatcher.calls (with its
// duration and, meanwhile, in windlass.dispatcher.calls.in_flight),
// whichever way it came — [Dispatcher.Call], or [Dispatcher.Submit] as the
// HTTP API and the MCP server use — by the instance that published it,
// with its outcome when it finishes. Every result of a call goes to the
// instance that published it, so that instance counts the result when it
// arrives, whoever reads it: a submitted call whose result another
// instance's [Dispatcher.Wait] or [Dispatcher.Result] returns, or that
// nobody ever reads, is still counted, once, where it was published. A
// Call also finishes with the timeout or cancellation its caller saw; a
// submitted call with no result a minute past its deadline counts as a
// timeout (a late result then counts nothing). A call refused before
// publishing counts with its code and no duration; a resubmit of an id
// already accepted is not counted again. A call whose instance closes or
// dies before its result arrives leaves the in-flight count uncounted.
package dispatcher
