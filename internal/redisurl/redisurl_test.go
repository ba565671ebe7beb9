package redisurl_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/windlass-dev/windlass/internal/redisurl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		url   string
		check func(t *testing.T, o *redisurl.Options)
	}{
		{"single", "redis://127.0.0.1:6380/2", func(t *testing.T, o *redisurl.Options) {
			s := single(t, o)
			if s.Addr != "127.0.0.1:6380" || s.DB != 2 || s.TLSConfig != nil || s.Password != "" {
				t.Errorf("Addr %s DB %d TLS %v password %q", s.Addr, s.DB, s.TLSConfig, s.Password)
			}
		}},
		{"single, defaults", "redis://", func(t *testing.T, o *redisurl.Options) {
			if s := single(t, o); s.Addr != "localhost:6379" || s.DB != 0 {
				t.Errorf("Addr %s DB %d", s.Addr, s.DB)
			}
		}},
		{"single, TLS and ACL user", "rediss://app:s3cret@redis.example:6380/0?dial_timeout=3s", func(t *testing.T, o *redisurl.Options) {
			s := single(t, o)
			if s.TLSConfig == nil || s.TLSConfig.ServerName != "redis.example" || s.Username != "app" || s.Password != "s3cret" || s.DialTimeout != 3*time.Second {
				t.Errorf("TLS %v user %q password %q dial timeout %v", s.TLSConfig, s.Username, s.Password, s.DialTimeout)
			}
		}},
		{"single, password only", "redis://:s3cret@h:6379", func(t *testing.T, o *redisurl.Options) {
			if s := single(t, o); s.Username != "" || s.Password != "s3cret" {
				t.Errorf("user %q password %q", s.Username, s.Password)
			}
		}},
		{"cluster", "redis+cluster://app:s3cret@n1:7000?addr=n2:7001&addr=n3:7002&pool_size=7", func(t *testing.T, o *redisurl.Options) {
			if o.Kind != redisurl.Cluster || o.Cluster == nil || o.Single != nil || o.Sentinel != nil {
				t.Fatalf("Kind %v, options %+v", o.Kind, o)
			}
			c := o.Cluster
			if strings.Join(c.Addrs, ",") != "n1:7000,n2:7001,n3:7002" || c.Username != "app" || c.Password != "s3cret" || c.PoolSize != 7 || c.TLSConfig != nil {
				t.Errorf("Addrs %v user %q password %q pool %d TLS %v", c.Addrs, c.Username, c.Password, c.PoolSize, c.TLSConfig)
			}
		}},
		{"cluster, TLS, db 0", "rediss+cluster://:pw@n1:7000/0", func(t *testing.T, o *redisurl.Options) {
			if o.Kind != redisurl.Cluster {
				t.Fatalf("Kind %v", o.Kind)
			}
			if c := o.Cluster; c.TLSConfig == nil || c.TLSConfig.ServerName != "n1" || c.Password != "pw" {
				t.Errorf("TLS %v password %q", c.TLSConfig, c.Password)
			}
		}},
		{"sentinel", "redis+sentinel://sentuser:sentpw@s1:26379/3?master_name=windlass&addr=s2:26380&addr=s3:26381&password=masterpw&username=app", func(t *testing.T, o *redisurl.Options) {
			if o.Kind != redisurl.Sentinel || o.Sentinel == nil || o.Single != nil || o.Cluster != nil {
				t.Fatalf("Kind %v, options %+v", o.Kind, o)
			}
			f := o.Sentinel
			if f.MasterName != "windlass" || strings.Join(f.SentinelAddrs, ",") != "s1:26379,s2:26380,s3:26381" || f.DB != 3 {
				t.Errorf("master %q sentinels %v db %d", f.MasterName, f.SentinelAddrs, f.DB)
			}
			if f.SentinelUsername != "sentuser" || f.SentinelPassword != "sentpw" || f.Username != "app" || f.Password != "masterpw" {
				t.Errorf("sentinel auth %q/%q, master auth %q/%q", f.SentinelUsername, f.SentinelPassword, f.Username, f.Password)
			}
		}},
		{"sentinel, TLS", "rediss+sentinel://s1:26379?master_name=m&skip_verify=true", func(t *testing.T, o *redisurl.Options) {
			if o.Kind != redisurl.Sentinel {
				t.Fatalf("Kind %v", o.Kind)
			}
			if f := o.Sentinel; f.TLSConfig == nil || !f.TLSConfig.InsecureSkipVerify || f.TLSConfig.ServerName != "s1" {
				t.Errorf("TLS %+v", f.TLSConfig)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := redisurl.Parse(tt.url)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.url, err)
			}
			tt.check(t, o)
		})
	}
}

func single(t *testing.T, o *redisurl.Options) *redis.Options {
	t.Helper()
	if o.Kind != redisurl.Single || o.Single == nil || o.Cluster != nil || o.Sentinel != nil {
		t.Fatalf("Kind %v, options %+v; want single", o.Kind, o)
	}
	return o.Single
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, url, want string
	}{
		{"unknown scheme", "http://h:6379", `unknown scheme "http"`},
		{"no scheme", "h:6379", `unknown scheme "h"`},
		{"empty", "", `unknown scheme ""`},
		{"bad port", "redis://h:port/0", "invalid port"},
		{"bad db", "redis://h:6379/x", "invalid database number"},
		{"unknown option", "redis://h:6379/0?bogus=1", "unexpected option: bogus"},
		{"addr on a single server", "redis://h:6379?addr=h2:6379", "unexpected option: addr"},
		{"cluster db", "redis+cluster://n1:7000/3", "database 0 only"},
		{"cluster bad seed", "redis+cluster://n1:7000?addr=n2", "unable to parse addr param: n2"},
		{"sentinel without master", "redis+sentinel://s1:26379?addr=s2:26379", "master_name=NAME"},
		{"sentinel empty master", "redis+sentinel://s1:26379?master_name=", "master_name=NAME"},
		{"sentinel bad option", "redis+sentinel://s1:26379?master_name=m&pool=3", "unexpected option: pool"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := redisurl.Parse(tt.url)
			var ue *redisurl.URLError
			if o != nil || !errors.As(err, &ue) {
				t.Fatalf("Parse(%q) = %v, %v; want a *URLError", tt.url, o, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) || !strings.Contains(msg, redisurl.Forms) || !strings.Contains(msg, `"`+tt.url+`"`) {
				t.Errorf("error %q: want it to say %q, quote the URL and name the forms", msg, tt.want)
			}
		})
	}
}

// A refused URL's error masks its passwords.
func TestParseErrorMasksPasswords(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"redis://app:s3cret@h:6379/0?bogus=1",
		"redis+sentinel://u:s3cret@s1:26379?password=s3cret",
		"redis://app:s3cret@h:port",
		"redis://app:s3/cr?et@h:6379",
	} {
		_, err := redisurl.Parse(u)
		if err == nil || strings.Contains(err.Error(), "s3") {
			t.Errorf("Parse(%q) = %v; want an error without the password", u, err)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"redis://h:6379/0", "redis://h:6379/0"},
		{"redis://app@h:6379/0", "redis://app@h:6379/0"},
		{"redis://app:pw@h:6379/0", "redis://app:xxxxx@h:6379/0"},
		{"rediss://:pw@h", "rediss://:xxxxx@h"},
		{"redis+sentinel://u:pw@s1?master_name=m&password=mpw&addr=s2", "redis+sentinel://u:xxxxx@s1?master_name=m&password=xxxxx&addr=s2"},
		{"redis://u:p@ss@h", "redis://u:xxxxx@h"},
		{"not a url:pw@x", "not a url:pw@x"},
	} {
		if got := redisurl.Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestKindString(t *testing.T) {
	t.Parallel()
	for k, want := range map[redisurl.Kind]string{redisurl.Single: "single", redisurl.Cluster: "cluster", redisurl.Sentinel: "sentinel", 7: "Kind(7)"} {
		if k.String() != want {
			t.Errorf("%d.String() = %q, want %q", int(k), k.String(), want)
		}
	}
}
