package approval

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/registry"
)

// TestConfigValidate breaks one field of a valid Config at a time: the
// error names that field, and only a broken field is refused.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := Config{ // validate only checks that the clients are set
		Conn: &nats.Conn{}, Redis: struct{ redis.UniversalClient }{}, Registry: &registry.Registry{}, Signer: &release.Signer{},
		Policies: map[string]ToolPolicy{"pay": {Window: time.Minute, RequiredApprovals: 2}, "refund": {}},
	}
	tests := []struct {
		name string
		edit func(*Config)
		want string // the whole error; "" for none
	}{
		{"valid", func(*Config) {}, ""},
		{"no conn", func(c *Config) { c.Conn = nil }, "approval: Config.Conn is nil"},
		{"no redis", func(c *Config) { c.Redis = nil }, "approval: Config.Redis is nil"},
		{"no registry", func(c *Config) { c.Registry = nil }, "approval: Config.Registry is nil"},
		{"no signer", func(c *Config) { c.Signer = nil }, "approval: Config.Signer is nil: a release key is required (windlass approval keygen)"},
		{"negative default window", func(c *Config) { c.DefaultWindow = -time.Second }, "approval: Config.DefaultWindow must not be negative, got -1s"},
		{"negative payload limit", func(c *Config) { c.PayloadLimit = -1 }, "approval: Config.PayloadLimit must not be negative, got -1"},
		{"negative queue allowance", func(c *Config) { c.QueueAllowance = -time.Second }, "approval: Config.QueueAllowance must not be negative, got -1s"},
		{"negative replicas", func(c *Config) { c.Replicas = -1 }, "approval: Config.Replicas must not be negative, got -1"},
		{"negative replica acks", func(c *Config) { c.ReplicaAcks = -1 }, "approval: Config.ReplicaAcks must not be negative, got -1"},
		{"replica acks on a cluster", func(c *Config) { c.Redis, c.ReplicaAcks = &redis.ClusterClient{}, 1 }, "approval: Config.ReplicaAcks is not for a Redis Cluster client: WAIT cannot follow the connection that wrote; leave it 0"},
		{"negative policy window", func(c *Config) {
			c.Policies = map[string]ToolPolicy{"pay": {}, "refund": {Window: -time.Second}}
		}, `approval: Config.Policies["refund"].Window must not be negative, got -1s`},
		{"negative required approvals", func(c *Config) {
			c.Policies = map[string]ToolPolicy{"pay": {RequiredApprovals: -1}, "refund": {}}
		}, `approval: Config.Policies["pay"].RequiredApprovals must not be negative, got -1`},
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
