package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/windlass-dev/windlass/approval/webhook"
)

// A dashboard's receiver: read the raw body, Verify it against the
// endpoint's secrets, then use webhook-id as the idempotency key.
func ExampleVerify() {
	secret, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		panic(err)
	}
	secrets := []webhook.Secret{secret}

	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 1<<20))
		if err != nil {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		if err := webhook.Verify(secrets, r.Header, body, 0); err != nil {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		var ev struct {
			Type string `json:"type"`
			Data struct {
				CallID string `json:"call_id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, "bad payload", http.StatusBadRequest)
			return
		}
		fmt.Println("verified", r.Header.Get(webhook.HeaderID), ev.Type, ev.Data.CallID)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	sender, err := webhook.New(webhook.Config{
		Endpoints:    []webhook.Endpoint{{URL: receiver.URL, Secrets: secrets}},
		AllowPrivate: true, // the receiver listens on 127.0.0.1
	})
	if err != nil {
		panic(err)
	}
	defer sender.CloseIdleConnections()

	for _, res := range sender.Deliver(context.Background(), webhook.Event{
		ID: "msg_approval_c1", Type: "approval.requested", Data: map[string]string{"call_id": "call_1"},
	}) {
		fmt.Println("delivered:", res.Err == nil, res.StatusCode)
	}
	// Output:
	// verified msg_approval_c1 approval.requested call_1
	// delivered: true 204
}
