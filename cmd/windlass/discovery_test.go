package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestClaimDiscovery: a discovery file that names a running process is
// never taken over; one whose process has exited, or that is no discovery
// file, is replaced; remove deletes only the claimant's own file.
func TestClaimDiscovery(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dev.json")
	t.Setenv("WINDLASS_DEV_FILE", path)
	exited := exec.Command("true")
	if err := exited.Run(); err != nil {
		t.Fatalf("run true: %v", err)
	}
	first := discovery{NATSURL: "nats://127.0.0.1:1", RedisURL: "redis://127.0.0.1:2", PID: os.Getppid()} // a live process
	second := discovery{NATSURL: "nats://127.0.0.1:3", RedisURL: "redis://127.0.0.1:4", PID: exited.Process.Pid}

	removeFirst, err := claimDiscovery(first)
	if err != nil {
		t.Fatalf("claim with no file: %v", err)
	}
	_, err = claimDiscovery(second)
	var running *devRunningError
	if !errors.As(err, &running) || running.dev.PID != first.PID {
		t.Fatalf("claim of a file a live dev owns: %v; want devRunningError naming pid %d", err, first.PID)
	}
	if got, err := readDiscovery(); err != nil || got != first {
		t.Fatalf("file after the refused claim: %+v, %v; want the first's", got, err)
	}

	// The first "exits": its pid in the file is now a dead one's.
	for _, stale := range [][]byte{[]byte(`{"nats_url":"x","redis_url":"y","pid":` + strconv.Itoa(exited.Process.Pid) + `}`), []byte("not json")} {
		if err := os.WriteFile(path, stale, 0o600); err != nil {
			t.Fatal(err)
		}
		remove, err := claimDiscovery(first)
		if err != nil {
			t.Fatalf("claim over %s: %v", stale, err)
		}
		if got, err := readDiscovery(); err != nil || got != first {
			t.Fatalf("file after claiming over %s: %+v, %v", stale, got, err)
		}
		remove()
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("remove left the file (stat: %v)", err)
		}
	}

	// remove of a file someone else claimed since leaves it alone.
	if _, err := claimDiscovery(discovery{NATSURL: "n", RedisURL: "r", PID: os.Getpid()}); err != nil {
		t.Fatal(err)
	}
	removeFirst()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("remove deleted a file that was no longer its own: %v", err)
	}
}
