// Package bench measures the fleet beside raw NATS on the same server in the
// same run, so that its figures are ratios a reader can trust on a noisy
// machine. It is the one implementation behind `windlass bench` and the Go
// benchmarks of integration/.
//
// Four paths are measured per scenario, one after the other:
//
//   - fleet: [dispatcher.Dispatcher.Call] of a bench tool served by a
//     worker, with every guarantee of RELIABILITY.md in force (the call
//     stored durably before the caller waits, the result stored before the
//     call is acked);
//   - raw JetStream, stored as the fleet stores: the call on a subject of
//     its own, the answer stored in a second stream and the call acked when
//     that store is acknowledged (see [Env.RawStored]);
//   - raw JetStream: the call published durably (with a message id), a
//     durable pull consumer, the answer published back on one shared core
//     subscription, then the message acked — the least a durable queue can
//     do;
//   - raw request/reply: core NATS request and a queue-subscribed responder,
//     nothing stored.
//
// A scenario is a tool (bench_noop answers at once, bench_sleep after a
// fixed sleep; the raw responders do the same work), a payload size and a
// load: a closed loop of a fixed number of callers each calling in a loop,
// or an open loop at a fixed rate whose latencies are measured from each
// call's intended send time, so a stall shows in the latencies instead of
// silently lowering the offered load (no coordinated omission).
//
// The measured dispatcher has the admission limits of Options.Limits (the
// protective defaults unless set); [Env.FleetLimited] measures the fleet
// through another dispatcher with other limits, and [MeasureInterleaved]
// alternates paths so that their ratios are fair on a noisy machine.
//
// Latencies are kept as sorted samples, so percentiles are exact.
package bench
