package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/internal/demotools"
	"github.com/windlass-dev/windlass/receipt"
	"github.com/windlass-dev/windlass/worker"
)

func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("worker", "worker [flags]", stderr)
	c := commonFlags(fs)
	id := stringFlag(fs, "id", "", "worker id (default: host-pid-random)")
	toolList := stringFlag(fs, "tools", "echo,add,sleep,transfer_funds", "comma-separated demo tools to serve")
	concurrency := intFlag(fs, "concurrency", worker.DefaultMaxConcurrency, "calls running at once in this process")
	ackWait := durationFlag(fs, "ack-wait", worker.DefaultAckWait, "JetStream ack wait before a call is redelivered")
	grace := durationFlag(fs, "shutdown-grace", worker.DefaultShutdownGrace, "time running calls may finish on SIGTERM")
	replicas := intFlag(fs, "replicas", 1, "replicas of the streams when this worker creates them")
	replace := boolFlag(fs, "replace", false, "replace differing specs in the registry (rolling upgrade)")
	updateConsumer := boolFlag(fs, "update-consumer", false, "rewrite the tools' consumers with this worker's settings (--ack-wait); by default a consumer keeps its creator's")
	releaseKeys := stringFlag(fs, "release-public-keys", "", "comma-separated approval-service public keys, ed25519:<base64>; without them gated tools refuse every call")
	receipts := stringFlag(fs, "receipts", "gated", "which calls get a signed execution receipt: gated (calls run under an approval release) or all")
	receiptKey := stringFlag(fs, "receipt-key", "", "file of the worker's Ed25519 receipt key: PEM PKCS #8, a raw 32-byte seed, or ed25519:<base64 seed> (default: a new key at each start)")
	receiptRetention := durationFlag(fs, "receipt-key-retention", 0, "how long the published receipt key outlives the worker's last refresh (default 720h)")
	healthListen := healthFlag(fs)
	metricsListen := metricsFlag(fs)
	mcpServers := mcpFlag(fs)
	inline, payloadLimit := payloadFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("%s takes no arguments, got %q", fs.Name(), pos)}
	}
	rcfg, err := receiptConfig(*receipts, *receiptKey)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	var tools []windlass.Tool
	if len(*mcpServers) == 0 || flagGiven(fs, "tools") { // with --mcp, demo tools only when asked for
		if tools, err = pickTools(*toolList); err != nil {
			return err
		}
	}
	sess, err := c.open("worker", stderr)
	if err != nil {
		return err
	}
	defer sess.Close()
	log, nc, rc, reg := sess.log, sess.nc, sess.rc, sess.reg
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	verifier, err := parseVerifier(*releaseKeys)
	if err != nil {
		return err
	}
	stopTelemetry, err := startTelemetry(ctx, "windlass-worker", *metricsListen, log)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	wcfg := worker.Config{JetStream: js, Registry: reg, ID: *id, MaxConcurrency: *concurrency,
		AckWait: *ackWait, ShutdownGrace: *grace, Replicas: *replicas, Replace: *replace, UpdateConsumer: *updateConsumer, Logger: log,
		Releases: verifier, InlineLimit: int64(*inline), PayloadLimit: int64(*payloadLimit),
		Receipts: rcfg.Receipts, ReceiptKey: rcfg.ReceiptKey, ReceiptKeyRetention: *receiptRetention}
	w, err := worker.New(wcfg)
	if err != nil {
		return err
	}
	for _, t := range tools {
		if err := w.Register(t); err != nil {
			return err
		}
	}
	stopHealth, err := serveHealth(*healthListen, nc, rc, log)
	if err != nil {
		return err
	}
	defer stopHealth()
	return runWithBridge(ctx, w, tools, *mcpServers, wcfg, log)
}

// receiptConfig reads --receipts and --receipt-key into a worker.Config's
// receipt fields.
func receiptConfig(mode, keyFile string) (worker.Config, error) {
	var cfg worker.Config
	switch mode {
	case "gated":
		cfg.Receipts = worker.ReceiptsGated
	case "all":
		cfg.Receipts = worker.ReceiptsAll
	default:
		return cfg, fmt.Errorf("--receipts must be gated or all, got %q", mode)
	}
	if keyFile == "" {
		return cfg, nil
	}
	data, err := os.ReadFile(keyFile)
	if err != nil {
		return cfg, fmt.Errorf("--receipt-key: %w", err)
	}
	if cfg.ReceiptKey, err = receipt.ParsePrivateKey(data); err != nil {
		return cfg, fmt.Errorf("--receipt-key %s: %w", keyFile, err)
	}
	return cfg, nil
}

// parseVerifier reads --release-public-keys; none gives a nil verifier.
func parseVerifier(list string) (*release.Verifier, error) {
	var keys []ed25519.PublicKey
	for _, k := range splitList(list) {
		pub, err := release.ParsePublicKey(k)
		if err != nil {
			return nil, fmt.Errorf("--release-public-keys: %w", err)
		}
		keys = append(keys, pub)
	}
	if len(keys) == 0 {
		return nil, nil
	}
	return release.NewVerifier(keys...), nil
}

func pickTools(list string) ([]windlass.Tool, error) {
	all := map[string]windlass.Tool{}
	var names []string
	for _, t := range demotools.All() {
		all[t.Spec().Name] = t
		names = append(names, t.Spec().Name)
	}
	var out []windlass.Tool
	for n := range strings.SplitSeq(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		t, ok := all[n]
		if !ok {
			return nil, fmt.Errorf("--tools: unknown demo tool %q (have %s)", n, strings.Join(names, ", "))
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--tools is empty: name at least one of %s", strings.Join(names, ", "))
	}
	return out, nil
}
