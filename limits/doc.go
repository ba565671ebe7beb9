// Package limits keeps one caller from starving the fleet: admission
// limits per tool × key, enforced by every dispatcher replica on counts
// they share, and execution rates per tool, enforced by every worker of
// the tool on one shared rate.
//
// # Keys
//
// Every call has a key ([windlass.ToolCall.Key]): over the HTTP API and
// MCP the name of the API key the request presented, in Go the
// dispatcher's WithKey; a call without one has [DefaultKey]. A key is 1
// to [MaxKeyLength] printable ASCII characters (see [ValidateKey]); it is
// a metric label, so name callers, not requests.
//
// # Admission (the dispatcher, before publishing)
//
// For each tool × key, a [Limit]: a [Rate] (calls a second, minute or
// hour, with a burst) and MaxInFlight, a cap on the key's calls of the
// tool that are queued or running. Each tool also has MaxQueued, a cap on
// its calls of every key together. A call over the key's rate or cap is
// refused rate_limited (the caller's own limit); over the tool's cap, or
// when the calls stream is full (MaxQueuedCalls, enforced by the NATS
// server itself), overloaded. Either way it carries a retry-after, and
// nothing of it is stored: it is not queued, not recorded, not charged
// against a rate.
//
// # A call's slot
//
// A call holds its slot from admission until its answer is stored. The
// dispatcher that admitted it frees it when the answer reaches it. A call
// submitted without waiting for its answer is marked (a header, see
// PROTOCOL.md), and whoever stores its answer frees it too ([Enforcer.FreeCall])
// once the results stream has it: the worker that ran it (or answered it
// timeout, canceled, worker_lost), the approval service that answered it
// rejected, expired or canceled, the dispatcher that canceled it — any of
// them, on any machine, so a slot is not held for a caller that is gone
// (a CLI that submitted the call asynchronously and exited). A second free
// does nothing; the admitting dispatcher frees even a slot freed already,
// because a slot taken without asking (below) is written behind its call,
// and a free from another process may come before it. A slot nobody frees
// does not leak: it lapses a minute after its call's deadline, when no
// worker will run the call any more. Nor does a caller that leaves while
// its admission is asked (its context ends: a client gone, the
// dispatcher's bound on an ask) hold one: an ask not sent yet is not sent,
// and a slot an ask on its way took is freed once it has. A resubmit of an id that holds a
// slot is the same call: admitted without a second slot or a second
// charge against the rate. (A submit that finds its id's slot held with
// no record of the call behind it may be racing another submit of the id
// whose rate is still being charged, or whose caller left: the dispatcher
// waits up to a second for the call's record, then asks again, and only a
// slot still held then is taken for the same call's.)
//
// # Admission without waiting
//
// Asking Redis before every call costs the fleet a fifth to a third of
// its throughput on a small machine (BENCHMARKS.md, "Limits"), so a
// dispatcher asks only when it must. Every answer Redis gives carries the
// caps' counts; while the count a dispatcher last saw (under a second
// old), plus the calls it admitted since, is within a quarter of a cap,
// it admits a call with a random id that it waits for itself (Call, not
// Submit: a submitted call's slot is freed by whoever stores its answer,
// which must find it written) without asking about the caps, and
// records its slot behind it ([Enforcer.Take]: queued to Redis before the
// call is published, so before its result can free it). From a quarter
// of the cap on, and for every call with an id its caller chose, it asks
// first.
//
// A recorded slot waits up to 25 ms before it is written, with the others
// taken meanwhile, and a call that ends within that time (a fast tool's
// round trip) undoes its slot instead of freeing it: neither is written,
// so fast calls cost Redis nothing but one count a batch. A free of a
// slot already written goes at once. A dispatcher that asks writes its
// own waiting slots first, so a cap holds exactly for one dispatcher;
// with several, the calls each other one admitted without asking and has
// not written yet (at most a quarter of the cap) may pass it.
//
// A rate is charged in Redis before its call is admitted
// ([Enforcer.Charge]). A rate that allows at least two calls in 20 ms
// and in a quarter of its burst (100/s with a burst of 8 or more) is
// charged in leases: a dispatcher takes up to that many tokens in one
// round trip (as many as it admitted in the last 20 ms, or as many calls
// as wait for them; one when fewer are left) and hands them out for
// 20 ms; tokens unused by then lapse. A refusal is kept until Redis says
// the next token comes. So the rate holds across dispatchers — every
// token is charged before it is used, and every one charged is handed
// out or lapses — with two prices: a dispatcher whose key's calls stop
// loses its lease's tokens, and calls may start up to 20 ms after their
// token was charged. Any other rate is asked on every call it admits; its
// refusals are kept the same way, so a key flooding a slow rate costs
// Redis an ask per token that comes, not one per call. A lease
// unasked for a minute is forgotten (checked at most once a minute), so a
// dispatcher that serves many keys in turn holds leases only for those
// that called lately.
//
// # Execution rates (the workers)
//
// A tool that calls a rate-limited API declares a rate (the worker's
// WithRate; the registry advertises it). Its workers across the fleet
// start at most that many calls per period, with the burst: a call that
// waits for its turn stays queued, its message kept alive by the
// worker's in-progress acknowledgements, until its turn or its deadline.
// It is never refused or failed for the rate.
//
// # Defaults
//
// With no configuration each key may have [DefaultMaxInFlight] (1,000)
// calls of a tool queued or running, each tool [DefaultMaxQueued]
// (10,000) of all keys, and the calls stream [DefaultMaxQueuedCalls]
// (100,000). The reasoning: an agent backend has a few to a few hundred
// calls of a tool in flight per tenant, so 1,000 never stops a normal
// caller, while a flood (20,000 calls of a slow tool from one key) is
// refused after its first thousand instead of queueing every other
// tenant behind hours of work. Ten keys at their cap fill a tool; a
// hundred thousand small calls are about 50 MB in the stream, well within
// a default JetStream server. There is no default rate: what a tool costs
// is the operator's to say. [Unlimited] turns everything off.
//
// # The limits file
//
// YAML (JSON is YAML too); every field is optional:
//
//	default:            # every key, every tool
//	  rate: 50/s        # N/s, N/m or N/h; none
//	  burst: 100        # default: the rate's N
//	  max_in_flight: 1000
//	keys:               # a key, every tool
//	  batch-jobs: {max_in_flight: 5000}
//	tools:
//	  transfer_funds:
//	    max_queued: 200 # the tool, all keys
//	    default: {rate: 1/s, max_in_flight: 5}
//	    keys:
//	      acme: {rate: 10/s, burst: 20}
//	max_queued: 10000   # each tool, all keys
//	max_queued_calls: 100000
//
// For each field of a key's limit for a tool, the most specific entry
// that sets it wins: tools.T.keys.K, keys.K, tools.T.default, default. A
// cap of 0 inherits; -1 is none. An unknown field, a bad rate or a
// negative cap is refused at start with the entry's path and the rule.
//
// # When Redis is unreachable
//
// Admission limits (rate, in-flight and tool caps) fail open: the call is
// admitted unlimited, the dispatcher logs it and counts it in the
// windlass.dispatcher.limits.unenforced metric. A check that Redis does
// not answer within half a second counts as a failure, and for a second
// after one the dispatcher admits without asking: an outage costs one
// slow call a second, not every call. An outage of the shared
// counts must not stop every tenant's calls, and the calls stream's
// bound, kept by the NATS server, still protects the fleet.
//
// Execution rates fail closed: a call waits queued, asking again with
// backoff, until Redis answers or its deadline passes. A tool declares a
// rate because a third party enforces one; running past it while the
// counts cannot be read would break the very limit the rate exists for.
//
// # Why redis_rate
//
// Rates are github.com/go-redis/redis_rate: GCRA in one Lua script on
// Redis's clock, a well-kept limiter on the Redis the fleet already
// runs, one round trip per charge (AllowN charges a lease) and
// exact across replicas. A NATS
// key-value counter would need a compare-and-swap loop per call, several
// round trips under contention. The caps are not rates but counts of
// calls in flight, which no such library keeps: each is a Redis sorted
// set of call ids scored by when their slot lapses, taken and checked in
// one short script (admitScript) so two replicas cannot both take the
// last slot.
//
// Every script of concurrent calls shares its Redis round trip: the
// enforcer sends them in one pipeline per batch (batch.go), because
// go-redis has no automatic pipelining and redis_rate calls its script
// synchronously; the measured reason is in BENCHMARKS.md, "Limits".
//
// # Redis keys
//
// Under the registry's prefix P ("windlass:" by default), every key of a
// tool T shares the hash tag {T}, so each script touches one Redis
// Cluster slot (redis_rate puts "rate:" before its keys):
//
//	P limits:{T}:in_flight:K      sorted set: K's calls of T holding a slot
//	P limits:{T}:in_flight        sorted set: T's calls of every key ("K id")
//	rate:P limits:{T}:rate:K      K's admission rate for T (redis_rate)
//	rate:P limits:{T}:exec        T's execution rate (redis_rate)
//
// The sets expire when their last slot lapses.
package limits
