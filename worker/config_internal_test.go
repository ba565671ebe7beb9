package worker

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestConfigValidate breaks one field of a valid Config at a time: the
// error names that field, and only a broken field is refused.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := Config{JetStream: struct{ jetstream.JetStream }{}} // validate only checks it is set
	tests := []struct {
		name string
		edit func(*Config)
		want string // the whole error; "" for none
	}{
		{"valid", func(*Config) {}, ""},
		{"valid shortest ack wait", func(c *Config) { c.AckWait = 300 * time.Millisecond }, ""},
		{"valid heartbeat bounds", func(c *Config) { c.AckWait, c.Heartbeat = 3*time.Second, time.Second }, ""},
		{"no jetstream", func(c *Config) { c.JetStream = nil }, "worker: Config.JetStream is nil: pass jetstream.New(nc)"},
		{"negative max concurrency", func(c *Config) { c.MaxConcurrency = -1 }, "worker: Config.MaxConcurrency must not be negative, got -1"},
		{"negative ack wait", func(c *Config) { c.AckWait = -time.Second },
			"worker: Config.AckWait must be at least 300ms (in-progress acks go every AckWait/3), got -1s"},
		{"short ack wait", func(c *Config) { c.AckWait = 299 * time.Millisecond },
			"worker: Config.AckWait must be at least 300ms (in-progress acks go every AckWait/3), got 299ms"},
		{"negative max deliver", func(c *Config) { c.MaxDeliver = -1 }, "worker: Config.MaxDeliver must not be negative, got -1"},
		{"negative heartbeat", func(c *Config) { c.Heartbeat = -time.Second }, "worker: Config.Heartbeat must be from 10ms to AckWait/3, got -1s"},
		{"short heartbeat", func(c *Config) { c.Heartbeat = 9 * time.Millisecond }, "worker: Config.Heartbeat must be from 10ms to AckWait/3, got 9ms"},
		{"heartbeat over a third of the ack wait", func(c *Config) { c.AckWait, c.Heartbeat = 3*time.Second, time.Second+1 },
			"worker: Config.Heartbeat must be from 10ms to AckWait/3, got 1.000000001s"},
		{"heartbeat over a third of the default ack wait", func(c *Config) { c.Heartbeat = 11 * time.Second },
			"worker: Config.Heartbeat must be from 10ms to AckWait/3, got 11s"},
		{"negative inline limit", func(c *Config) { c.InlineLimit = -1 }, "worker: Config.InlineLimit must not be negative, got -1"},
		{"payload limit under the inline limit", func(c *Config) { c.InlineLimit, c.PayloadLimit = 2048, 1024 }, "worker: Config.PayloadLimit must be at least InlineLimit (2048), got 1024"},
		{"payload limit under the default inline limit", func(c *Config) { c.PayloadLimit = 1024 }, ""},
		{"negative shutdown grace", func(c *Config) { c.ShutdownGrace = -time.Second }, "worker: Config.ShutdownGrace must not be negative, got -1s"},
	}
	for _, tt := range tests {
		cfg := valid
		tt.edit(&cfg)
		err := cfg.withDefaults().validate()
		if got := errText(err); got != tt.want {
			t.Errorf("%s: validate() = %q, want %q", tt.name, got, tt.want)
		}
	}
}

// errText is err's text, "" for nil.
func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
