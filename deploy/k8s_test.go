package deploy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	kusttypes "sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/windlass-dev/windlass/deploy"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/redisurl"
)

// scaledObject is KEDA's ScaledObject (keda.sh/v1alpha1), the fields the
// manifests use; decoding rejects any other.
type scaledObject struct {
	metav1.TypeMeta `json:",inline"`
	Metadata        metav1.ObjectMeta `json:"metadata"`
	Spec            struct {
		ScaleTargetRef struct {
			Name string `json:"name"`
		} `json:"scaleTargetRef"`
		PollingInterval int32 `json:"pollingInterval"`
		CooldownPeriod  int32 `json:"cooldownPeriod"`
		MinReplicaCount int32 `json:"minReplicaCount"`
		MaxReplicaCount int32 `json:"maxReplicaCount"`
		Advanced        struct {
			HorizontalPodAutoscalerConfig struct {
				Behavior map[string]any `json:"behavior"`
			} `json:"horizontalPodAutoscalerConfig"`
		} `json:"advanced"`
		Triggers []struct {
			Type     string            `json:"type"`
			Metadata map[string]string `json:"metadata"`
		} `json:"triggers"`
	} `json:"spec"`
}

// natsJetStreamScaler is every metadata field of KEDA's nats-jetstream
// scaler.
var natsJetStreamScaler = []string{"natsServerMonitoringEndpoint", "account", "stream", "consumer", "lagThreshold", "activationLagThreshold", "useHttps"}

// rendered is one kustomization's output, decoded strictly by kind.
type rendered struct {
	deployments map[string]*appsv1.Deployment
	services    []*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
	secrets     map[string]*corev1.Secret
	scaled      []*scaledObject
}

// build runs kustomize on dir (of a copy of deploy/k8s with a placeholder
// for each secret file the production overlay reads) and decodes every
// resource strictly into its typed object.
func build(t *testing.T, dir string) rendered {
	t.Helper()
	root := t.TempDir()
	if err := os.CopyFS(filepath.Join(root, "k8s"), os.DirFS("k8s")); err != nil {
		t.Fatal(err)
	}
	checkKustomizations(t, filepath.Join(root, "k8s"))
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), filepath.Join(root, "k8s", dir))
	if err != nil {
		t.Fatalf("kustomize build k8s/%s: %v", dir, err)
	}
	r := rendered{deployments: map[string]*appsv1.Deployment{}, secrets: map[string]*corev1.Secret{}}
	for _, res := range m.Resources() {
		b, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		where := fmt.Sprintf("k8s/%s: %s %s", dir, res.GetKind(), res.GetName())
		var obj any
		switch res.GetKind() {
		case "Deployment":
			d := &appsv1.Deployment{}
			r.deployments[res.GetName()], obj = d, d
		case "Service":
			s := &corev1.Service{}
			r.services, obj = append(r.services, s), s
		case "PodDisruptionBudget":
			p := &policyv1.PodDisruptionBudget{}
			r.pdbs, obj = append(r.pdbs, p), p
		case "Secret":
			s := &corev1.Secret{}
			r.secrets[res.GetName()], obj = s, s
		case "ScaledObject":
			s := &scaledObject{}
			r.scaled, obj = append(r.scaled, s), s
		case "Namespace":
			obj = &corev1.Namespace{}
		default:
			t.Errorf("%s: no check for this kind", where)
			continue
		}
		if err := yaml.UnmarshalStrict(b, obj); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}
	return r
}

// checkKustomizations decodes each kustomization strictly and checks that
// every manifest beside it is one it uses, and writes the production
// overlay's secret files.
func checkKustomizations(t *testing.T, k8s string) {
	t.Helper()
	for _, dir := range []string{"base", "overlays/production"} {
		var k kusttypes.Kustomization
		if err := yaml.UnmarshalStrict(readFile(t, filepath.Join(k8s, dir, "kustomization.yaml")), &k); err != nil {
			t.Fatalf("k8s/%s/kustomization.yaml: %v", dir, err)
		}
		used := slices.Clone(k.Resources)
		for _, p := range k.Patches {
			used = append(used, p.Path)
		}
		files, _ := filepath.Glob(filepath.Join(k8s, dir, "*.yaml"))
		for _, f := range files {
			if name := filepath.Base(f); name != "kustomization.yaml" && !slices.Contains(used, name) {
				t.Errorf("k8s/%s/%s is not used by its kustomization", dir, name)
			}
		}
		for _, g := range k.SecretGenerator {
			for _, f := range g.FileSources {
				_, path, _ := strings.Cut(f, "=")
				if err := os.WriteFile(filepath.Join(k8s, dir, path), []byte("placeholder"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// TestKubernetes builds the base and the production overlay and checks the
// rendered objects: every container runs a windlass subcommand with flags
// and variables the binary accepts, probes and Services on the ports the
// process listens on, resources, a PodDisruptionBudget per Deployment, a
// grace period longer than the worker's drain, Secret keys that exist,
// and workers scaled on each of their tools' consumers.
func TestKubernetes(t *testing.T) {
	bin := buildBinary(t)
	for _, dir := range []string{"base", "overlays/production"} {
		t.Run(dir, func(t *testing.T) {
			r := build(t, dir)
			if len(r.deployments) != 3 {
				t.Errorf("%d Deployments, want the worker, the approval service and the dispatcher", len(r.deployments))
			}
			checkDispatcherDeployment(t, r)
			checkRedisURLSecret(t, r)
			for name, d := range r.deployments {
				checkDeployment(t, bin, r, name, d)
				if dir == "overlays/production" {
					for _, c := range d.Spec.Template.Spec.Containers {
						if strings.HasSuffix(c.Image, ":latest") || !strings.Contains(c.Image, ":") {
							t.Errorf("%s: image %q is not pinned", name, c.Image)
						}
					}
				}
			}
			for _, s := range r.services {
				checkService(t, r, s)
			}
			if len(r.scaled) != 1 {
				t.Fatalf("%d ScaledObjects, want one for the workers", len(r.scaled))
			}
			checkScaledObject(t, r, r.scaled[0])
		})
	}
}

var envRef = regexp.MustCompile(`\$\(([A-Z0-9_]+)\)`)

func checkDeployment(t *testing.T, bin binary, r rendered, name string, d *appsv1.Deployment) {
	t.Helper()
	spec := d.Spec.Template.Spec
	if sc := spec.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Errorf("%s: not runAsNonRoot", name)
	}
	if !slices.ContainsFunc(r.pdbs, func(p *policyv1.PodDisruptionBudget) bool {
		sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
		return err == nil && sel.Matches(labels.Set(d.Spec.Template.Labels))
	}) {
		t.Errorf("%s: no PodDisruptionBudget selects its pods", name)
	}
	for _, c := range spec.Containers {
		where := name + "/" + c.Name
		env := map[string]string{}
		defined := map[string]bool{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
			for _, ref := range envRef.FindAllStringSubmatch(e.Value, -1) {
				if !defined[ref[1]] {
					t.Errorf("%s: %s uses $(%s) before it is defined", where, e.Name, ref[1])
				}
			}
			defined[e.Name] = true
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				ref := e.ValueFrom.SecretKeyRef
				s := r.secrets[ref.Name]
				_, inData := s.Data[ref.Key]
				_, inString := s.StringData[ref.Key]
				if s == nil || (!inData && !inString) {
					t.Errorf("%s: %s reads key %q of Secret %q, which has no such key", where, e.Name, ref.Key, ref.Name)
				}
			}
		}
		referenced := func(v string) bool { // substituted into another variable
			return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return strings.Contains(e.Value, "$("+v+")") })
		}
		bin.checkInvocation(t, where, append(slices.Clone(c.Command), c.Args...), env, referenced)
		checkNATSUser(t, where, env)
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		if l, ok := env["WINDLASS_LISTEN"]; ok && int32(portOf(t, where, l)) != ports["http"] {
			t.Errorf("%s: WINDLASS_LISTEN %s, but the http port is %d", where, l, ports["http"])
		}
		// The probes: on WINDLASS_HEALTH_LISTEN, or the dispatcher's API.
		probes, ok := env["WINDLASS_HEALTH_LISTEN"]
		if !ok && slices.Equal(c.Args, []string{"dispatcher"}) {
			probes = env["WINDLASS_LISTEN"]
		}
		health := int32(portOf(t, where, probes))
		for kind, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			want := map[string]string{"readiness": "/readyz", "liveness": "/healthz"}[kind]
			switch {
			case p == nil || p.HTTPGet == nil:
				t.Errorf("%s: no HTTP %s probe", where, kind)
			case p.HTTPGet.Path != want:
				t.Errorf("%s: %s probe on %s, want %s", where, kind, p.HTTPGet.Path, want)
			case ports[p.HTTPGet.Port.StrVal] != health && p.HTTPGet.Port.IntVal != health:
				t.Errorf("%s: %s probe on port %s, but WINDLASS_HEALTH_LISTEN is port %d", where, kind, p.HTTPGet.Port.String(), health)
			}
		}
		req := c.Resources.Requests
		if req.Cpu().IsZero() || req.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: resources %v: want CPU and memory requests and a memory limit", where, c.Resources)
		}
		if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: root file system not read-only", where)
		}
		if len(c.Args) > 0 && c.Args[0] == "worker" {
			grace, err := time.ParseDuration(env["WINDLASS_SHUTDOWN_GRACE"])
			if err != nil {
				t.Errorf("%s: WINDLASS_SHUTDOWN_GRACE: %v", where, err)
			}
			// Drain: running calls finish within the grace, then the worker
			// withdraws from the registry (up to 5s).
			if tg := spec.TerminationGracePeriodSeconds; tg == nil || time.Duration(*tg)*time.Second <= grace+5*time.Second {
				t.Errorf("%s: terminationGracePeriodSeconds %d must exceed the shutdown grace %s plus 5s", where, ptrValue(tg), grace)
			}
		}
	}
}

// checkNATSUser checks that a process connects as a user of accounts.conf
// with that user's inbox prefix (and, for a dispatcher, its results id).
func checkNATSUser(t *testing.T, where string, env map[string]string) {
	t.Helper()
	u := env["WINDLASS_NATS_URL"]
	user, _, ok := strings.Cut(strings.TrimPrefix(u, "nats://"), ":")
	if _, known := deploy.Users()[user]; !ok || !known {
		t.Errorf("%s: WINDLASS_NATS_URL %q names no user of accounts.conf", where, u)
	}
	if !strings.HasSuffix(u, ":4222") {
		t.Errorf("%s: WINDLASS_NATS_URL %q is not the NATS client port 4222", where, u)
	}
	if env["WINDLASS_NATS_INBOX_PREFIX"] != deploy.InboxPrefix(user) {
		t.Errorf("%s: WINDLASS_NATS_INBOX_PREFIX %q, want %q", where, env["WINDLASS_NATS_INBOX_PREFIX"], deploy.InboxPrefix(user))
	}
	if env["WINDLASS_REPLICAS"] != "3" {
		t.Errorf("%s: WINDLASS_REPLICAS %q, want 3 (the Helm values' three nodes)", where, env["WINDLASS_REPLICAS"])
	}
}

func checkService(t *testing.T, r rendered, s *corev1.Service) {
	t.Helper()
	sel := labels.SelectorFromSet(s.Spec.Selector)
	for _, d := range r.deployments {
		if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		for _, sp := range s.Spec.Ports {
			found := false
			for _, c := range d.Spec.Template.Spec.Containers {
				for _, cp := range c.Ports {
					found = found || cp.Name == sp.TargetPort.StrVal || cp.ContainerPort == sp.TargetPort.IntVal
				}
			}
			if !found {
				t.Errorf("Service %s: target port %s is no container port of %s", s.Name, sp.TargetPort.String(), d.Name)
			}
		}
		return
	}
	t.Errorf("Service %s selects no Deployment's pods", s.Name)
}

func checkScaledObject(t *testing.T, r rendered, so *scaledObject) {
	t.Helper()
	d := r.deployments[so.Spec.ScaleTargetRef.Name]
	if d == nil {
		t.Fatalf("ScaledObject %s scales %q, no Deployment", so.Metadata.Name, so.Spec.ScaleTargetRef.Name)
	}
	if so.Spec.MinReplicaCount < 1 || so.Spec.MaxReplicaCount < so.Spec.MinReplicaCount {
		t.Errorf("replicas %d to %d: keep at least one worker so its tools stay advertised", so.Spec.MinReplicaCount, so.Spec.MaxReplicaCount)
	}
	var tools []string
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "WINDLASS_TOOLS" {
			tools = strings.Split(e.Value, ",")
		}
	}
	var consumers, want []string
	for _, tool := range tools {
		want = append(want, layout.ConsumerName(tool))
	}
	for _, tr := range so.Spec.Triggers {
		if tr.Type != "nats-jetstream" {
			t.Errorf("trigger type %q", tr.Type)
			continue
		}
		for k := range tr.Metadata {
			if !slices.Contains(natsJetStreamScaler, k) {
				t.Errorf("trigger metadata %q is no field of the nats-jetstream scaler", k)
			}
		}
		if tr.Metadata["stream"] != layout.CallsStream || tr.Metadata["account"] != "WINDLASS" {
			t.Errorf("trigger reads %s/%s, want WINDLASS/%s", tr.Metadata["account"], tr.Metadata["stream"], layout.CallsStream)
		}
		if !strings.HasSuffix(tr.Metadata["natsServerMonitoringEndpoint"], ":8222") {
			t.Errorf("monitoring endpoint %q: the Helm values serve monitoring on 8222", tr.Metadata["natsServerMonitoringEndpoint"])
		}
		consumers = append(consumers, tr.Metadata["consumer"])
	}
	slices.Sort(consumers)
	slices.Sort(want)
	if !slices.Equal(consumers, want) {
		t.Errorf("scaled on consumers %v, want one trigger per tool the workers serve: %v", consumers, want)
	}
}

func ptrValue[T any](p *T) T {
	var v T
	if p != nil {
		v = *p
	}
	return v
}

// checkDispatcherDeployment checks the HTTP API's Deployment: one pod at a
// time (its dispatcher id must be unique among live instances), and
// approval replicas that share the work.
func checkDispatcherDeployment(t *testing.T, r rendered) {
	t.Helper()
	d := r.deployments["windlass-dispatcher"]
	if d == nil {
		t.Error("no windlass-dispatcher Deployment")
		return
	}
	if ptrValue(d.Spec.Replicas) != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("windlass-dispatcher: %d replicas, strategy %s; want 1 and Recreate: two live pods would share the dispatcher id", ptrValue(d.Spec.Replicas), d.Spec.Strategy.Type)
	}
	a := r.deployments["windlass-approval"]
	if a == nil || ptrValue(a.Spec.Replicas) < 2 {
		t.Error("windlass-approval: want at least two replicas")
		return
	}
	// On the Sentinel redis-url, a hold counts once the replica has it.
	acks := ""
	for _, c := range a.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == "WINDLASS_REPLICA_ACKS" {
				acks = e.Value
			}
		}
	}
	if acks != "1" {
		t.Errorf("windlass-approval: WINDLASS_REPLICA_ACKS = %q; want \"1\": on Sentinel a failover would lose holds the replica never had", acks)
	}
}

// checkRedisURLSecret checks the base Secret's redis-url: it parses as the
// binary parses it, in the Sentinel form, naming the Sentinels and master
// set of deploy/helm/redis-values.yaml, whose failover ends before a
// worker's registry lease lapses.
func checkRedisURLSecret(t *testing.T, r rendered) {
	t.Helper()
	s := r.secrets["windlass"]
	if s == nil {
		t.Fatal("no windlass Secret")
	}
	u, ok := s.StringData["redis-url"]
	if !ok {
		return // the production overlay's comes from a file
	}
	o, err := redisurl.Parse(u)
	if err != nil {
		t.Fatalf("Secret windlass: redis-url: %v", err)
	}
	var v struct {
		Architecture string `json:"architecture"`
		Auth         struct {
			Enabled                   bool   `json:"enabled"`
			Sentinel                  bool   `json:"sentinel"`
			ExistingSecret            string `json:"existingSecret"`
			ExistingSecretPasswordKey string `json:"existingSecretPasswordKey"`
		} `json:"auth"`
		CommonConfiguration string `json:"commonConfiguration"`
		Replica             struct {
			ReplicaCount int `json:"replicaCount"`
			Persistence  struct {
				Enabled bool   `json:"enabled"`
				Size    string `json:"size"`
			} `json:"persistence"`
		} `json:"replica"`
		Sentinel struct {
			Enabled               bool   `json:"enabled"`
			MasterSet             string `json:"masterSet"`
			Quorum                int    `json:"quorum"`
			DownAfterMilliseconds int    `json:"downAfterMilliseconds"`
			FailoverTimeout       int    `json:"failoverTimeout"`
		} `json:"sentinel"`
	}
	if err := yaml.UnmarshalStrict(readFile(t, "helm/redis-values.yaml"), &v); err != nil {
		t.Fatalf("helm/redis-values.yaml: %v", err)
	}
	if o.Kind != redisurl.Sentinel || len(o.Sentinel.SentinelAddrs) != 1 || o.Sentinel.SentinelAddrs[0] != "redis.redis.svc.cluster.local:26379" {
		t.Fatalf("Secret windlass: redis-url is not the Sentinel form naming the chart's Service on 26379: %+v", o)
	}
	if o.Sentinel.MasterName != v.Sentinel.MasterSet || !v.Sentinel.Enabled || v.Architecture != "replication" || v.Replica.ReplicaCount < 3 || v.Sentinel.Quorum != 2 {
		t.Errorf("redis-url's master %q, the chart's sentinel %+v, architecture %s, %d nodes: want the same master set, Sentinel on, replication, 3 nodes, quorum 2",
			o.Sentinel.MasterName, v.Sentinel, v.Architecture, v.Replica.ReplicaCount)
	}
	if !v.Auth.Enabled || !v.Auth.Sentinel || o.Sentinel.Password == "" || o.Sentinel.SentinelPassword == "" {
		t.Error("Redis and its Sentinels need a password, and redis-url must carry both")
	}
	if !strings.Contains(v.CommonConfiguration, "appendfsync always") {
		t.Error("helm/redis-values.yaml: Redis must fsync every write (appendfsync always)")
	}
	if !failoverWithinLease(t, strconv.Itoa(v.Sentinel.DownAfterMilliseconds)) {
		t.Errorf("helm/redis-values.yaml: a failover (down-after %dms plus about 2s) outlasts a worker's lease less a heartbeat", v.Sentinel.DownAfterMilliseconds)
	}
}
