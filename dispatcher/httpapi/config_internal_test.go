package httpapi

import (
	"net/http"
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
		{"valid with an extra handler", func(c *Config) { c.Extra = map[string]http.Handler{"/mcp": http.NotFoundHandler()} }, ""},
		{"no dispatcher", func(c *Config) { c.Dispatcher = nil }, "httpapi: Config.Dispatcher is nil: pass a *dispatcher.Dispatcher"},
		{"negative max body bytes", func(c *Config) { c.MaxBodyBytes = -1 }, "httpapi: Config.MaxBodyBytes must not be negative, got -1"},
		{"negative body timeout", func(c *Config) { c.BodyTimeout = -time.Second }, "httpapi: Config.BodyTimeout must not be negative, got -1s"},
		{"negative max wait", func(c *Config) { c.MaxWait = -time.Second }, "httpapi: Config.MaxWait must not be negative, got -1s"},
		{"negative max staleness", func(c *Config) { c.MaxStaleness = -time.Second }, "httpapi: Config.MaxStaleness must not be negative, got -1s"},
		{"negative keep-alive", func(c *Config) { c.KeepAlive = -time.Second }, "httpapi: Config.KeepAlive must not be negative, got -1s"},
		{"negative max streams", func(c *Config) { c.MaxStreams = -1 }, "httpapi: Config.MaxStreams must not be negative (0 is the default), got -1"},
		{"negative max streams per key", func(c *Config) { c.MaxStreamsPerKey = -1 }, "httpapi: Config.MaxStreamsPerKey must not be negative (0 is the default), got -1"},
		{"nil extra handler", func(c *Config) {
			c.Extra = map[string]http.Handler{"/a": http.NotFoundHandler(), "/mcp": nil}
		}, `httpapi: Config.Extra["/mcp"] is nil`},
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
