package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/dispatcher/httpapi"
	"github.com/windlass-dev/windlass/internal/fleettest"
)

// TestASlowBodyIsNotHeldForever: the API server bounds the headers
// (ReadHeaderTimeout) but has no ReadTimeout, which would cut the long
// waits and event streams. A client that sends the headers and a few
// bytes of a body it announced as 1,000 bytes, then nothing, must not
// hold its connection and a goroutine for as long as it likes: past the
// handler's BodyTimeout it is answered 408 request_timeout and its
// connection closed.
func TestASlowBodyIsNotHeldForever(t *testing.T) {
	d := fleettest.New(t).Dispatcher(dispatcher.Config{})
	const bodyTimeout = time.Second
	h, err := httpapi.New(httpapi.Config{Dispatcher: d, BodyTimeout: bodyTimeout})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- serveAPI(ctx, h, ln, slog.New(slog.DiscardHandler)) }()
	defer func() { stop(); <-done }()

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /v1/calls HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"tool\":\"add\","); err != nil {
		t.Fatal(err)
	}
	const bound = 25 * time.Second // well past the body's bound and the 10 s the headers get
	_ = c.SetReadDeadline(time.Now().Add(bound))
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, nil)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the server still holds a request whose body stalled %s ago (14 of 1000 bytes sent): no answer, connection open", bound)
	}
	if err != nil {
		t.Fatalf("read the answer: %v", err)
	}
	var body httpapi.ErrorBody
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatalf("%d: decode the body: %v", res.StatusCode, err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestTimeout || body.Error.Code != httpapi.CodeRequestTimeout {
		t.Errorf("answer %d %+v; want 408 request_timeout", res.StatusCode, body.Error)
	}
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after the 408, reading the connection: %v; want it closed (EOF)", err)
	}
}
