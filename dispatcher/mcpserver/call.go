package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/dispatcher"
)

// Keys of the _meta of a tools/call result.
const (
	// MetaCallID is the fleet's call id of the call, for windlass status,
	// watch or the approval dashboard.
	MetaCallID = "dev.windlass/call_id"
	// MetaErrorCode is the result's error code (invalid_arguments,
	// timeout, rejected, …) when isError is set.
	MetaErrorCode = "dev.windlass/error_code"
)

// callTarget is the tool a tools/call request runs, as last advertised.
type callTarget struct {
	name    string
	hash    string
	gated   bool
	timeout time.Duration
}

// cancelTimeout bounds the cancellation sent to the fleet for a call its
// client canceled.
const cancelTimeout = 5 * time.Second

// call runs one tools/call through the fleet: submit, then follow the
// call's events until its result.
func (h *Handler) call(ctx context.Context, req *mcp.CallToolRequest, t callTarget) (*mcp.CallToolResult, error) {
	args := json.RawMessage(bytes.TrimSpace(req.Params.Arguments))
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	bound := t.timeout + h.cfg.QueueAllowance
	if t.gated {
		bound += h.cfg.ApprovalWait
	}
	deadline := time.Now().Add(bound)
	meta := map[string]string{"via": "mcp"}
	if info := req.ClientInfo(); info != nil && info.Name != "" {
		meta["mcp_client"] = info.Name
	}
	id, err := h.d.Submit(ctx, t.name, args, dispatcher.WithCallID(windlass.NewCallID()), dispatcher.WithSpecHash(t.hash),
		dispatcher.WithDeadline(deadline), dispatcher.WithMetadata(meta))
	if err != nil {
		var ce *windlass.CallError
		if errors.As(err, &ce) {
			return errorResult("", ce.Code, ce.Message), nil
		}
		return nil, fmt.Errorf("mcpserver: call %q: %w", t.name, err)
	}
	log := h.cfg.Logger.With("call_id", id, "tool", t.name)
	log.Debug("mcpserver: call submitted")

	// The wait ends with the client's request, at Close, or a little after
	// the call's deadline (the fleet answers timeout by then).
	waitCtx, cancel := context.WithDeadline(ctx, deadline.Add(2*time.Second))
	defer cancel()
	stop := context.AfterFunc(h.base, cancel)
	defer stop()

	progress := progressSender{session: req.Session, token: req.Params.GetProgressToken(), last: -1}
	if t.gated {
		progress.send(ctx, 0, "waiting for a person's approval")
	}
	var watchErr error
	for ev, err := range h.d.Watch(waitCtx, id) {
		if err != nil {
			watchErr = err
			break
		}
		switch ev.Kind {
		case windlass.EventProgress:
			if ev.Progress != nil {
				progress.send(ctx, ev.Progress.Fraction, ev.Progress.Message)
			}
		case windlass.EventFinished:
			if ev.Result != nil {
				return resultOf(*ev.Result), nil
			}
		}
	}
	switch {
	case ctx.Err() != nil:
		// The client canceled (or went away): cancel the call in the
		// fleet, so that a queued call never runs and a running one stops.
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
		defer ccancel()
		var finished *dispatcher.FinishedError
		if err := h.d.Cancel(cctx, id, "canceled by the MCP client"); err != nil && !errors.As(err, &finished) {
			log.Warn("mcpserver: canceling the call failed", "error", err)
		} else {
			log.Debug("mcpserver: call canceled by its client")
		}
		return nil, ctx.Err()
	case h.base.Err() != nil:
		return errorResult(id, windlass.CodeUnavailable, "The MCP server is shutting down; the call goes on in the fleet (call id "+id+")."), nil
	case waitCtx.Err() != nil:
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
		defer ccancel()
		_ = h.d.Cancel(cctx, id, "no result before the MCP server's bound")
		return errorResult(id, windlass.CodeTimeout, fmt.Sprintf("Tool %q timed out: no result within %s.", t.name, bound.Round(time.Second))), nil
	default:
		return errorResult(id, windlass.CodeUnavailable, fmt.Sprintf("The fleet could not report the result of the call to %q: %v", t.name, watchErr)), nil
	}
}

// resultOf turns a fleet result into an MCP tool result: the content as
// text, isError for a failure (with its code in _meta), and a JSON object
// value as structuredContent.
func resultOf(r windlass.ToolResult) *mcp.CallToolResult {
	if r.IsError {
		return errorResult(r.CallID, r.Code(), r.Content)
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: r.Content}}, Meta: mcp.Meta{MetaCallID: r.CallID}}
	if data := bytes.TrimSpace(r.Data); len(data) > 0 && data[0] == '{' {
		res.StructuredContent = json.RawMessage(data)
	}
	return res
}

// errorResult is a tool error the model can read.
func errorResult(callID string, code windlass.ErrorCode, text string) *mcp.CallToolResult {
	meta := mcp.Meta{MetaErrorCode: string(code)}
	if callID != "" {
		meta[MetaCallID] = callID
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: true, Meta: meta}
}

// progressSender sends a call's progress to the client that asked for it
// with a progress token, only when the fraction advances (MCP requires the
// progress value to increase).
type progressSender struct {
	session *mcp.ServerSession
	token   any
	last    float64
}

func (p *progressSender) send(ctx context.Context, fraction float64, message string) {
	if p.token == nil || p.session == nil || fraction <= p.last {
		return
	}
	p.last = fraction
	_ = p.session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: fraction, Total: 1, Message: message})
}
