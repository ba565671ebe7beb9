package limits

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"

	"go.yaml.in/yaml/v3"

	"github.com/windlass-dev/windlass"
)

// The defaults that protect a fleet configured with nothing: see the
// package doc, "Defaults", for the reasoning.
const (
	// DefaultMaxInFlight caps the calls of one key to one tool that are
	// queued or running at once.
	DefaultMaxInFlight = 1_000
	// DefaultMaxQueued caps the calls of one tool, all keys together,
	// that are queued or running at once.
	DefaultMaxQueued = 10_000
	// DefaultMaxQueuedCalls bounds the calls stream: every tool's queued
	// and running calls together.
	DefaultMaxQueuedCalls = 100_000
)

// NoLimit, as a cap, says there is none (0 means "inherit").
const NoLimit = -1

// DefaultKey is the key of a call whose caller named none.
const DefaultKey = "default"

// Limit is what one key may do with one tool, admitted by the dispatcher.
type Limit struct {
	// Rate bounds how often calls are admitted; zero: no rate.
	Rate Rate
	// MaxInFlight caps the key's calls of the tool queued or running at
	// once; 0 inherits, NoLimit is none.
	MaxInFlight int
}

// ToolLimits are one tool's limits.
type ToolLimits struct {
	// Default is each key's limit for this tool; its fields that are zero
	// inherit from Config.Keys and Config.Default.
	Default Limit
	// Keys are limits of named keys for this tool, over Default.
	Keys map[string]Limit
	// MaxQueued caps the tool's calls, all keys together, queued or
	// running at once; 0 inherits Config.MaxQueued, NoLimit is none.
	MaxQueued int
}

// Config is a fleet's admission limits: a dispatcher enforces them, and
// every dispatcher replica shares the counts (see [Enforcer]). Its zero
// value is the protective defaults; [Unlimited] has none.
type Config struct {
	// Default is every key's limit for every tool, unless more specific
	// entries say otherwise. Zero fields are the defaults (no rate,
	// DefaultMaxInFlight).
	Default Limit
	// Keys are a named key's limits for every tool, over Default.
	Keys map[string]Limit
	// Tools are a named tool's limits, over Keys and Default.
	Tools map[string]ToolLimits
	// MaxQueued caps each tool's calls, all keys together, queued or
	// running at once; 0 is DefaultMaxQueued, NoLimit none.
	MaxQueued int
	// MaxQueuedCalls bounds the calls stream, all tools together (the
	// NATS server refuses a call past it); 0 is DefaultMaxQueuedCalls,
	// NoLimit none.
	MaxQueuedCalls int
}

// Unlimited is a Config with no limit at all: no rate, no caps, an
// unbounded calls stream.
func Unlimited() Config {
	return Config{Default: Limit{MaxInFlight: NoLimit}, MaxQueued: NoLimit, MaxQueuedCalls: NoLimit}
}

// For is the limit of key's calls to tool: for each field, the most
// specific entry that sets it (the tool's entry for the key, the key's
// entry, the tool's default, the default), else the package's default.
func (c Config) For(tool, key string) Limit {
	t := c.Tools[tool]
	l := Limit{}
	for _, e := range []Limit{t.Keys[key], c.Keys[key], t.Default, c.Default} {
		if l.Rate.IsZero() {
			l.Rate = e.Rate
		}
		if l.MaxInFlight == 0 {
			l.MaxInFlight = e.MaxInFlight
		}
	}
	if l.MaxInFlight == 0 {
		l.MaxInFlight = DefaultMaxInFlight
	}
	return l
}

// ToolMaxQueued is the cap of tool's calls, all keys together; NoLimit
// for none.
func (c Config) ToolMaxQueued(tool string) int {
	return orDefault(orDefault(c.Tools[tool].MaxQueued, c.MaxQueued), DefaultMaxQueued)
}

// StreamMaxQueued is the bound of the calls stream; NoLimit for none.
func (c Config) StreamMaxQueued() int { return orDefault(c.MaxQueuedCalls, DefaultMaxQueuedCalls) }

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// Validate checks every entry; an error names the entry ("tools.x.keys.y.
// max_in_flight") and the rule it breaks.
func (c Config) Validate() error {
	var errs []error
	check := func(where string, l Limit) {
		if err := l.Rate.validate(); err != nil {
			errs = append(errs, fmt.Errorf("limits: %s.rate: %w", where, err))
		}
		if l.MaxInFlight < NoLimit {
			errs = append(errs, fmt.Errorf("limits: %s.max_in_flight: must be a positive number of calls, 0 to inherit or -1 for none, got %d", where, l.MaxInFlight))
		}
	}
	capOK := func(where string, n int) {
		if n < NoLimit {
			errs = append(errs, fmt.Errorf("limits: %s: must be a positive number of calls, 0 for the default or -1 for none, got %d", where, n))
		}
	}
	keys := func(where string, m map[string]Limit) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			if err := ValidateKey(k); err != nil {
				errs = append(errs, fmt.Errorf("limits: %s[%q]: %w", where, k, err))
				continue
			}
			check(fmt.Sprintf("%s.%s", where, k), m[k])
		}
	}
	check("default", c.Default)
	keys("keys", c.Keys)
	capOK("max_queued", c.MaxQueued)
	capOK("max_queued_calls", c.MaxQueuedCalls)
	for _, name := range slices.Sorted(maps.Keys(c.Tools)) {
		if err := windlass.ValidateName(name); err != nil {
			errs = append(errs, fmt.Errorf("limits: tools[%q]: %w", name, err))
			continue
		}
		t := c.Tools[name]
		check("tools."+name+".default", t.Default)
		keys("tools."+name+".keys", t.Keys)
		capOK("tools."+name+".max_queued", t.MaxQueued)
	}
	return errors.Join(errs...)
}

// MaxKeyLength bounds a key: it is a metric label and part of Redis keys.
const MaxKeyLength = 64

// ValidateKey checks a caller's key: 1 to MaxKeyLength printable ASCII
// characters without spaces, quotes, backslashes or braces.
func ValidateKey(key string) error {
	if len(key) == 0 || len(key) > MaxKeyLength {
		return fmt.Errorf("a key must be 1 to %d characters, got %d", MaxKeyLength, len(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '{' || c == '}' {
			return fmt.Errorf("key %q: character %q at byte %d is not allowed (printable ASCII without spaces, quotes, backslashes or braces)", key, rune(c), i)
		}
	}
	return nil
}

// file is the YAML (or JSON) form of a Config; see Load.
type file struct {
	Default        fileLimit            `yaml:"default"`
	Keys           map[string]fileLimit `yaml:"keys"`
	Tools          map[string]fileTool  `yaml:"tools"`
	MaxQueued      int                  `yaml:"max_queued"`
	MaxQueuedCalls int                  `yaml:"max_queued_calls"`
}

type fileTool struct {
	Default   fileLimit            `yaml:"default"`
	Keys      map[string]fileLimit `yaml:"keys"`
	MaxQueued int                  `yaml:"max_queued"`
}

type fileLimit struct {
	Rate        string `yaml:"rate"`
	Burst       int    `yaml:"burst"`
	MaxInFlight int    `yaml:"max_in_flight"`
}

// Parse reads a limits file (YAML, of which JSON is a part); see the
// package doc for its form. Unknown fields, bad rates and bad caps are
// errors naming the entry.
func Parse(data []byte) (Config, error) {
	var f file
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return Config{}, fmt.Errorf("limits: %w", err)
	}
	var errs []error
	limit := func(where string, fl fileLimit) Limit {
		r, err := ParseRate(fl.Rate)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("limits: %s.rate: %w", where, err))
		case fl.Burst != 0 && r.IsZero():
			errs = append(errs, fmt.Errorf("limits: %s.burst: a burst needs a rate beside it", where))
		case fl.Burst != 0:
			r.Burst = fl.Burst
		}
		return Limit{Rate: r, MaxInFlight: fl.MaxInFlight}
	}
	limits := func(where string, m map[string]fileLimit) map[string]Limit {
		if m == nil {
			return nil
		}
		out := make(map[string]Limit, len(m))
		for k, fl := range m {
			out[k] = limit(where+"."+k, fl)
		}
		return out
	}
	c := Config{Default: limit("default", f.Default), Keys: limits("keys", f.Keys), MaxQueued: f.MaxQueued, MaxQueuedCalls: f.MaxQueuedCalls}
	for name, ft := range f.Tools {
		if c.Tools == nil {
			c.Tools = map[string]ToolLimits{}
		}
		c.Tools[name] = ToolLimits{Default: limit("tools."+name+".default", ft.Default), Keys: limits("tools."+name+".keys", ft.Keys), MaxQueued: ft.MaxQueued}
	}
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Load reads a limits file; see Parse.
func Load(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("limits: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
