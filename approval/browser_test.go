package approval_test

// Browser tests of the reference dashboard: a real headless Chromium, driven
// by chromedp, against a whole gated fleet. They need Chromium installed
// (`apt-get install -y chromium`, or `make test`, which installs it) and fail
// without it: they are never skipped.
//
// Set WINDLASS_DASHBOARD_SCREENSHOT=/tmp/dashboard.png to keep a screenshot
// of the page with pending calls.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/dispatcher"
)

// browserStepTimeout bounds every single browser step and every wait.
const browserStepTimeout = 15 * time.Second

// browserChromium returns the path of Chromium, or fails the test with the
// command that installs it.
func browserChromium(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	t.Fatal("the dashboard's browser tests need Chromium, and there is none (no `chromium` on PATH, no /usr/bin/chromium): " +
		"install Debian's with `apt-get install -y chromium` (as root, or with sudo), or run `make test`, which installs it")
	return ""
}

// browserLog keeps the last 64 KiB of the browser's output and the page's
// console, shown when a test fails.
type browserLog struct {
	mu  sync.Mutex
	buf []byte
}

func (l *browserLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.buf = append(l.buf, p...)
	if over := len(l.buf) - 64<<10; over > 0 {
		l.buf = l.buf[over:]
	}
	return len(p), nil
}

func (l *browserLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.buf)
}

// browserPage is one tab of a headless Chromium of its own.
type browserPage struct {
	t       *testing.T
	ctx     context.Context // the tab's chromedp context: bound each use with step
	url     string
	console browserLog // the page's console: exceptions, CSP reports, network errors
	output  browserLog // Chromium's own stdout and stderr

	mu       sync.Mutex
	problems []string // uncaught exceptions and security (CSP, Trusted Types) reports
}

// newBrowserPage starts headless Chromium with a fresh user-data dir and
// opens one tab on nothing yet. The browser is closed, its goroutines
// waited for and its directory removed in t.Cleanup.
func newBrowserPage(t *testing.T, url string) *browserPage {
	t.Helper()
	exe := browserChromium(t)
	dir, err := os.MkdirTemp("", "windlass-dashboard-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	p := &browserPage{t: t, url: url}
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe),
		chromedp.UserDataDir(dir),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1360, 900),
		chromedp.CombinedOutput(&p.output),
	)
	ctx, cancel := chromedp.NewContext(allocCtx)
	p.ctx = ctx
	var consoleDone sync.WaitGroup
	closeBrowser := func() {
		// Close gracefully, bounded; then cancel, which kills a browser that
		// did not stop, and wait for the process and chromedp's goroutines.
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		if err := chromedp.Cancel(cctx); err != nil && !errors.Is(err, context.Canceled) {
			t.Logf("closing Chromium: %v", err)
		}
		ccancel()
		cancel()
		allocCancel()
		consoleDone.Wait()
		for i := 0; ; i++ { // the browser's children may still write in it for a moment
			if err := os.RemoveAll(dir); err == nil || i == 50 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// The first Run starts the browser and ties it to the context it is
	// given, so it gets the tab's own context, bounded here by a timer.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err = <-started:
	case <-time.After(60 * time.Second):
		cancel()
		<-started
		err = errors.New("Chromium did not start within 60s")
	}
	if err != nil {
		closeBrowser()
		t.Fatalf("starting %s: %v\nChromium's output:\n%s", exe, err, p.output.String())
	}
	messages := chromedp.Console(ctx)
	consoleDone.Go(func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			fmt.Fprintf(&p.console, "%s %s (%s:%d)\n", m.Type, m.Text, m.URL, m.Line)
			if m.IsException() || m.Source == "security" || strings.Contains(m.Text, "Content Security Policy") || strings.Contains(m.Text, "Trusted") || strings.Contains(m.Text, "Refused to") {
				p.mu.Lock()
				p.problems = append(p.problems, m.String())
				p.mu.Unlock()
			}
		}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the page's console:\n%s\nChromium's output (tail):\n%s", p.console.String(), p.output.String())
		}
		closeBrowser()
	})
	return p
}

// do runs browser actions within browserStepTimeout.
func (p *browserPage) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserStepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatalf("browser: %s: %v\npage text:\n%s", what, err, p.pageText())
	}
}

// eval evaluates a JavaScript expression in the page within browserStepTimeout.
func browserEval[T any](p *browserPage, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserStepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("browser: evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS waits, within browserStepTimeout, until expr is true in the page.
// (chromedp's Poll compiles its predicate with new Function, which the
// page's CSP forbids; an evaluation from the test is not bound by it.)
func (p *browserPage) waitJS(what, expr string) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserStepTimeout)
	defer cancel()
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if ctx.Err() != nil {
			p.t.Fatalf("browser: waiting for %s (%s): %v\npage text:\n%s", what, expr, cmpErr(err, ctx.Err()), p.pageText())
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// text returns the textContent of the first element matching the CSS selector.
func (p *browserPage) text(sel string) string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, browserStepTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
	if err != nil {
		p.t.Fatalf("browser: text of %s: %v\npage text:\n%s", sel, err, p.pageText())
	}
	return s
}

// pageText is the visible text of the page, for failure messages.
func (p *browserPage) pageText() string {
	ctx, cancel := context.WithTimeout(p.ctx, 2*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return fmt.Sprintf("(unavailable: %v)", err)
	}
	return s
}

// open loads the dashboard and waits for its token form.
func (p *browserPage) open() {
	p.t.Helper()
	p.do("open the dashboard", chromedp.Navigate(p.url+"/"), chromedp.WaitVisible(chromedp.ID("token")))
}

// signIn enters a reviewer token in the page's form.
func (p *browserPage) signIn(token string) {
	p.t.Helper()
	p.do("enter the reviewer token",
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("save-token")))
}

// checkClean fails the test for any uncaught exception or security report
// (a CSP or Trusted Types violation) of the page.
func (p *browserPage) checkClean() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range p.problems {
		p.t.Errorf("the page reported: %s", m)
	}
}

// screenshot saves the whole page as a PNG where WINDLASS_DASHBOARD_SCREENSHOT says.
func (p *browserPage) screenshot() {
	p.t.Helper()
	path := os.Getenv("WINDLASS_DASHBOARD_SCREENSHOT")
	if path == "" {
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, browserStepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.t.Logf("screenshot of the dashboard: %s", path)
}

// browserRow is the CSS selector of a call's row.
func browserRow(id string) string { return `#calls-body tr[data-call-id=` + browserJS(id) + `]` }

// browserJS quotes s as a JavaScript (and CSS) string literal.
func browserJS(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// browserPretty is v as the page must show it: JSON indented by two spaces,
// with no HTML escaping.
func browserPretty(t *testing.T, v any) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func TestBrowserApproveRunsTheCall(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	// Arguments that would run script if the page rendered them as HTML.
	args := payArgs{To: `<img src=x onerror="document.title='pwned'"></pre></td><b>bob</b> & co`, Amount: 12.5}
	id := f.submit(args, dispatcher.WithMetadata(map[string]string{"requester": "agent-7"}))
	f.held(id)
	// A number JSON.parse would round (2^53 + 1): the page must show it as sent.
	big, err := f.d.Submit(t.Context(), "pay", json.RawMessage(`{"to":"carol","amount":9007199254740993}`))
	if err != nil {
		t.Fatal(err)
	}
	f.held(big)

	p := newBrowserPage(t, f.api.URL)
	p.open()
	tok := f.tokens["alice"]
	p.signIn(tok)
	row := browserRow(id)
	p.do("wait for the rows of the calls", chromedp.WaitVisible(chromedp.CSS(row)), chromedp.WaitVisible(chromedp.CSS(browserRow(big))))

	if got := p.text(row + " .tool-name"); got != "pay" {
		t.Errorf("tool = %q, want pay", got)
	}
	if got, want := p.text(row+" pre.args"), browserPretty(t, args); got != want {
		t.Errorf("arguments shown:\n%s\nwant exactly:\n%s", got, want)
	}
	if got, want := p.text(browserRow(big)+" pre.args"), "{\n  \"to\": \"carol\",\n  \"amount\": 9007199254740993\n}"; got != want {
		t.Errorf("arguments with a big number shown:\n%s\nwant exactly:\n%s", got, want)
	}
	if got := p.text(row + " td.requester"); got != "agent-7" {
		t.Errorf("requester = %q, want agent-7", got)
	}
	if got := p.text(row + " .countdown"); !regexp.MustCompile(`^(59m \d\ds|1h 00m) left$`).MatchString(got) {
		t.Errorf("time left = %q, want about an hour (the default window)", got)
	}
	// The countdown counts down.
	first := p.text(row + " .countdown")
	p.waitJS("the countdown to move", `document.querySelector(`+browserJS(row+" .countdown")+`).textContent !== `+browserJS(first))
	// The data stayed text: no element came out of the arguments.
	if n := browserEval[int](p, `document.querySelectorAll("#calls-body img, #calls-body b").length`); n != 0 {
		t.Errorf("%d elements were made from the arguments' text", n)
	}
	if title := browserEval[string](p, `document.title`); strings.Contains(title, "pwned") {
		t.Errorf("script from the arguments ran: title %q", title)
	}
	// The token is in session storage and the Authorization header only.
	if got := browserEval[string](p, `sessionStorage.getItem("windlass.approval.token") || ""`); got != tok {
		t.Errorf("session storage token = %q, want the token entered", got)
	}
	if c := browserEval[string](p, `document.cookie`); c != "" {
		t.Errorf("cookies = %q, want none", c)
	}
	if u := browserEval[string](p, `location.href`); strings.Contains(u, tok) {
		t.Errorf("the token is in the URL %s", u)
	}
	if v := browserEval[string](p, `document.getElementById("token").value`); v != "" {
		t.Errorf("the token input still holds %q after use", v)
	}
	p.screenshot()

	p.do("approve", chromedp.Click(chromedp.CSS(row+" button.approve")))
	ctx, cancel := context.WithTimeout(t.Context(), browserStepTimeout)
	defer cancel()
	r, err := f.d.Wait(ctx, id)
	if err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if want := fmt.Sprintf("paid 12.50 to %s", args.To); r.IsError || r.Content != want {
		t.Fatalf("result = %+v, want %q", r, want)
	}
	p.do("the row leaves the pending list", chromedp.WaitNotPresent(chromedp.CSS(row)))
	if got := p.text("#notice"); !strings.Contains(got, "Approved pay call "+id) {
		t.Errorf("notice = %q", got)
	}
	if n := f.runs.Load(); n != 1 {
		t.Errorf("runs = %d, want 1", n)
	}
	if h, _ := f.svc.Get(t.Context(), id); h == nil || h.Status != approval.StatusApproved || strings.Join(h.Approvers, ",") != "alice" {
		t.Errorf("held call = %+v, want approved by alice", h)
	}
	p.do("the other call is still pending", chromedp.WaitVisible(chromedp.CSS(browserRow(big))))

	// The approved tab shows the decision.
	p.do("open the approved tab", chromedp.Click(chromedp.CSS(`button.tab[data-status="approved"]`)),
		chromedp.WaitVisible(chromedp.CSS(row+`[data-status="approved"]`)))
	if got := p.text(row + " .decided-by"); got != "Approved by alice" {
		t.Errorf("decided by = %q", got)
	}
	p.checkClean()
}

func TestBrowserWrongTokenDecidesNothing(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "bob", Amount: 3})
	f.held(id)

	p := newBrowserPage(t, f.api.URL)
	p.open()
	p.signIn("wlr_not-a-reviewer-token")
	p.do("the auth error shows", chromedp.WaitVisible(chromedp.ID("auth-error")))
	if got := p.text("#auth-error"); !strings.Contains(got, "401") || !strings.Contains(got, "did not accept") {
		t.Errorf("auth error = %q", got)
	}
	if n := browserEval[int](p, `document.querySelectorAll("#calls-body tr").length`); n != 0 {
		t.Errorf("%d rows shown for a wrong token", n)
	}
	if browserEval[bool](p, `!document.getElementById("queue").hidden`) {
		t.Error("the list is shown for a wrong token")
	}
	if got := browserEval[string](p, `sessionStorage.getItem("windlass.approval.token") || ""`); got != "" {
		t.Errorf("the refused token stays in session storage: %q", got)
	}
	// Beyond a refresh period, nothing was decided.
	time.Sleep(2500 * time.Millisecond)
	if h := f.held(id); h.Status != approval.StatusPending || len(h.Approvers) != 0 || f.runs.Load() != 0 {
		t.Errorf("after a wrong token: %+v (runs %d)", h, f.runs.Load())
	}
	audit, _ := f.svc.Audit(t.Context(), approval.AuditFilter{Limit: 100})
	if len(audit) != 1 || audit[0].Event != "requested" {
		t.Errorf("audit = %+v, want only the request", audit)
	}

	// A valid token then shows the call, and a rejection with a reason
	// reaches the caller.
	p.signIn(f.tokens["bob"])
	row := browserRow(id)
	p.do("reject with a reason",
		chromedp.WaitVisible(chromedp.CSS(row)),
		chromedp.Click(chromedp.CSS(row+" button.reject")),
		chromedp.WaitVisible(chromedp.CSS(row+" input.reason")),
		chromedp.SendKeys(chromedp.CSS(row+" input.reason"), "wrong account"),
		chromedp.Click(chromedp.CSS(row+" button.confirm-reject")))
	r := f.wait(id)
	if r.Code() != windlass.CodeRejected || !strings.Contains(r.Content, "bob") || !strings.Contains(r.Content, "wrong account") || f.runs.Load() != 0 {
		t.Errorf("result = %+v (runs %d)", r, f.runs.Load())
	}
	p.do("the row leaves the pending list", chromedp.WaitNotPresent(chromedp.CSS(row)))
	p.checkClean()
}

func TestBrowserShowsTheFirstDecision(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	id := f.submit(payArgs{To: "dave", Amount: 7})
	h := f.held(id)

	p := newBrowserPage(t, f.api.URL)
	p.open()
	p.signIn(f.tokens["alice"])
	row := browserRow(id)
	p.do("wait for the row", chromedp.WaitVisible(chromedp.CSS(row)))
	// Right after a refresh, the next is about 2s away: carol rejects
	// through the API meanwhile, and alice's click on approve comes second.
	loads := browserEval[string](p, `document.body.dataset.loads || "0"`)
	p.waitJS("a refresh", `(document.body.dataset.loads || "0") !== `+browserJS(loads))
	if code, body := f.do("POST", "/v1/approvals/"+id+"/reject", "carol", map[string]any{"reason": "duplicate payment"}); code != http.StatusOK {
		t.Fatalf("reject = %d %v", code, body)
	}
	p.do("approve after carol rejected", chromedp.Click(chromedp.CSS(row+" button.approve")), chromedp.WaitVisible(chromedp.ID("error")))
	got := p.text("#error-text")
	for _, want := range []string{"already rejected by carol", "duplicate payment", "first decision stands"} {
		if !strings.Contains(got, want) {
			t.Errorf("error = %q, want it to say %q", got, want)
		}
	}
	if s := browserEval[string](p, `document.getElementById("error").dataset.status`); s != "409" {
		t.Errorf("error status = %q, want 409", s)
	}
	p.do("the row leaves the pending list", chromedp.WaitNotPresent(chromedp.CSS(row)))
	if r := f.wait(id); r.Code() != windlass.CodeRejected || f.runs.Load() != 0 {
		t.Errorf("result = %+v (runs %d)", r, f.runs.Load())
	}
	if got, _ := f.svc.Get(t.Context(), id); got.Status != approval.StatusRejected || got.ArgsHash != h.ArgsHash {
		t.Errorf("held call = %+v", got)
	}
	p.checkClean()
}

func TestBrowserEditedArgumentsAreWhatIsApproved(t *testing.T) {
	t.Parallel()
	f := newFleet(t, map[string]approval.ToolPolicy{"pay": {RequiredApprovals: 2}})
	id := f.submit(payArgs{To: "bob", Amount: 5})
	h := f.held(id)
	// alice approves with an edit: the call now waits for a second reviewer
	// on the edited arguments.
	code, body := f.do("POST", "/v1/approvals/"+id+"/approve", "alice", map[string]any{"args_hash": h.ArgsHash, "arguments": map[string]any{"to": "bob", "amount": 4}})
	if code != http.StatusOK || body["status"] != "pending" {
		t.Fatalf("approve with an edit = %d %v", code, body)
	}

	p := newBrowserPage(t, f.api.URL)
	p.open()
	p.signIn(f.tokens["bob"])
	row := browserRow(id)
	p.do("wait for the row", chromedp.WaitVisible(chromedp.CSS(row)))
	if got := p.text(row + " .note"); !strings.Contains(got, "Edited by a reviewer") {
		t.Errorf("edit note = %q", got)
	}
	if got, want := p.text(row+" pre.args"), "{\n  \"amount\": 4,\n  \"to\": \"bob\"\n}"; got != want {
		t.Errorf("arguments shown:\n%s\nwant the edited ones:\n%s", got, want)
	}
	if got, want := p.text(row+" pre.original-args"), "{\n  \"to\": \"bob\",\n  \"amount\": 5\n}"; got != want {
		t.Errorf("original arguments shown:\n%s\nwant:\n%s", got, want)
	}
	if got := p.text(row + " .progress"); got != "approvals 1 of 2 (alice)" {
		t.Errorf("progress = %q", got)
	}
	edited := f.held(id)
	if got := browserEval[string](p, `document.querySelector(`+browserJS(row)+`).dataset.argsHash`); got != edited.ArgsHash || got == h.ArgsHash {
		t.Errorf("the row binds to args_hash %s, want the edited arguments' %s", got, edited.ArgsHash)
	}
	p.do("approve", chromedp.Click(chromedp.CSS(row+" button.approve")))
	if r := f.wait(id); r.IsError || r.Content != "paid 4.00 to bob" {
		t.Errorf("result = %+v, want the edited arguments run", r)
	}
	p.do("the row leaves the pending list", chromedp.WaitNotPresent(chromedp.CSS(row)))
	p.checkClean()
}

// TestBrowserDashboardPolicy checks the page's headers and that it loads
// nothing from elsewhere; it needs no browser.
func TestBrowserDashboardPolicy(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	resp, err := http.Get(f.api.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET / = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{"default-src 'none'", "script-src 'sha256-", "style-src 'sha256-", "connect-src 'self'",
		"frame-ancestors 'none'", "form-action 'none'", "base-uri 'none'", "require-trusted-types-for 'script'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Errorf("CSP %q allows something unsafe", csp)
	}
	if got := resp.Header.Get("X-Frame-Options"); got != "DENY" {
		t.Errorf("X-Frame-Options = %q", got)
	}
	for _, bad := range []string{"http://", "https://", "innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "localStorage", "document.cookie"} {
		if bytes.Contains(body, []byte(bad)) {
			t.Errorf("the page contains %q", bad)
		}
	}
}

// TestBrowserLargeArgumentsShowAll: a held call whose arguments travel by
// reference shows their first part and their size; "Show all arguments"
// fetches them whole and shows them formatted in its place; approving
// runs the call with all of them.
func TestBrowserLargeArgumentsShowAll(t *testing.T) {
	t.Parallel()
	f := newFleet(t, nil)
	args := payArgs{To: "bob", Amount: 5, Memo: strings.Repeat("m", 512<<10) + "<end of the memo>"}
	full, _ := json.Marshal(args)
	id := f.submit(args)
	f.held(id)

	p := newBrowserPage(t, f.api.URL)
	p.open()
	p.signIn(f.tokens["alice"])
	row := browserRow(id)
	p.do("wait for the call's row", chromedp.WaitVisible(chromedp.CSS(row+" button.show-all-args")))
	if got, want := p.text(row+" .args-cell p.note"), fmt.Sprintf("Large arguments: the first part of %d bytes.", len(full)); got != want {
		t.Errorf("note = %q, want %q", got, want)
	}
	if got := p.text(row + " pre.args"); !strings.HasPrefix(got, `{"to":"bob","amount":5,"memo":"mmm`) || len(got) > 4<<10 || strings.Contains(got, "<end of the memo>") {
		t.Errorf("before Show all: %d characters shown (%.80q…), want the 4 KiB preview", len(got), got)
	}
	p.do("show all", chromedp.Click(chromedp.CSS(row+" button.show-all-args")))
	p.do("the whole arguments", chromedp.WaitNotPresent(chromedp.CSS(row+" button.show-all-args")))
	if got, want := p.text(row+" pre.args"), browserPretty(t, args); got != want {
		t.Errorf("after Show all: %d characters shown, want the %d of the whole arguments formatted", len(got), len(want))
	}
	p.do("approve", chromedp.Click(chromedp.CSS(row+" button.approve")))
	r := f.wait(id)
	if r.IsError || r.Content != fmt.Sprintf("paid 5.00 to bob (a memo of %d bytes)", len(args.Memo)) || f.runs.Load() != 1 {
		t.Fatalf("result = %q (runs %d)", r.Content, f.runs.Load())
	}
}
