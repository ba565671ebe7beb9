package approval_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
)

// TestBrowserRejectDoNotRetry: the dashboard's "Reject — do not retry"
// button rejects with no_retry, and the caller's result tells the model
// not to make the call again.
func TestBrowserRejectDoNotRetry(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "mallory", Amount: 900})
	f.held(id)

	p := newBrowserPage(t, f.api.URL)
	p.open()
	p.signIn(f.tokens["bob"])
	row := browserRow(id)
	p.do("reject, do not retry",
		chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.Click(chromedp.CSS(row+" button.reject")),
		chromedp.WaitVisible(chromedp.CSS(row+" input.reason")),
		chromedp.SendKeys(chromedp.CSS(row+" input.reason"), "duplicate payment"),
		chromedp.Click(chromedp.CSS(row+" button.no-retry")))
	r := f.wait(id)
	if r.Code() != windlass.CodeRejected || !strings.Contains(r.Content, "do not make this call again") || !strings.Contains(r.Content, "duplicate payment") || f.runs.Load() != 0 {
		t.Errorf("result = %+v (runs %d), want rejected, do not retry", r, f.runs.Load())
	}
	if h, err := f.svc.Get(t.Context(), id); err != nil || !h.NoRetry || h.RejectedBy != "bob" {
		t.Errorf("held call = %+v, %v; want rejected by bob, no_retry", h, err)
	}
	p.do("the row leaves the pending list", chromedp.WaitNotPresent(chromedp.CSS(row)))
	p.checkClean()
}

// TestBrowserConsoleShowsWhoMayDecideAndRejectsDoNotRetry: the console of
// a call held under reviewer groups says who may decide it, and its
// "Reject — do not retry" button rejects the call with no_retry, so the
// model is told not to make it again.
func TestBrowserConsoleShowsWhoMayDecideAndRejectsDoNotRetry(t *testing.T) {
	t.Parallel()
	f := newGroupFleet(t, map[string]approval.ToolPolicy{"pay": {ReviewerGroups: []string{"finance"}}},
		map[string][]string{"bob": {"finance"}})
	id := f.submit(payArgs{To: "mallory", Amount: 900})
	f.held(id)

	p := newBrowserPage(t, f.api.URL)
	p.open()
	p.signIn(f.tokens["bob"])
	p.openConsole(id)
	details := browserEval[[]string](p, `[...document.querySelectorAll("#c-details dt, #c-details dd")].map(e => e.textContent)`)
	if i := slices.Index(details, "Who may decide"); i < 0 || i+1 >= len(details) || details[i+1] != "reviewers in finance" {
		t.Errorf("details = %q; want \"Who may decide\": \"reviewers in finance\"", details)
	}
	p.do("reject from the console, do not retry",
		chromedp.SendKeys(chromedp.ID("c-reason"), "duplicate payment"),
		chromedp.Click(chromedp.ID("c-reject-noretry")))
	r := f.wait(id)
	if r.Code() != windlass.CodeRejected || !strings.Contains(r.Content, "do not make this call again") || f.runs.Load() != 0 {
		t.Errorf("result = %+v (runs %d), want rejected, do not retry", r, f.runs.Load())
	}
	if h, err := f.svc.Get(t.Context(), id); err != nil || !h.NoRetry || h.RejectedBy != "bob" {
		t.Errorf("held call = %+v, %v; want rejected by bob, no_retry", h, err)
	}
	p.shot("rejected-do-not-retry")
	p.checkClean()
}
