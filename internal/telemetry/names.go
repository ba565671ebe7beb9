// Package telemetry is the one place that names the fleet's OpenTelemetry
// instrumentation: the tracer and meter name, span names, attribute keys,
// the instruments, the NATS header carrier of the W3C trace context, and a
// slog handler that puts the trace of a call on its log lines.
//
// The fleet uses the global providers (otel.GetTracerProvider,
// otel.GetMeterProvider) unless a component's Config injects its own. While
// no SDK is installed, which is the default, every helper here reports
// tracing and metrics off, and the call paths skip them entirely: no span,
// no attribute, no header, no allocation.
package telemetry

import "go.opentelemetry.io/otel/attribute"

// ScopeName is the instrumentation scope of every tracer and meter of the
// fleet.
const ScopeName = "github.com/windlass-dev/windlass"

// Attribute keys, per the OpenTelemetry semantic conventions for messaging
// and for generative-AI tool execution, and the fleet's own.
const (
	MessagingSystem          = attribute.Key("messaging.system")
	MessagingDestinationName = attribute.Key("messaging.destination.name")
	// MessagingDestinationTemplate is the low-cardinality form of a
	// destination whose name holds a per-message token.
	MessagingDestinationTemplate = attribute.Key("messaging.destination.template")
	MessagingMessageID           = attribute.Key("messaging.message.id")
	MessagingOperationType       = attribute.Key("messaging.operation.type")
	MessagingOperationName       = attribute.Key("messaging.operation.name")
	MessagingConsumerGroup       = attribute.Key("messaging.consumer.group.name")
	MessagingDeliveryCount       = attribute.Key("messaging.message.delivery_count") // windlass: JetStream's delivery count
	GenAIOperationName           = attribute.Key("gen_ai.operation.name")
	GenAIToolName                = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID              = attribute.Key("gen_ai.tool.call.id")
	ErrorType                    = attribute.Key("error.type")

	// Tool names the tool on metrics.
	Tool = attribute.Key("tool")
	// Key is the caller's key (package limits) on metrics and spans.
	Key = attribute.Key("key")
	// Outcome is "ok" or the result's error code on metrics.
	Outcome = attribute.Key("outcome")
	// Decision is how a held call ended: approved, rejected, expired,
	// canceled.
	Decision = attribute.Key("decision")
	// Reason is why a worker refused a message (no_release, bad_signature,
	// reused, …): release.Reason; or which limit refused a call (rate,
	// in_flight, tool_queue, calls_stream): limits.Reason.
	Reason = attribute.Key("reason")
	// CallKey is the call's key (package limits) on its spans.
	CallKey = attribute.Key("windlass.call.key")
	// CallID is the call id on the approval hold's span.
	CallID = attribute.Key("windlass.call.id")
)

// Attribute values.
const (
	SystemNATS         = "nats"
	OperationSend      = "send"
	OperationProcess   = "process"
	OperationExecute   = "execute_tool"
	OutcomeOK          = "ok"
	OperationHoldName  = "approval_hold"
	ConsumerGroupTools = "tool-" // prefix; the consumer group is layout.ConsumerName(tool)
)

// SendSpanName is the producer span's name: "send <subject>".
func SendSpanName(subject string) string { return OperationSend + " " + subject }

// ProcessSpanName is the consumer span's name: "process <subject>".
func ProcessSpanName(subject string) string { return OperationProcess + " " + subject }

// ExecuteSpanName is the tool execution span's name: "execute_tool <tool>".
func ExecuteSpanName(tool string) string { return OperationExecute + " " + tool }

// HoldSpanName is the approval hold's span name: "approval_hold <tool>".
func HoldSpanName(tool string) string { return OperationHoldName + " " + tool }
