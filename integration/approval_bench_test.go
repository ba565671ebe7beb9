package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/bench"
	"github.com/windlass-dev/windlass/internal/fleettest"
	"github.com/windlass-dev/windlass/worker"
)

// BenchmarkApprovalPath measures gated calls end to end: Call of a gated
// no-op tool, held by the approval service (stored in Redis, then acked),
// found by reviewers listing pending calls through the HTTP API, approved
// through the API (which signs a release and publishes the call), run by a
// worker that verifies the release and records it single-use in Redis, and
// answered. 256 calls wait at once; 32 reviewer clients list and approve.
// The API limits each reviewer to 5 decisions a second (bursts of 20), so
// the decisions are spread over 400 reviewers' tokens, as a thousand
// approvals a second would be. It reports calls/s and latency percentiles
// (submit to answer, approval included).
//
//	go test -run '^$' -bench ApprovalPath -benchtime 3000x ./integration/
func BenchmarkApprovalPath(b *testing.B) {
	const (
		inflight  = 256
		approvers = 32
		reviewers = 400
	)
	f := newFleet(b)
	priv, pub, err := release.GenerateKey()
	if err != nil {
		b.Fatal(err)
	}
	privKey, _ := release.ParsePrivateKey(priv)
	pubKey, _ := release.ParsePublicKey(pub)
	gated := windlass.MustFunc("bench_gated", func(context.Context, struct {
		Data string `json:"data,omitempty"`
	}) (int, error) {
		return 1, nil
	}, windlass.WithApproval())
	f.StartWorker(worker.Config{Releases: release.NewVerifier(pubKey)}, gated)

	var tokens []string
	var revs []approval.Reviewer
	for i := range reviewers {
		tok := approval.NewToken()
		tokens = append(tokens, tok)
		revs = append(revs, approval.Reviewer{Name: fmt.Sprint("reviewer-", i), TokenSHA256: approval.HashToken(tok)})
	}
	svc, err := approval.New(approval.Config{Conn: f.Conn(), Redis: f.Redis.Client(b), Registry: f.NewRegistry(), Signer: release.NewSigner(privKey), Reviewers: revs})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	svcDone := make(chan error, 1)
	go func() { svcDone <- svc.Run(ctx) }()
	srv := httptest.NewServer(svc.Handler())
	b.Cleanup(func() { cancel(); <-svcDone; srv.Close() })
	d := f.Dispatcher(dispatcher.Config{})
	fleettest.WaitFor(b, 10*time.Second, "bench_gated live", func() bool {
		cat, _ := d.Catalog(ctx)
		return len(cat) == 1
	})

	// The reviewers: list pending calls, approve each once.
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: approvers + 1}}
	var nextToken atomic.Int64
	api := func(method, path string, body any) (int, []byte) {
		var rd *bytes.Reader
		if body != nil {
			bb, _ := json.Marshal(body)
			rd = bytes.NewReader(bb)
		} else {
			rd = bytes.NewReader(nil)
		}
		req, _ := http.NewRequestWithContext(ctx, method, srv.URL+path, rd)
		req.Header.Set("Authorization", "Bearer "+tokens[nextToken.Add(1)%reviewers])
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return resp.StatusCode, buf.Bytes()
	}
	type held struct {
		ID       string `json:"id"`
		ArgsHash string `json:"args_hash"`
	}
	todo := make(chan held, 4096)
	var approved, limited atomic.Int64
	var reviewersWG sync.WaitGroup
	reviewersWG.Go(func() { // the dashboard's list, polled
		defer close(todo)
		seen := map[string]bool{}
		for ctx.Err() == nil {
			code, body := api("GET", "/v1/approvals?status=pending&limit=500", nil)
			var page struct {
				Items []held `json:"items"`
			}
			if code == http.StatusOK && json.Unmarshal(body, &page) == nil {
				fresh := 0
				for _, h := range page.Items {
					if !seen[h.ID] {
						seen[h.ID] = true
						fresh++
						todo <- h
					}
				}
				if fresh > 0 {
					continue
				}
			}
			time.Sleep(2 * time.Millisecond) // nothing new: poll again soon
		}
	})
	for range approvers {
		reviewersWG.Go(func() {
			for h := range todo {
				for ctx.Err() == nil {
					code, _ := api("POST", "/v1/approvals/"+h.ID+"/approve", map[string]string{"args_hash": h.ArgsHash})
					if code != http.StatusTooManyRequests {
						approved.Add(1)
						break
					}
					limited.Add(1)
				}
			}
		})
	}
	b.Cleanup(func() { cancel(); reviewersWG.Wait() })

	call := bench.CallFunc(func(ctx context.Context) error {
		r, err := d.Call(ctx, "bench_gated", json.RawMessage(`{"data":"x"}`))
		if err == nil && r.IsError {
			err = fmt.Errorf("%s", r.Content)
		}
		return err
	})
	bench.Measure(ctx, bench.Load{InFlight: inflight, Calls: 2 * inflight}, call, nil) // warm up
	b.ResetTimer()
	s := bench.Measure(ctx, bench.Load{InFlight: inflight, Calls: b.N}, call, nil)
	b.StopTimer()
	if s.Errors > 0 {
		b.Fatalf("%d of %d gated calls failed: %s", s.Errors, s.Calls, s.FirstError)
	}
	b.ReportMetric(s.PerSec, "calls/s")
	b.ReportMetric(s.P50/1000, "p50-ms")
	b.ReportMetric(s.P99/1000, "p99-ms")
	b.ReportMetric(float64(limited.Load()), "rate-limited")
}
