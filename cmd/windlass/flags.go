package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/dispatcher"
	"github.com/windlass-dev/windlass/internal/telemetry"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// newFlags returns a flag set whose usage lists each flag's environment
// variable.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = usageFunc(fs, synopsis, nil)
	return fs
}

// usageFunc prints the synopsis and the flags of fs but those of hidden: a
// flag a command shares with others and refuses is not offered.
func usageFunc(fs *flag.FlagSet, synopsis string, hidden map[string]string) func() {
	return func() {
		fmt.Fprintf(fs.Output(), "Usage: windlass %s\n\nFlags (each falls back to the environment variable shown):\n", synopsis)
		shown := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
		shown.SetOutput(fs.Output())
		fs.VisitAll(func(f *flag.Flag) {
			if _, ok := hidden[f.Name]; !ok {
				shown.Var(f.Value, f.Name, f.Usage)
				shown.Lookup(f.Name).DefValue = f.DefValue // the default, not a value given before --help
			}
		})
		shown.PrintDefaults()
	}
}

// parseArgs parses flags wherever they stand among the positional
// arguments (`call add '{}' --timeout 2s` as well as `call --timeout 2s add
// '{}'`) and returns the positional ones. "--" ends the flags.
//
// A flag's environment variable that is set but could not be used (not a
// duration) is an error too: never silently the default.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return positional, envErrors(fs)
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(positional, rest...), envErrors(fs)
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
}

// envErrors reports the flags whose environment variable could not be
// used, as a usage error (exit code 2).
func envErrors(fs *flag.FlagSet) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v, ok := f.Value.(interface{ envError() error }); ok && v.envError() != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", f.Name, v.envError()))
		}
	})
	if len(errs) == 0 {
		return nil
	}
	return &exitError{code: 2, err: errors.Join(errs...)}
}

// env names the environment variable of a flag.
func env(flagName string) string {
	return "WINDLASS_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func stringFlag(fs *flag.FlagSet, name, def, usage string) *string {
	return fs.String(name, cmp.Or(os.Getenv(env(name)), def), usage+" ($"+env(name)+")")
}

// durationFlag is a duration flag whose default is its environment
// variable's value when set. A value that is not a duration, or is past
// the longest one (about 292 years), is an error naming the flag or the
// variable and the rule; parseArgs reports a bad variable.
func durationFlag(fs *flag.FlagSet, name string, def time.Duration, usage string) *time.Duration {
	v := &durationValue{d: def}
	if s := os.Getenv(env(name)); s != "" {
		if err := v.Set(s); err != nil {
			v.envErr = fmt.Errorf("$%s %q: %w", env(name), s, err)
		}
	}
	fs.Var(v, name, usage+", a `duration` such as 30s or 1h30m ($"+env(name)+")")
	return &v.d
}

// durationValue is the flag.Value of durationFlag.
type durationValue struct {
	d      time.Duration
	envErr error // the environment variable's value is no duration
}

// Set implements flag.Value, with an error that says what a duration is.
func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration such as 30s, 5m or 1h30m, at most %s", time.Duration(math.MaxInt64))
	}
	v.d, v.envErr = d, nil // a flag given overrides its variable
	return nil
}

// String implements flag.Value.
func (v *durationValue) String() string { return v.d.String() }

// envError reports a flag's environment variable that could not be used.
func (v *durationValue) envError() error { return v.envErr }

// intFlag is an integer flag whose default is its environment variable's
// value when set; a value that is not a whole number is an error naming
// the variable (see durationFlag).
// payloadFlags registers the limits of payloads by reference (see
// PROTOCOL.md, "Payloads by reference"): their zero values are the
// components' defaults.
func payloadFlags(fs *flag.FlagSet) (inline, limit *int) {
	inline = intFlag(fs, "inline-limit", 0, "largest call or result message sent inline, in bytes; larger arguments and results travel by reference through the object store (0: 256 KiB)")
	limit = intFlag(fs, "payload-limit", 0, "largest arguments or result value by reference, in bytes (0: 64 MiB)")
	return inline, limit
}

func intFlag(fs *flag.FlagSet, name string, def int, usage string) *int {
	v := &intValue{n: def}
	if s := os.Getenv(env(name)); s != "" {
		if err := v.Set(s); err != nil {
			v.envErr = fmt.Errorf("$%s %q: %w", env(name), s, err)
		}
	}
	fs.Var(v, name, usage+" ($"+env(name)+")")
	return &v.n
}

// intValue is the flag.Value of intFlag.
type intValue struct {
	n      int
	envErr error
}

// Set implements flag.Value.
func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("want a whole number such as 3")
	}
	v.n, v.envErr = n, nil
	return nil
}

// String implements flag.Value.
func (v *intValue) String() string { return strconv.Itoa(v.n) }

func (v *intValue) envError() error { return v.envErr }

// boolFlag is a boolean flag whose default is its environment variable's
// value when set; a value that is not a boolean is an error naming the
// variable (see durationFlag).
func boolFlag(fs *flag.FlagSet, name string, def bool, usage string) *bool {
	v := &boolValue{b: def}
	if s := os.Getenv(env(name)); s != "" {
		if err := v.Set(s); err != nil {
			v.envErr = fmt.Errorf("$%s %q: %w", env(name), s, err)
		}
	}
	fs.Var(v, name, usage+" ($"+env(name)+")")
	return &v.b
}

// boolValue is the flag.Value of boolFlag.
type boolValue struct {
	b      bool
	envErr error
}

// Set implements flag.Value.
func (v *boolValue) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false (or 1 or 0)")
	}
	v.b, v.envErr = b, nil
	return nil
}

// String implements flag.Value.
func (v *boolValue) String() string { return strconv.FormatBool(v.b) }

// IsBoolFlag lets the flag be given without a value (--json).
func (v *boolValue) IsBoolFlag() bool { return true }

func (v *boolValue) envError() error { return v.envErr }

// common are the flags of every command that talks to the fleet.
type common struct {
	natsURL, redisURL, prefix *string
	inboxPrefix, dispatcherID *string
	logLevel, logFormat       *string
	limits                    limits.Config // of a command's dispatcher, from its limits flags (status)
}

func commonFlags(fs *flag.FlagSet) *common {
	return &common{
		natsURL:  stringFlag(fs, "nats-url", "", "NATS server URL (default: the running 'windlass dev')"),
		redisURL: stringFlag(fs, "redis-url", "", "Redis URL (default: the running 'windlass dev')"),
		prefix:   stringFlag(fs, "redis-prefix", registry.DefaultPrefix, "prefix of the registry's Redis keys"),
		inboxPrefix: stringFlag(fs, "nats-inbox-prefix", nats.InboxPrefix[:len(nats.InboxPrefix)-1],
			"prefix of this process's NATS reply subjects; with per-role NATS users, the one the user may subscribe to (deploy/nats: _INBOX_<user>)"),
		dispatcherID: stringFlag(fs, "dispatcher-id", "",
			"id of this process's dispatcher in result subjects, for commands that call tools (default: random; with per-role NATS users, the one the user may receive results for)"),
		logLevel:  stringFlag(fs, "log-level", "info", "log level: debug, info, warn, error"),
		logFormat: stringFlag(fs, "log-format", "text", "log format: text or json"),
	}
}

func (c *common) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(*c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: use debug, info, warn or error", *c.logLevel)
	}
	opts := &slog.HandlerOptions{Level: level}
	// Lines logged with a call's context carry its trace_id and span_id.
	switch *c.logFormat {
	case "text":
		return slog.New(telemetry.NewLogHandler(slog.NewTextHandler(w, opts))), nil
	case "json":
		return slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(w, opts))), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", *c.logFormat)
}

// endpoints resolves the NATS and Redis URLs: flags and environment first,
// then the discovery file of a running `windlass dev`. With neither it is an
// error that says so, never a guess at the standard local ports, where some
// other NATS or Redis may answer for a fleet that is not there.
func (c *common) endpoints() (natsURL, redisURL string, err error) {
	natsURL, redisURL = *c.natsURL, *c.redisURL
	if natsURL != "" && redisURL != "" {
		return natsURL, redisURL, nil
	}
	dev, err := readDiscovery()
	if err != nil {
		var missing []string
		if natsURL == "" {
			missing = append(missing, "--nats-url ($WINDLASS_NATS_URL)")
		}
		if redisURL == "" {
			missing = append(missing, "--redis-url ($WINDLASS_REDIS_URL)")
		}
		return "", "", &exitError{code: 2, err: fmt.Errorf("no fleet to talk to: %s not given and %w; start `windlass dev` in another terminal, or give the URLs (servers on the standard local ports: --nats-url %s --redis-url %s)",
			strings.Join(missing, " and "), err, nats.DefaultURL, standardRedisURL)}
	}
	return cmp.Or(natsURL, dev.NATSURL), cmp.Or(redisURL, dev.RedisURL), nil
}

// standardRedisURL is a Redis on its standard local port, which the error
// of endpoints suggests; nothing connects to it unless told to.
const standardRedisURL = "redis://127.0.0.1:6379/0"

// connect dials NATS and Redis.
func (c *common) connect(name string) (*nats.Conn, *redis.Client, error) {
	natsURL, redisURL, err := c.endpoints()
	if err != nil {
		return nil, nil, err
	}
	nc, err := nats.Connect(natsURL, nats.Name("windlass "+name), nats.MaxReconnects(-1), nats.CustomInboxPrefix(*c.inboxPrefix))
	if err != nil {
		return nil, nil, fmt.Errorf("connect to NATS at %s: %w (start `windlass dev`, or pass --nats-url)", natsURL, err)
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("--redis-url %q: %w", redisURL, err)
	}
	return nc, redis.NewClient(opts), nil
}

func (c *common) registry(rc redis.UniversalClient, log *slog.Logger) (*registry.Registry, error) {
	return registry.New(registry.Config{Client: rc, Prefix: *c.prefix, Logger: log})
}

// session is what every command that talks to the fleet opens: a logger,
// the NATS and Redis connections and the registry.
type session struct {
	name          string // the command's
	dispatcherID  string
	log           *slog.Logger
	nc            *nats.Conn
	rc            *redis.Client
	reg           *registry.Registry
	limits        limits.Config // its dispatcher's
	stopTelemetry func()        // nil until dispatcher started it
}

// open builds the logger, connects and makes the registry; Close undoes it.
func (c *common) open(name string, stderr io.Writer) (*session, error) {
	log, err := c.logger(stderr)
	if err != nil {
		return nil, err
	}
	nc, rc, err := c.connect(name)
	if err != nil {
		return nil, err
	}
	reg, err := c.registry(rc, log)
	if err != nil {
		nc.Close()
		_ = rc.Close()
		return nil, err
	}
	return &session{name: name, dispatcherID: *c.dispatcherID, log: log, nc: nc, rc: rc, reg: reg, limits: c.limits}, nil
}

// Close closes the connections and flushes the telemetry the session
// started; close its dispatcher first, so that its spans are ended.
func (s *session) Close() {
	s.nc.Close()
	_ = s.rc.Close()
	if s.stopTelemetry != nil {
		s.stopTelemetry()
	}
}

// dispatcher starts a dispatcher on the session, for a client command
// (call, watch, status, cancel, dead, tools): it first installs the
// OpenTelemetry export the OTEL_* variables ask for, as the services do,
// so that the call's producer span, sent from here, is the parent of the
// worker's spans.
func (s *session) dispatcher(ctx context.Context) (*dispatcher.Dispatcher, error) {
	if s.stopTelemetry == nil {
		stop, err := clientTelemetry(ctx, "windlass-"+s.name, s.log)
		if err != nil {
			return nil, err
		}
		s.stopTelemetry = stop
	}
	return dispatcher.New(ctx, dispatcher.Config{Conn: s.nc, Registry: s.reg, ID: s.dispatcherID, Logger: s.log, Limits: s.limits})
}
