package registry

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestConfigValidate breaks one field of a valid Config at a time: the
// error names that field, and only a broken field is refused.
func TestConfigValidate(t *testing.T) {
	t.Parallel()
	valid := Config{Client: struct{ redis.UniversalClient }{}} // validate only checks it is set
	tests := []struct {
		name string
		edit func(*Config)
		want string // the whole error; "" for none
	}{
		{"valid", func(*Config) {}, ""},
		{"valid short ttl", func(c *Config) { c.TTL = 30 * time.Millisecond }, ""},
		{"no client", func(c *Config) { c.Client = nil }, "registry: Config.Client is nil: pass a go-redis client"},
		{"negative ttl", func(c *Config) { c.TTL = -time.Second }, "registry: Config.TTL must not be negative, got -1s"},
		{"negative heartbeat interval", func(c *Config) { c.HeartbeatInterval = -time.Second }, "registry: Config.HeartbeatInterval must not be negative, got -1s"},
		{"negative resync interval", func(c *Config) { c.ResyncInterval = -time.Second }, "registry: Config.ResyncInterval must not be negative, got -1s"},
		{"negative full resync interval", func(c *Config) { c.FullResyncInterval = -time.Second }, "registry: Config.FullResyncInterval must not be negative, got -1s"},
		{"heartbeat not under ttl", func(c *Config) { c.TTL, c.HeartbeatInterval = time.Second, time.Second },
			"registry: Config.HeartbeatInterval (1s) must be shorter than Config.TTL (1s)"},
		{"heartbeat not under the default ttl", func(c *Config) { c.HeartbeatInterval = time.Minute },
			"registry: Config.HeartbeatInterval (1m0s) must be shorter than Config.TTL (10s)"},
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

// TestLegacyLayoutOn: the legacy layout is written unless told not to, and
// never on a Redis Cluster under a prefix without a hash tag, where its
// script would fail with CROSSSLOT.
func TestLegacyLayoutOn(t *testing.T) {
	t.Parallel()
	single := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	t.Cleanup(func() { _ = single.Close(); _ = cluster.Close() })
	tests := []struct {
		name   string
		client redis.UniversalClient
		prefix string
		off    bool
		want   bool
	}{
		{"single node", single, "", false, true},
		{"single node, turned off", single, "", true, false},
		{"cluster, no hash tag", cluster, "windlass:", false, false},
		{"cluster, hash tag", cluster, "{windlass}:", false, true},
		{"cluster, empty braces", cluster, "{}windlass:", false, false},
		{"cluster, hash tag, turned off", cluster, "{windlass}:", true, false},
	}
	for _, tt := range tests {
		r := &Registry{cfg: Config{Client: tt.client, Prefix: tt.prefix, NoLegacyLayout: tt.off}.withDefaults()}
		if got := r.legacyOn(); got != tt.want {
			t.Errorf("%s: legacyOn() = %v, want %v", tt.name, got, tt.want)
		}
	}
}
