package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/approval/webhook"
	"github.com/windlass-dev/windlass/registry"
)

// isHelp reports whether a subcommand's arguments ask for its usage.
func isHelp(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "-help" || a == "--help" })
}

// noArguments checks that a subcommand which takes none got none: its
// usage on stderr and flag.ErrHelp for --help, a usage error for anything
// else, so that it never acts on an argument it does not read.
func noArguments(args []string, usage string, stderr io.Writer) error {
	switch {
	case isHelp(args):
		fmt.Fprintln(stderr, usage)
		return flag.ErrHelp
	case len(args) > 0:
		return &exitError{code: 2, err: fmt.Errorf("%s; it takes no arguments, got %q", usage, args)}
	}
	return nil
}

func runApproval(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "keygen":
			const usage = "usage: windlass approval keygen (prints a new key pair: the service's private key, the workers' public key)"
			if err := noArguments(args[1:], usage, stderr); err != nil {
				return err
			}
			priv, pub, err := release.GenerateKey()
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "# the approval service's private key (keep it secret):\nWINDLASS_RELEASE_KEY=%s\n# every worker's public key:\nWINDLASS_RELEASE_PUBLIC_KEYS=%s\n", priv, pub)
			return nil
		case "token":
			const usage = "usage: windlass approval token NAME [GROUP+GROUP...] (prints a new reviewer token for NAME and its --reviewers entry, in the groups given)"
			if isHelp(args[1:]) {
				fmt.Fprintln(stderr, usage)
				return flag.ErrHelp
			}
			if len(args) < 2 || len(args) > 3 || strings.HasPrefix(args[1], "-") {
				return &exitError{code: 2, err: errors.New(usage + "; NAME may not start with '-'")}
			}
			tok := approval.NewToken()
			entry := args[1] + "=" + approval.HashToken(tok)
			if len(args) == 3 {
				groups, err := approval.ParseGroups(args[2])
				if err != nil {
					return &exitError{code: 2, err: fmt.Errorf("%s: %w", usage, err)}
				}
				entry += ":groups=" + strings.Join(groups, "+")
			}
			if _, err := approval.ParseReviewer(entry); err != nil {
				return &exitError{code: 2, err: err}
			}
			fmt.Fprintf(stdout, "# give the reviewer this bearer token:\n%s\n# and the service this --reviewers entry:\n%s\n", tok, entry)
			return nil
		}
	}
	fs := newFlags("approval", "approval [flags] | approval keygen | approval token NAME", stderr)
	c := commonFlags(fs)
	a := approvalFlags(fs)
	listen := stringFlag(fs, "listen", "127.0.0.1:8090", "address of the HTTP API and dashboard")
	replicas := intFlag(fs, "replicas", 1, "replicas of the streams when the service creates them (3 on a three-node JetStream cluster)")
	healthListen := healthFlag(fs)
	metricsListen := metricsFlag(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return &exitError{code: 2, err: fmt.Errorf("approval: unknown argument %q (subcommands: keygen, token)", pos[0])}
	}
	if err := a.parse(); err != nil {
		return err
	}
	sess, err := c.open("approval", stderr)
	if err != nil {
		return err
	}
	defer sess.Close()
	log, nc, rc, reg := sess.log, sess.nc, sess.rc, sess.reg
	a.replicas = *replicas
	stopTelemetry, err := startTelemetry(ctx, "windlass-approval", *metricsListen, log)
	if err != nil {
		return err
	}
	defer stopTelemetry()
	svc, closeHooks, err := a.service(nc, rc, reg, *c.prefix, log)
	if err != nil {
		return err
	}
	defer closeHooks()
	stopHealth, err := serveHealth(*healthListen, nc, rc, log)
	if err != nil {
		return err
	}
	defer stopHealth()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	log.Info("approval: serving", "url", "http://"+ln.Addr().String()+"/")
	return serveApproval(ctx, svc, ln)
}

// serveApproval runs the service and its HTTP server until ctx ends.
func serveApproval(ctx context.Context, svc *approval.Service, ln net.Listener) error {
	srv := &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- svc.Run(ctx) }()
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			errc <- err
		}
	}()
	select {
	case <-ctx.Done():
	case err := <-errc:
		if err != nil {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
	defer cancel()
	return srv.Shutdown(sctx)
}

// approvalOptions are the approval service's flags.
type approvalOptions struct {
	releaseKey, reviewers, policies *string
	identityHeader, trustedProxies  *string
	webhookURLs, webhookSecrets     *string
	window, retention               *time.Duration
	replicaAcks                     *int
	allowPrivateWebhooks            *bool
	extraReviewers                  []approval.Reviewer
	parsedReviewers                 []approval.Reviewer // --reviewers, read by parse
	parsedPolicies                  map[string]approval.ToolPolicy
	parsedProxies                   []netip.Prefix
	parsed                          bool
	signer                          *release.Signer
	replicas                        int // of the streams the service creates; 0 is 1
}

func approvalFlags(fs *flag.FlagSet) *approvalOptions {
	return &approvalOptions{
		releaseKey:           stringFlag(fs, "release-key", "", "the service's Ed25519 private key, ed25519:<base64> (windlass approval keygen)"),
		reviewers:            stringFlag(fs, "reviewers", "", "comma-separated name=<sha256 of token>[:groups=g1+g2] (windlass approval token NAME)"),
		policies:             stringFlag(fs, "policies", "", "per-tool policies: tool:window=10m:approvals=2:no-self:reviewers=g1+g2, comma-separated (reviewers=: only those groups' reviewers may see and decide the tool's calls)"),
		identityHeader:       stringFlag(fs, "identity-header", "", "the header in which an authenticating proxy names the reviewer (X-Forwarded-User); believed only from --trusted-proxies, refused from elsewhere"),
		trustedProxies:       stringFlag(fs, "trusted-proxies", "", "comma-separated addresses or CIDRs of the proxies whose --identity-header is believed (the TCP peer's address)"),
		webhookURLs:          stringFlag(fs, "webhook-urls", "", "comma-separated dashboard webhook URLs"),
		webhookSecrets:       stringFlag(fs, "webhook-secrets", "", "comma-separated whsec_ secrets (several during rotation)"),
		window:               durationFlag(fs, "window", approval.DefaultWindow, "default approval window"),
		retention:            durationFlag(fs, "retention", approval.DefaultRetention, "how long decided calls and the audit and webhook logs are kept (export the audit log with windlass approvals audit)"),
		replicaAcks:          intFlag(fs, "replica-acks", 0, "Redis replicas that must have a held call before the service takes it, and its approval before it releases it (WAIT): 1 with Sentinel, so a failover loses no held call and brings back no released one; 0 (no wait) with one Redis or a Cluster"),
		allowPrivateWebhooks: boolFlag(fs, "allow-private-webhooks", false, "allow webhook URLs on loopback or private addresses (development)"),
	}
}

// service builds the approval service from the flags.
func (a *approvalOptions) service(nc *nats.Conn, rc redis.UniversalClient, reg *registry.Registry, prefix string, log *slog.Logger) (*approval.Service, func(), error) {
	signer := a.signer
	if signer == nil {
		key, err := release.ParsePrivateKey(*a.releaseKey)
		if err != nil {
			return nil, nil, fmt.Errorf("--release-key: %w (generate one with windlass approval keygen)", err)
		}
		signer = release.NewSigner(key)
	}
	if err := a.parse(); err != nil {
		return nil, nil, err
	}
	reviewers := append(slices.Clone(a.extraReviewers), a.parsedReviewers...)
	cfg := approval.Config{Conn: nc, Redis: rc, Registry: reg, Signer: signer, Reviewers: reviewers,
		Policies: a.parsedPolicies, IdentityHeader: *a.identityHeader, TrustedProxies: a.parsedProxies, DefaultWindow: *a.window, Retention: *a.retention, ReplicaAcks: *a.replicaAcks, Replicas: a.replicas, Prefix: strings.TrimSuffix(prefix, ":") + ":approval:", Logger: log}
	var svc *approval.Service
	closeHooks := func() {}
	if urls := splitList(*a.webhookURLs); len(urls) > 0 {
		var secrets []webhook.Secret
		for _, s := range splitList(*a.webhookSecrets) {
			sec, err := webhook.ParseSecret(s)
			if err != nil {
				return nil, nil, fmt.Errorf("--webhook-secrets: %w", err)
			}
			secrets = append(secrets, sec)
		}
		if len(secrets) == 0 {
			return nil, nil, errors.New("--webhook-urls needs --webhook-secrets (whsec_...) to sign with")
		}
		var eps []webhook.Endpoint
		for _, u := range urls {
			eps = append(eps, webhook.Endpoint{URL: u, Secrets: secrets})
		}
		sender, err := webhook.New(webhook.Config{Endpoints: eps, AllowPrivate: *a.allowPrivateWebhooks, Logger: log,
			OnAttempt: func(at webhook.Attempt) {
				if svc != nil {
					_ = svc.RecordWebhookAttempt(context.Background(), at)
				}
			}})
		if err != nil {
			return nil, nil, fmt.Errorf("--webhook-urls: %w", err)
		}
		cfg.Webhooks = sender
		closeHooks = sender.CloseIdleConnections
	}
	var err error
	if svc, err = approval.New(cfg); err != nil {
		return nil, nil, err
	}
	return svc, closeHooks, nil
}

// parse reads --reviewers and --policies and checks them together, as the
// service would (approval.Config.ValidateReviewers), before anything is
// opened: a bad entry is a usage error (exit code 2) naming the entry and
// the rule.
func (a *approvalOptions) parse() error {
	if a.parsed {
		return nil
	}
	var reviewers []approval.Reviewer
	for _, r := range splitList(*a.reviewers) {
		rv, err := approval.ParseReviewer(r)
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--reviewers entry %q: %w", r, err)}
		}
		reviewers = append(reviewers, rv)
	}
	policies, err := parsePolicies(*a.policies)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	if err := (approval.Config{Reviewers: reviewers, Policies: policies}).ValidateReviewers(); err != nil {
		return &exitError{code: 2, err: fmt.Errorf("--reviewers, --policies: %w", err)}
	}
	var proxies []netip.Prefix
	for _, p := range splitList(*a.trustedProxies) {
		prefix, err := netip.ParsePrefix(p)
		if addr, aerr := netip.ParseAddr(p); err != nil && aerr == nil {
			prefix, err = addr.Prefix(addr.BitLen()) // one address
		}
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("--trusted-proxies entry %q: want an IP address or a CIDR (10.0.0.0/8)", p)}
		}
		proxies = append(proxies, prefix.Masked())
	}
	if (*a.identityHeader == "") != (len(proxies) == 0) {
		return &exitError{code: 2, err: errors.New("--identity-header and --trusted-proxies go together: the header is believed only from those addresses")}
	}
	a.parsedReviewers, a.parsedPolicies, a.parsedProxies, a.parsed = reviewers, policies, proxies, true
	return nil
}

func splitList(s string) []string {
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// parsePolicies reads "tool:window=10m:approvals=2:no-self:reviewers=finance+ops,other:...".
func parsePolicies(s string) (map[string]approval.ToolPolicy, error) {
	out := map[string]approval.ToolPolicy{}
	for _, entry := range splitList(s) {
		parts := strings.Split(entry, ":")
		if err := windlass.ValidateName(parts[0]); err != nil {
			return nil, fmt.Errorf("--policies %q: the entry must start with a tool's name: %w", entry, err)
		}
		if _, dup := out[parts[0]]; dup {
			return nil, fmt.Errorf("--policies %q: tool %q has a policy already; give each tool one entry", entry, parts[0])
		}
		var p approval.ToolPolicy
		for _, opt := range parts[1:] {
			k, v, _ := strings.Cut(opt, "=")
			var err error
			switch k {
			case "window":
				p.Window, err = time.ParseDuration(v)
			case "approvals":
				p.RequiredApprovals, err = strconv.Atoi(v)
			case "no-self":
				p.ForbidSelfApproval = true
			case "reviewers":
				if p.ReviewerGroups != nil {
					err = errors.New("reviewers= given twice")
				} else {
					p.ReviewerGroups, err = approval.ParseGroups(v)
				}
			default:
				err = fmt.Errorf("unknown option %q (use window=, approvals=, no-self, reviewers=g1+g2)", k)
			}
			if err != nil {
				return nil, fmt.Errorf("--policies %q: %w", entry, err)
			}
		}
		out[parts[0]] = p
	}
	return out, nil
}
