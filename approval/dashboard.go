package approval

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"net/http"
	"strings"
)

//go:embed dashboard.html
var dashboardHTML []byte

// dashboardCSP is the page's Content-Security-Policy. The page's one inline
// script and one inline style are allowed by their SHA-256 hashes, so no
// other script runs ('unsafe-inline' is not granted, nor eval, nor another
// origin); it may fetch only from its own origin and loads no image (its
// favicon is an empty data: URL); forms cannot navigate anywhere
// (form-action 'none': a token typed into the page never ends up in a URL);
// and Trusted Types with no policy make every HTML sink (innerHTML and the
// like) refuse strings, so a value from the API can only ever be text.
var dashboardCSP = contentSecurityPolicy(dashboardHTML)

func contentSecurityPolicy(page []byte) string {
	return strings.Join([]string{
		"default-src 'none'",
		"script-src " + inlineHashes(page, "script"),
		"style-src " + inlineHashes(page, "style"),
		"connect-src 'self'",
		"img-src data:", // the empty favicon: the page loads no image
		"base-uri 'none'",
		"form-action 'none'",
		"frame-ancestors 'none'",
		"require-trusted-types-for 'script'",
		"trusted-types 'none'",
	}, "; ")
}

// inlineHashes returns the CSP hash sources of the bodies of every
// <tag>...</tag> element of page (written exactly so, without attributes),
// or 'none' when there is none.
func inlineHashes(page []byte, tag string) string {
	open, end := []byte("<"+tag+">"), []byte("</"+tag+">")
	var sources []string
	for rest := page; ; {
		_, after, ok := bytes.Cut(rest, open)
		if !ok {
			break
		}
		body, tail, ok := bytes.Cut(after, end)
		if !ok {
			break
		}
		sum := sha256.Sum256(body)
		sources = append(sources, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
		rest = tail
	}
	if len(sources) == 0 {
		return "'none'"
	}
	return strings.Join(sources, " ")
}

// serveDashboard serves the reference dashboard page. The page holds no
// data: it asks for a reviewer token and calls the API with it.
func serveDashboard(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", dashboardCSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(dashboardHTML)
}
