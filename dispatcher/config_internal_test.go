package dispatcher

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/windlass-dev/windlass/registry"
)

// TestConfigValidate breaks one field of a valid Config at a time: the
// error names that field, and only a broken field is refused.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := Config{Conn: &nats.Conn{}, Registry: &registry.Registry{}}
	tests := []struct {
		name string
		edit func(*Config)
		want string // the whole error; "" for none
	}{
		{"valid", func(*Config) {}, ""},
		{"valid with every field set", func(c *Config) {
			c.ID, c.QueueAllowance, c.MaxWait, c.ApprovalWait = "d1", time.Second, time.Second, time.Second
		}, ""},
		{"no conn", func(c *Config) { c.Conn = nil }, "dispatcher: Config.Conn is nil: pass a *nats.Conn"},
		{"no registry", func(c *Config) { c.Registry = nil }, "dispatcher: Config.Registry is nil: pass a *registry.Registry"},
		{"negative queue allowance", func(c *Config) { c.QueueAllowance = -time.Second }, "dispatcher: Config.QueueAllowance must not be negative, got -1s"},
		{"negative max wait", func(c *Config) { c.MaxWait = -time.Second }, "dispatcher: Config.MaxWait must not be negative, got -1s"},
		{"negative approval wait", func(c *Config) { c.ApprovalWait = -time.Second }, "dispatcher: Config.ApprovalWait must not be negative, got -1s"},
		{"negative inline limit", func(c *Config) { c.InlineLimit = -1 }, "dispatcher: Config.InlineLimit must not be negative, got -1"},
		{"payload limit under the inline limit", func(c *Config) { c.InlineLimit, c.PayloadLimit = 2048, 1024 }, "dispatcher: Config.PayloadLimit must be at least InlineLimit (2048), got 1024"},
		{"payload limit under the default inline limit", func(c *Config) { c.PayloadLimit = 1024 }, ""},
		{"id not a subject token", func(c *Config) { c.ID = "a.b" }, `dispatcher: Config.ID "a.b" must match ^[a-zA-Z0-9_-]{1,64}$ (it is a subject token)`},
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
