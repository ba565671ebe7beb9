package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
)

func runApprovals(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("approvals", "approvals list [--status S] [--tool T] | approve ID | reject ID --reason TEXT [--no-retry] | audit --since TIME", stderr)
	apiURL := stringFlag(fs, "approval-url", "", "the approval service's URL (default: the running 'windlass dev')")
	token := stringFlag(fs, "token", "", "your reviewer bearer token (default: the running 'windlass dev''s)")
	status := stringFlag(fs, "status", "pending", "list: pending, approved, rejected, expired or canceled")
	tool := stringFlag(fs, "tool", "", "list: only this tool's calls")
	reason := stringFlag(fs, "reason", "", "reject: why")
	noRetry := boolFlag(fs, "no-retry", false, "reject: tell the model not to make the call again, with these or other arguments (default: it may try again with changes)")
	since := stringFlag(fs, "since", "", "audit: the entries written since this RFC 3339 time or this long ago (24h); default all kept")
	asJSON := boolFlag(fs, "json", false, "print the API's JSON")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		fs.Usage()
		return &exitError{code: 2, err: errors.New("approvals needs list, approve ID, reject ID or audit")}
	}
	if *apiURL == "" || *token == "" {
		dev, err := readDiscovery()
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("approvals needs --approval-url and --token, or a running `windlass dev`, and %w", err)}
		}
		*apiURL, *token = cmp.Or(*apiURL, dev.ApprovalURL), cmp.Or(*token, dev.ReviewerToken)
	}
	cl := &apiClient{base: strings.TrimSuffix(*apiURL, "/"), token: *token}
	switch pos[0] {
	case "audit":
		from, err := parseSince(*since, time.Now())
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		return exportAudit(ctx, cl, from, stdout)
	case "list":
		q := url.Values{"status": {*status}}
		if *tool != "" {
			q.Set("tool", *tool)
		}
		var out struct {
			Items []heldCall `json:"items"`
		}
		raw, err := cl.do(ctx, "GET", "/v1/approvals?"+q.Encode(), nil, &out)
		if err != nil {
			return err
		}
		if *asJSON {
			_, err = stdout.Write(raw)
			return err
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tTOOL\tSTATUS\tREQUESTER\tEXPIRES IN\tARGUMENTS")
		for _, h := range out.Items {
			left := "-" // decided: no time left to show
			if h.Status == "pending" {
				left = time.Until(h.ExpiresAt).Round(time.Second).String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", h.ID, h.Tool, h.Status, cmp.Or(h.Requester, "-"), left, h.Arguments)
		}
		return tw.Flush()
	case "approve", "reject":
		if len(pos) != 2 {
			return &exitError{code: 2, err: fmt.Errorf("approvals %s needs exactly one call id", pos[0])}
		}
		if pos[0] == "approve" && *noRetry {
			return &exitError{code: 2, err: errors.New("approvals approve: --no-retry is for reject")}
		}
		if pos[0] == "reject" && strings.TrimSpace(*reason) == "" {
			return &exitError{code: 2, err: errors.New("approvals reject ID --reason TEXT: a rejection needs --reason (the caller and the model are told it)")}
		}
		id := url.PathEscape(pos[1])
		var body any = map[string]any{"reason": *reason, "no_retry": *noRetry}
		if pos[0] == "approve" {
			// Approve what we show: fetch the call, print its arguments,
			// and quote their hash.
			var h heldCall
			if _, err := cl.do(ctx, "GET", "/v1/approvals/"+id, nil, &h); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "approving %s: %s %s\n", h.ID, h.Tool, h.Arguments)
			body = map[string]string{"args_hash": h.ArgsHash}
		}
		var h heldCall
		raw, err := cl.do(ctx, "POST", "/v1/approvals/"+id+"/"+pos[0], body, &h)
		if err != nil {
			return err
		}
		if *asJSON {
			_, err = stdout.Write(raw)
			return err
		}
		fmt.Fprintf(stdout, "%s: %s (approvers %v, released %v)\n", h.ID, h.Status, h.Approvers, h.Released)
		return nil
	}
	return &exitError{code: 2, err: fmt.Errorf("approvals: unknown action %q (list, approve, reject, audit)", pos[0])}
}

// parseSince reads --since: an RFC 3339 time, or a duration before now;
// empty is the zero time (every entry kept).
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: use an RFC 3339 time (2026-01-02T15:04:05Z) or a duration before now (24h)", s)
	}
	return t, nil
}

// exportAudit prints the audit entries written since from as JSON lines,
// one entry a line (the fields of approval.AuditEvent), page by page.
func exportAudit(ctx context.Context, cl *apiClient, from time.Time, stdout io.Writer) error {
	q := url.Values{"limit": {"1000"}}
	if !from.IsZero() {
		q.Set("since", from.UTC().Format(time.RFC3339Nano))
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	for {
		var page struct {
			Items     []json.RawMessage `json:"items"`
			NextAfter string            `json:"next_after"`
		}
		if _, err := cl.do(ctx, "GET", "/v1/audit?"+q.Encode(), nil, &page); err != nil {
			return err
		}
		for _, item := range page.Items {
			if err := enc.Encode(item); err != nil {
				return err
			}
		}
		if page.NextAfter == "" {
			return nil
		}
		q.Del("since")
		q.Set("after", page.NextAfter)
	}
}

type heldCall struct {
	ID        string          `json:"id"`
	Tool      string          `json:"tool"`
	Status    string          `json:"status"`
	Requester string          `json:"requester"`
	ExpiresAt time.Time       `json:"expires_at"`
	Arguments json.RawMessage `json:"arguments"`
	ArgsHash  string          `json:"args_hash"`
	Approvers []string        `json:"approvers"`
	Released  bool            `json:"released"`
}

type apiClient struct {
	base, token string
}

func (c *apiClient) do(ctx context.Context, method, path string, body, out any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("approval service at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(raw, &e)
		return raw, &exitError{code: 1, err: fmt.Errorf("%s %s: %d %s: %s", method, path, resp.StatusCode, e.Error.Code, e.Error.Message)}
	}
	return raw, json.Unmarshal(raw, out)
}
