package mcpserver

import (
	"testing"
	"time"

	"github.com/windlass-dev/windlass/dispatcher"
)

// TestConfigValidate breaks one field of a valid Config at a time: the
// error names that field, and only a broken field is refused.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := Config{Dispatcher: &dispatcher.Dispatcher{}}
	tests := []struct {
		name string
		edit func(*Config)
		want string // the whole error; "" for none
	}{
		{"valid", func(*Config) {}, ""},
		{"no dispatcher", func(c *Config) { c.Dispatcher = nil }, "mcpserver: Config.Dispatcher is nil: pass a *dispatcher.Dispatcher"},
		{"negative queue allowance", func(c *Config) { c.QueueAllowance = -time.Second }, "mcpserver: Config.QueueAllowance must not be negative, got -1s"},
		{"negative approval wait", func(c *Config) { c.ApprovalWait = -time.Second }, "mcpserver: Config.ApprovalWait must not be negative, got -1s"},
		{"negative session timeout", func(c *Config) { c.SessionTimeout = -time.Second }, "mcpserver: Config.SessionTimeout must not be negative, got -1s"},
		{"negative keep-alive", func(c *Config) { c.KeepAlive = -time.Second }, "mcpserver: Config.KeepAlive must not be negative, got -1s"},
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
