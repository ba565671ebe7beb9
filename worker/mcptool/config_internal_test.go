package mcptool

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/windlass-dev/windlass/worker"
)

// TestConfigValidate breaks one field of a valid Config at a time: the
// error names that field, and only a broken field is refused.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := Config{
		Servers: []Server{{URL: "http://127.0.0.1:9/mcp"}, {URL: "https://mcp.example.com/mcp", Prefix: "ex_"}},
		Worker:  worker.Config{JetStream: struct{ jetstream.JetStream }{}}, // validate only checks it is set
	}
	tests := []struct {
		name string
		edit func(*Config)
		want string // the whole error; "" for none
	}{
		{"valid", func(*Config) {}, ""},
		{"no servers", func(c *Config) { c.Servers = nil }, "mcptool: Config.Servers is empty: name at least one MCP server URL"},
		{"no jetstream", func(c *Config) { c.Worker.JetStream = nil }, "mcptool: Config.Worker.JetStream is nil: pass jetstream.New(nc)"},
		{"negative tool timeout", func(c *Config) { c.ToolTimeout = -time.Second }, "mcptool: Config.ToolTimeout must not be negative, got -1s"},
		{"negative min backoff", func(c *Config) { c.MinBackoff = -time.Second }, "mcptool: Config.MinBackoff must not be negative, got -1s"},
		{"negative max backoff", func(c *Config) { c.MaxBackoff = -time.Second }, "mcptool: Config.MaxBackoff must not be negative, got -1s"},
		{"server url not http", func(c *Config) { c.Servers = []Server{{URL: "ftp://mcp.example.com"}} },
			`mcptool: Config.Servers[0].URL "ftp://mcp.example.com": want an http or https URL`},
		{"server url without host", func(c *Config) { c.Servers = []Server{{URL: "http://a.example.com"}, {URL: "http:///mcp"}} },
			`mcptool: Config.Servers[1].URL "http:///mcp": want an http or https URL`},
		{"server url listed twice", func(c *Config) {
			c.Servers = []Server{{URL: "http://a.example.com"}, {URL: "http://a.example.com", Prefix: "b_"}}
		},
			`mcptool: Config.Servers[1].URL "http://a.example.com" is listed twice`},
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
