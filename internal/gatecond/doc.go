// Package gatecond compiles and evaluates a tool's approval condition: a
// CEL expression over the call's arguments (the variable args, the
// decoded JSON object) that says whether a call needs a human's approval
// (see windlass.Spec.ApprovalCondition).
//
// An expression is checked once, at registration ([Compile]): it must
// parse, type-check to bool and not cost more than [CostLimit] on every
// input; an [*Error] says where (line:column) and why not. A compiled
// [Condition] is safe for concurrent use, and [Cached] compiles each
// expression once per process. Evaluation is bounded by [CostLimit]: an
// expression or arguments that would cost more stop with an error, which
// callers read as "needs approval" (fail closed).
package gatecond
