package approval

import (
	"fmt"
	"strings"
	"time"
)

// RejectedMessage is the text a rejected call's result carries to the
// model (its content and error message, the same through the dispatcher,
// MCP and the HTTP API): that a person declined this exact call, who, the
// reason, and whether the model may try again with changes (a plain
// rejection) or must not retry at all (HeldCall.NoRetry). The one place
// this wording is built.
func RejectedMessage(h *HeldCall) string {
	var b strings.Builder
	fmt.Fprintf(&b, "A person reviewed this exact call to %q and declined it; it was not run. Rejected by %s. ", h.Tool, h.RejectedBy)
	if strings.TrimSpace(h.Reason) == "" {
		b.WriteString("Reason: none given. ")
	} else {
		fmt.Fprintf(&b, "Reason: %q. ", h.Reason)
	}
	if h.NoRetry {
		b.WriteString("The reviewer said not to retry: do not make this call again, with these or other arguments; tell the user it was declined and why.")
	} else {
		b.WriteString("Do not repeat the same call unchanged. You may try again only with changes that address the reason; a new call waits for a person's approval again.")
	}
	return b.String()
}

// ExpiredMessage is the text an expired call's result carries to the
// model: nobody decided within the approval window, so the call did not
// run, though no person declined it; a retry waits for approval again.
// The one place this wording is built.
func ExpiredMessage(h *HeldCall) string {
	return fmt.Sprintf("Nobody decided on this call to %q within its approval window (it expired at %s); it was not run. No person declined it. "+
		"If it is still needed you may make it again once, and it will wait for a person's approval again; tell the user it needs a reviewer's approval.",
		h.Tool, h.ExpiresAt.UTC().Format(time.RFC3339))
}
