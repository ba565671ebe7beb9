package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// discovery is what `windlass dev` writes so that commands in another
// terminal find it without flags. One file names one dev fleet: a second
// `windlass dev` on the same file is refused while the first runs (see
// claimDiscovery), and a client whose file names no running fleet says so
// rather than trying the standard ports (see common.endpoints).
type discovery struct {
	NATSURL       string `json:"nats_url"`
	RedisURL      string `json:"redis_url"`
	ApprovalURL   string `json:"approval_url,omitempty"`
	APIURL        string `json:"api_url,omitempty"`
	ReviewerToken string `json:"reviewer_token,omitempty"` // the dev reviewer's; the file is 0600
	PID           int    `json:"pid"`
}

// discoveryPath is $WINDLASS_DEV_FILE, else windlass/dev.json in the user's
// cache directory.
func discoveryPath() string {
	if p := os.Getenv("WINDLASS_DEV_FILE"); p != "" {
		return p
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "windlass", "dev.json")
}

// readDiscovery reads the discovery file of a running dev fleet. Its error
// says why there is none: no file, a file that is not one, or a file whose
// process is gone.
func readDiscovery() (discovery, error) {
	p := discoveryPath()
	var d discovery
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return d, fmt.Errorf("no `windlass dev` is running (no discovery file at %s)", p)
	}
	if err != nil {
		return d, fmt.Errorf("the discovery file of `windlass dev` is unreadable: %w", err)
	}
	if err := json.Unmarshal(b, &d); err != nil || d.PID <= 0 {
		return discovery{}, fmt.Errorf("%s is not a discovery file of `windlass dev` (%d bytes, no process id)", p, len(b))
	}
	if !processAlive(d.PID) {
		return discovery{}, fmt.Errorf("no `windlass dev` is running (the discovery file %s names process %d, which has exited)", p, d.PID)
	}
	return d, nil
}

// devRunningError is a second `windlass dev` on a discovery file whose
// fleet still runs.
type devRunningError struct {
	path string
	dev  discovery
}

func (e *devRunningError) Error() string {
	return fmt.Sprintf("another `windlass dev` (process %d, NATS %s) is running and owns %s; stop it first, or set WINDLASS_DEV_FILE to another path to run a second fleet beside it (its clients need the same WINDLASS_DEV_FILE)",
		e.dev.PID, e.dev.NATSURL, e.path)
}

// checkNoDev refuses to start when the discovery file names a running
// fleet; dev calls it before starting anything.
func checkNoDev() error {
	if d, err := readDiscovery(); err == nil && d.PID != os.Getpid() {
		return &exitError{code: 1, err: &devRunningError{path: discoveryPath(), dev: d}}
	}
	return nil
}

// claimDiscovery writes d as the discovery file, atomically and only if no
// running fleet owns it: the file is written aside and linked into place,
// which fails if a file is there. A file left by a fleet that has exited is
// replaced. remove deletes the file if it is still d's.
func claimDiscovery(d discovery) (remove func(), err error) {
	p := discoveryPath()
	defer func() {
		if _, running := errors.AsType[*devRunningError](err); err != nil && !running {
			err = fmt.Errorf("write the discovery file %s: %w", p, err)
		}
	}()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, err
	}
	b, _ := json.MarshalIndent(d, "", "  ")
	tmp := p + "." + strconv.Itoa(d.PID) + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return nil, err
	}
	defer os.Remove(tmp)
	for attempt := 0; ; attempt++ {
		err := os.Link(tmp, p)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || attempt > 0 {
			return nil, err
		}
		if cur, readErr := readDiscovery(); readErr == nil {
			return nil, &exitError{code: 1, err: &devRunningError{path: p, dev: cur}}
		}
		// A stale file, or one that is not a discovery file: ours now.
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	return func() {
		if cur, err := readDiscovery(); err == nil && cur.PID != d.PID {
			return // not ours (it was replaced while we ran)
		}
		_ = os.Remove(p)
	}, nil
}
