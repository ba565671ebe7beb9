package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/internal/testserver"
)

// TestDispatcherCommand runs `windlass dispatcher` against real NATS and
// Redis with a key file: it serves the API behind the key, and stops
// cleanly when its context ends (SIGTERM in main).
func TestDispatcherCommand(t *testing.T) {
	t.Setenv("WINDLASS_DEV_FILE", filepath.Join(t.TempDir(), "none.json"))
	ns, rs := testserver.StartNATS(t), testserver.StartRedis(t)
	key := httpapi.NewAPIKey()
	keyFile := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keyFile, []byte("# the CI backend\nci="+httpapi.HashAPIKey(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	var stderr testserver.Buffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dispatcher", "--listen", addr, "--nats-url", ns.URL(), "--redis-url", rs.URL(),
			"--api-key-file", keyFile, "--max-wait", "2s"}, io.Discard, &stderr)
	}()

	get := func(path, key string) (int, string) {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+addr+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if code, _ := get("/readyz", ""); code == http.StatusOK {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("dispatcher exited: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dispatcher not ready on %s\n%s", addr, stderr.String())
		}
	}
	if code, body := get("/v1/tools", ""); code != http.StatusUnauthorized {
		t.Errorf("without a key: %d %s", code, body)
	}
	if code, body := get("/v1/tools?style=gemini", key); code != http.StatusOK || !strings.Contains(body, `"tools":[]`) {
		t.Errorf("with the key: %d %s", code, body)
	}
	if strings.Contains(stderr.String(), "NO API KEYS") {
		t.Errorf("warned of no keys with a key file:\n%s", stderr.String())
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("dispatcher stopped with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("dispatcher did not stop")
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestServeAPIShutdown: at shutdown, a request of an Extra handler that
// only ends with its context (an MCP stream) is canceled after the drain
// grace, so the server stops well before the shutdown grace.
func TestServeAPIShutdown(t *testing.T) {
	d := fleettest.New(t).Dispatcher(dispatcher.Config{})
	defer d.Close()
	entered, left := make(chan struct{}), make(chan struct{})
	stream := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		close(entered)
		<-r.Context().Done()
		close(left)
	})
	h, err := httpapi.New(httpapi.Config{Dispatcher: d, Extra: map[string]http.Handler{"/stream": stream}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- serveAPI(ctx, h, ln, slog.New(slog.DiscardHandler)) }()

	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	res, err := client.Get("http://" + ln.Addr().String() + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	<-entered
	start := time.Now()
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serveAPI = %v", err)
		}
	case <-time.After(apiShutdownGrace + 5*time.Second):
		t.Fatal("serveAPI did not return")
	}
	<-left
	if took := time.Since(start); took >= apiShutdownGrace {
		t.Errorf("shutdown took %s: the stream was not canceled after the drain grace (%s)", took, apiDrainGrace)
	}
}
