package deploy_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/windlass-dev/windlass/deploy"
)

// loadNATSConfig loads a configuration file with nats-server's own parser,
// strictly: a warning (an unknown field, an unused variable) fails too.
func loadNATSConfig(t *testing.T, file string) *server.Options {
	t.Helper()
	t.Setenv("NATS_SERVER_NAME", "nats-1")
	for _, env := range deploy.Users() {
		t.Setenv(env, "pw")
	}
	opts := &server.Options{}
	if err := opts.ProcessConfigFile(file); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return opts
}

// TestNATSConfig loads deploy/nats/nats.conf (which includes accounts.conf)
// and checks the cluster, JetStream's sync and the shape of the
// permissions: the gated calls only the approval service may publish, one
// inbox per user, one result subject per dispatcher.
func TestNATSConfig(t *testing.T) {
	opts := loadNATSConfig(t, "nats/nats.conf")
	if !opts.JetStream || !opts.SyncAlways {
		t.Errorf("JetStream %v, sync always %v: want both", opts.JetStream, opts.SyncAlways)
	}
	if len(opts.Routes) != 3 || opts.Cluster.Name == "" {
		t.Errorf("cluster %q with %d routes, want 3", opts.Cluster.Name, len(opts.Routes))
	}
	if opts.SystemAccount != "SYS" {
		t.Errorf("system account %q", opts.SystemAccount)
	}
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
		if u.Account == nil || (u.Account.Name != "WINDLASS" && u.Username != "sys") {
			t.Errorf("user %s is not in the WINDLASS account", u.Username)
		}
	}
	for name := range deploy.Users() {
		if users[name] == nil {
			t.Fatalf("accounts.conf has no user %s", name)
		}
	}
	gated := users["dispatcher-a"].Permissions.Publish.Deny
	if len(gated) == 0 {
		t.Fatal("dispatchers are denied no gated call subject")
	}
	var released []string
	for _, s := range users["approval"].Permissions.Publish.Allow {
		if strings.HasPrefix(s, "windlass.call.") {
			released = append(released, s)
		}
	}
	if !slices.Equal(released, gated) {
		t.Errorf("the approval service publishes calls on %v; the gated calls (dispatchers' deny list) are %v: they must be the same", released, gated)
	}
	for name, u := range users {
		if name == "admin" || name == "sys" {
			if u.Permissions != nil {
				t.Errorf("%s has restricted permissions", name)
			}
			continue
		}
		sub := u.Permissions.Subscribe.Allow
		if !slices.Contains(sub, deploy.InboxPrefix(name)+".>") {
			t.Errorf("%s may not subscribe to its inbox %s.>: %v", name, deploy.InboxPrefix(name), sub)
		}
		for _, s := range sub {
			if s == ">" || strings.HasPrefix(s, "_INBOX.") || s == "windlass.>" || s == "windlass.result.*.*" {
				t.Errorf("%s may subscribe to %s", name, s)
			}
		}
		if strings.HasPrefix(name, "dispatcher-") {
			want := []string{"windlass.result." + name + ".*", deploy.InboxPrefix(name) + ".>"}
			if !slices.Equal(sub, want) {
				t.Errorf("%s subscribes to %v, want exactly %v", name, sub, want)
			}
		}
	}
}

// TestNATSAccountsAlone loads accounts.conf on its own, as deploy/local and
// the integration tests do.
func TestNATSAccountsAlone(t *testing.T) {
	opts := loadNATSConfig(t, "nats/accounts.conf")
	if len(opts.Users) != len(deploy.Users()) {
		t.Errorf("%d users, want %d", len(opts.Users), len(deploy.Users()))
	}
}

// natsValues is the part of the NATS Helm chart's (1.x) values that
// deploy/helm/nats-values.yaml sets; decoding rejects any other field.
type natsValues struct {
	Config struct {
		Cluster struct {
			Enabled  bool `yaml:"enabled"`
			Replicas int  `yaml:"replicas"`
		} `yaml:"cluster"`
		JetStream struct {
			Enabled   bool `yaml:"enabled"`
			FileStore struct {
				Enabled bool   `yaml:"enabled"`
				Dir     string `yaml:"dir"`
				PVC     struct {
					Enabled bool   `yaml:"enabled"`
					Size    string `yaml:"size"`
				} `yaml:"pvc"`
			} `yaml:"fileStore"`
			Merge map[string]any `yaml:"merge"`
		} `yaml:"jetstream"`
		Monitor struct {
			Enabled bool `yaml:"enabled"`
			Port    int  `yaml:"port"`
		} `yaml:"monitor"`
		Merge map[string]any `yaml:"merge"`
	} `yaml:"config"`
	Container struct {
		Image struct {
			Tag string `yaml:"tag"`
		} `yaml:"image"`
		Env map[string]struct {
			ValueFrom struct {
				SecretKeyRef struct {
					Name string `yaml:"name"`
					Key  string `yaml:"key"`
				} `yaml:"secretKeyRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		Patch []jsonPatch    `yaml:"patch"`
		Merge map[string]any `yaml:"merge"`
	} `yaml:"container"`
	PodTemplate struct {
		Patch                     []jsonPatch `yaml:"patch"`
		TopologySpreadConstraints map[string]struct {
			MaxSkew           int    `yaml:"maxSkew"`
			WhenUnsatisfiable string `yaml:"whenUnsatisfiable"`
		} `yaml:"topologySpreadConstraints"`
	} `yaml:"podTemplate"`
	PodDisruptionBudget struct {
		Enabled bool `yaml:"enabled"`
	} `yaml:"podDisruptionBudget"`
	NatsBox struct {
		Enabled bool `yaml:"enabled"`
	} `yaml:"natsBox"`
}

type jsonPatch struct {
	Op    string         `yaml:"op"`
	Path  string         `yaml:"path"`
	Value map[string]any `yaml:"value"`
}

// TestHelmValues checks the NATS chart's values: three JetStream replicas
// syncing always, the tested release, the accounts file included from
// where it is mounted, and every password variable accounts.conf reads.
func TestHelmValues(t *testing.T) {
	var v natsValues
	decodeStrict(t, "helm/nats-values.yaml", readFile(t, "helm/nats-values.yaml"), &v)
	c := v.Config
	if !c.Cluster.Enabled || c.Cluster.Replicas != 3 || !c.JetStream.Enabled || !c.JetStream.FileStore.PVC.Enabled {
		t.Errorf("want a three-replica cluster with JetStream on persistent volumes: %+v", c)
	}
	if c.JetStream.Merge["sync_interval"] != "always" {
		t.Errorf("jetstream sync_interval %v, want always", c.JetStream.Merge["sync_interval"])
	}
	if !c.Monitor.Enabled || c.Monitor.Port != 8222 {
		t.Errorf("monitoring %+v: the KEDA scaler reads port 8222", c.Monitor)
	}
	if want := natsServerVersion(t) + "-alpine"; v.Container.Image.Tag != want {
		t.Errorf("image tag %s, want %s (the release the tests load the configuration with)", v.Container.Image.Tag, want)
	}
	for _, env := range deploy.Users() {
		if v.Container.Env[env].ValueFrom.SecretKeyRef.Key == "" {
			t.Errorf("the NATS pods get no %s", env)
		}
	}
	if len(v.Container.Env) != len(deploy.Users()) {
		t.Errorf("%d variables, want the %d passwords", len(v.Container.Env), len(deploy.Users()))
	}
	include, _ := c.Merge["$include"].(string)
	var mounted, volume string
	for _, p := range v.Container.Patch {
		if p.Path == "/volumeMounts/-" {
			mounted, _ = p.Value["mountPath"].(string)
			volume, _ = p.Value["name"].(string)
		}
	}
	var hasVolume bool
	for _, p := range v.PodTemplate.Patch {
		hasVolume = hasVolume || (p.Path == "/spec/volumes/-" && p.Value["name"] == volume)
	}
	// The chart's nats.conf lives in /etc/nats-config; includes are relative to it.
	if include != "./windlass/accounts.conf" || mounted != "/etc/nats-config/windlass" || !hasVolume {
		t.Errorf("include %q, mounted at %q (volume %q found %v): accounts.conf must be included from its mount", include, mounted, volume, hasVolume)
	}
}
