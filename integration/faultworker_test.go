package integration_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/registry"
	"github.com/windlass-dev/windlass/worker"
)

// The fault suite's workers are separate processes, so that a test can kill
// one with SIGKILL or pause it with SIGSTOP as an operator's machine would:
// the test binary starts itself with these variables set, and TestMain
// serves the "work" tool instead of running tests.
const (
	faultWorkerEnv  = "WINDLASS_FAULT_WORKER" // the worker's id
	faultNATSEnv    = "WINDLASS_FAULT_NATS_URL"
	faultRedisEnv   = "WINDLASS_FAULT_REDIS_ADDR"
	faultExecLogEnv = "WINDLASS_FAULT_EXEC_LOG" // file the tool appends a line to as each execution starts and finishes
	faultAckWaitEnv = "WINDLASS_FAULT_ACK_WAIT"
	faultTTLEnv     = "WINDLASS_FAULT_REGISTRY_TTL"
)

// workArgs are the arguments of the fault suite's tool.
type workArgs struct {
	// MS is how long the call works, in milliseconds.
	MS int `json:"ms" jsonschema:"minimum=0,maximum=600000"`
}

// workTool appends "start <call id> <attempt> <worker>" to the execution
// log, sleeps for the asked time (or until its context ends), then appends
// the same line with "done": an execution that finished, whether or not its
// result reached anyone.
func workTool(workerID string, execLog *os.File) windlass.Tool {
	return windlass.MustFunc("work", func(ctx context.Context, in workArgs) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		// One write call per line: O_APPEND keeps lines whole across the
		// processes and a SIGKILL.
		if _, err := fmt.Fprintf(execLog, "start %s %d %s\n", info.ID, info.Attempt, workerID); err != nil {
			return "", fmt.Errorf("record the execution: %w", err)
		}
		t := time.NewTimer(time.Duration(in.MS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		if _, err := fmt.Fprintf(execLog, "done %s %d %s\n", info.ID, info.Attempt, workerID); err != nil {
			return "", fmt.Errorf("record the execution: %w", err)
		}
		return "done " + info.ID, nil
	}, windlass.WithDescription("Work for a while, and record that the work was done."))
}

// runFaultWorker is the worker process's main; it returns the exit code.
func runFaultWorker() int {
	id := os.Getenv(faultWorkerEnv)
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "fault worker %s: %v\n", id, err)
		return 1
	}
	ackWait, err := time.ParseDuration(os.Getenv(faultAckWaitEnv))
	if err != nil {
		return fail(fmt.Errorf("%s: %w", faultAckWaitEnv, err))
	}
	ttl, err := time.ParseDuration(os.Getenv(faultTTLEnv))
	if err != nil {
		return fail(fmt.Errorf("%s: %w", faultTTLEnv, err))
	}
	execLog, err := os.OpenFile(os.Getenv(faultExecLogEnv), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return fail(err)
	}
	defer execLog.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	nc, err := nats.Connect(os.Getenv(faultNATSEnv), nats.Name("fault-worker-"+id),
		nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		return fail(err)
	}
	defer nc.Close()
	rc := redis.NewClient(&redis.Options{Addr: os.Getenv(faultRedisEnv), MaxRetries: -1, DialTimeout: time.Second})
	defer rc.Close()
	reg, err := registry.New(registry.Config{Client: rc, TTL: ttl, Logger: log})
	if err != nil {
		return fail(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fail(err)
	}
	w, err := worker.New(worker.Config{JetStream: js, Registry: reg, ID: id, AckWait: ackWait, ShutdownGrace: 5 * time.Second, Logger: log})
	if err != nil {
		return fail(err)
	}
	if err := w.Register(workTool(id, execLog)); err != nil {
		return fail(err)
	}
	if err := w.Run(ctx); err != nil {
		return fail(err)
	}
	s := w.Stats()
	// The stats of a worker that stops cleanly, for the test's log.
	fmt.Fprintf(os.Stderr, "fault worker %s stats: completed=%d failed=%d requeued=%d already_answered=%d duplicate_results=%d\n",
		id, s.Completed, s.Failed, s.Requeued, s.AlreadyAnswered, s.DuplicateResults)
	return 0
}
