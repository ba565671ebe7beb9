package integration_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/windlass-dev/windlass"
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

// bulkArgs are the arguments of the fault suite's large-result tool.
type bulkArgs struct {
	// MB is the size of the result, in MiB.
	MB int `json:"mb" jsonschema:"minimum=1,maximum=64"`
}

// bulkPrefix begins a bulk result: the attempt that made it.
func bulkPrefix(attempt int) string { return fmt.Sprintf("attempt %d: ", attempt) }

// bulkTool returns a text of the asked size that begins with the attempt
// that made it (travelling by reference, past the inline limit), recording
// its executions like workTool.
func bulkTool(workerID string, execLog *os.File) windlass.Tool {
	return windlass.MustFunc("bulk", func(ctx context.Context, in bulkArgs) (string, error) {
		info, _ := windlass.CallInfoFromContext(ctx)
		if _, err := fmt.Fprintf(execLog, "start %s %d %s\n", info.ID, info.Attempt, workerID); err != nil {
			return "", fmt.Errorf("record the execution: %w", err)
		}
		prefix := bulkPrefix(info.Attempt)
		out := prefix + strings.Repeat("b", in.MB<<20-len(prefix))
		if _, err := fmt.Fprintf(execLog, "done %s %d %s\n", info.ID, info.Attempt, workerID); err != nil {
			return "", fmt.Errorf("record the execution: %w", err)
		}
		return out, nil
	}, windlass.WithDescription("Return a large text that names the attempt that made it."))
}

// runFaultWorker is the worker process's main; it returns the exit code.
func runFaultWorker() int {
	id := os.Getenv(faultWorkerEnv)
	ackWait, err := time.ParseDuration(os.Getenv(faultAckWaitEnv))
	if err != nil {
		return exitCode("fault worker", id, fmt.Errorf("%s: %w", faultAckWaitEnv, err))
	}
	ttl, err := time.ParseDuration(os.Getenv(faultTTLEnv))
	if err != nil {
		return exitCode("fault worker", id, fmt.Errorf("%s: %w", faultTTLEnv, err))
	}
	execLog, err := os.OpenFile(os.Getenv(faultExecLogEnv), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return exitCode("fault worker", id, err)
	}
	defer execLog.Close()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := runWorkerProcess(os.Getenv(faultNATSEnv), os.Getenv(faultRedisEnv), ttl,
		worker.Config{ID: id, AckWait: ackWait, ShutdownGrace: 5 * time.Second, Logger: log}, workTool(id, execLog), bulkTool(id, execLog))
	if err != nil {
		return exitCode("fault worker", id, err)
	}
	s := w.Stats()
	// The stats of a worker that stops cleanly, for the test's log.
	fmt.Fprintf(os.Stderr, "fault worker %s stats: completed=%d failed=%d requeued=%d already_answered=%d duplicate_results=%d\n",
		id, s.Completed, s.Failed, s.Requeued, s.AlreadyAnswered, s.DuplicateResults)
	return 0
}
