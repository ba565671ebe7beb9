package approval

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/windlass-dev/windlass"
	"github.com/windlass-dev/windlass/approval/release"
	"github.com/windlass-dev/windlass/approval/webhook"
	"github.com/windlass-dev/windlass/internal/layout"
	"github.com/windlass-dev/windlass/internal/payload"
	"github.com/windlass-dev/windlass/internal/retry"
	"github.com/windlass-dev/windlass/internal/telemetry"
	"github.com/windlass-dev/windlass/internal/textcut"
	"github.com/windlass-dev/windlass/internal/wirejson"
	"github.com/windlass-dev/windlass/limits"
	"github.com/windlass-dev/windlass/registry"
)

// Defaults of [Config].
const (
	DefaultPrefix         = "windlass:approval:"
	DefaultWindow         = time.Hour
	DefaultQueueAllowance = 30 * time.Second
	DefaultClaimAfter     = 30 * time.Second
	DefaultRetention      = 30 * 24 * time.Hour
)

// ToolPolicy is how one gated tool is approved.
type ToolPolicy struct {
	// Window is how long a call waits for its decision before it expires.
	// Zero means Config.DefaultWindow.
	Window time.Duration
	// RequiredApprovals is how many distinct reviewers must approve. Zero
	// means 1.
	RequiredApprovals int
	// ForbidSelfApproval refuses an approval by the call's requester
	// (metadata "requester"): separation of duties.
	ForbidSelfApproval bool
	// ReviewerGroups names the reviewer groups whose members may see and
	// decide the tool's calls (Reviewer.Groups); others get ErrNotAllowed
	// (403) and do not see the calls in lists or the audit log. None: any
	// reviewer may. A call keeps the groups of the policy it was held
	// under (HeldCall.ReviewerGroups), as it keeps its RequiredApprovals.
	ReviewerGroups []string
}

// Config configures a [Service]. Zero values mean the documented defaults.
type Config struct {
	// Conn is the NATS connection. Required; never closed by the service.
	Conn *nats.Conn
	// Redis holds the held calls and the audit log. Required.
	Redis redis.UniversalClient
	// Registry gives the tools' specs: their schemas (to validate edited
	// arguments) and timeouts (the deadline of a released call). Required.
	Registry *registry.Registry
	// Signer signs releases with the service's private key. Required.
	Signer *release.Signer
	// Reviewers may decide, authenticated by their bearer tokens.
	Reviewers []Reviewer
	// Policies per tool name; tools without one use the defaults.
	Policies map[string]ToolPolicy
	// DefaultWindow is the approval window of tools without a policy.
	// Default 1h.
	DefaultWindow time.Duration
	// QueueAllowance is added to a tool's timeout for the deadline of a
	// released call: the execution deadline starts at release. Default 30s.
	QueueAllowance time.Duration
	// Prefix starts every Redis key. Default "windlass:approval:".
	Prefix string
	// Replicas of the streams the service creates when they are missing
	// (see layout.EnsureStreams: existing streams are left as they are).
	// Default 1; use 3 on a three-node JetStream cluster.
	Replicas int
	// PayloadLimit is the largest arguments by reference the service
	// fetches to hold a call, in bytes. Default 64 MiB, the dispatcher's.
	PayloadLimit int64
	// Notify receives every audit event at least once, through a queue of
	// its own (see the package doc, "Notifications"). It runs on one
	// goroutine per replica; an error retries the event later. Nil: no
	// notifications.
	Notify func(ctx context.Context, ev AuditEvent, call *HeldCall) error
	// Webhooks, when set, posts approval.requested, approval.approved,
	// approval.undeliverable, approval.rejected, approval.expired and
	// approval.canceled to each of
	// its endpoints, each endpoint through a queue of its own (see the
	// package doc, "Notifications"). Never closed by the service.
	Webhooks *webhook.Sender
	// Replica names this replica's consumer in the notification queues:
	// two live replicas must not share one. Default: the host name and a
	// random suffix.
	Replica string
	// ClaimAfter is how long an event a replica read stays its own once
	// the replica stopped renewing its claim (it died mid-delivery) before
	// another replica claims and delivers it. A live replica renews its
	// claim every third of it. Default 30s.
	ClaimAfter time.Duration
	// Retention is how long a decided call (approved, rejected, expired or
	// canceled) and the audit and webhook log entries are kept; export
	// the audit log before (GET /v1/audit?since=, windlass approvals
	// audit). Default 30 days.
	Retention time.Duration
	// ReplicaAcks is how many Redis replicas must have a held call before
	// the service acknowledges the call's intake message, and its approval
	// before the service releases it (Redis WAIT, for up to
	// ReplicaAckTimeout; fewer leaves the message to be redelivered and
	// held again, or the release to be tried again). Redis replicates
	// asynchronously: with a master and replicas under Sentinel, set 1, so
	// that a failover cannot lose a call the service took, nor bring back
	// as pending a call it released (see RELIABILITY.md, "Redis Sentinel
	// failover"). Default 0: do not wait. Not with a Redis Cluster client,
	// which cannot wait on the connection that wrote.
	ReplicaAcks int
	// IdentityHeader, with TrustedProxies, names the header in which an
	// authenticating proxy in front of the service (oauth2-proxy's
	// X-Forwarded-User, say) names the reviewer: a request from one of
	// TrustedProxies that carries it is that reviewer's, without a bearer
	// token; the name must be a configured reviewer's (their groups are
	// the configured ones). A request from any other address carrying the
	// header is refused (403 untrusted_identity), never taken at its word.
	// Empty: reviewers are known by their bearer tokens only.
	IdentityHeader string
	// TrustedProxies are the addresses (the TCP peer, not a forwarded-for
	// header) whose IdentityHeader is believed. Required with
	// IdentityHeader, and only with it.
	TrustedProxies []netip.Prefix
	// Logger receives the service's logs. Default: discard.
	Logger *slog.Logger
	// TracerProvider records each hold as a span of its own ("approval_hold
	// <tool>", from the call's arrival to its decision), linked to the
	// call's trace, and passes the call's trace context on with its
	// release. Default: the global provider; off while no SDK is installed
	// there.
	TracerProvider trace.TracerProvider
	// MeterProvider receives the service's metrics (held calls, decision
	// latency, webhook deliveries). Default: the global provider as it is
	// when New runs; off while no SDK is installed there.
	MeterProvider metric.MeterProvider
}

// Service holds gated calls until reviewers decide. Safe for concurrent use.
type Service struct {
	registryUnread unreadTools // by tool, when its last registry read failed for another reason than not found (see unheldExpiry)
	cfg            Config
	payloads       atomic.Pointer[payload.Store] // set by Run: arguments by reference
	store          *store
	js             jetstream.JetStream
	auth           *authenticator
	cancels        cancels
	tracer         telemetry.Tracer
	metrics        *telemetry.ApprovalMetrics // nil: metrics off
	rates          *redis_rate.Limiter        // the reviewers' decision rates
	slots          *limits.Enforcer           // frees the admission slots of the calls it answers

	groupsMade atomic.Bool   // every queue's group exists (ensureGroups)
	groupsTurn chan struct{} // one ensureGroups at a time

	// beforeRefusalAnswer, set by tests only, runs between a refusal's
	// claim of its id and its answer: the interleaving of a refusal with
	// another replica's hold of the id, which no real server can be made
	// to show on cue.
	beforeRefusalAnswer atomic.Pointer[func(id string)]
}

// withDefaults returns c with every zero field set to its default: the one
// place the service's defaults are decided (a tool's policy takes its zero
// fields from DefaultWindow and 1 approval as it is read, in policy).
func (c Config) withDefaults() Config {
	c.DefaultWindow = cmp.Or(c.DefaultWindow, DefaultWindow)
	c.QueueAllowance = cmp.Or(c.QueueAllowance, DefaultQueueAllowance)
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	c.PayloadLimit = cmp.Or(c.PayloadLimit, payload.DefaultMax)
	c.ClaimAfter = cmp.Or(c.ClaimAfter, DefaultClaimAfter)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	if c.Replica == "" {
		c.Replica = defaultReplica()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate checks c after defaults; an error names the one field that is
// wrong. The reviewers are checked as New reads them (newAuthenticator).
func (c Config) validate() error {
	switch {
	case c.Conn == nil:
		return errors.New("approval: Config.Conn is nil")
	case c.Redis == nil:
		return errors.New("approval: Config.Redis is nil")
	case c.Registry == nil:
		return errors.New("approval: Config.Registry is nil")
	case c.Signer == nil:
		return errors.New("approval: Config.Signer is nil: a release key is required (windlass approval keygen)")
	case c.DefaultWindow < 0:
		return fmt.Errorf("approval: Config.DefaultWindow must not be negative, got %s", c.DefaultWindow)
	case c.QueueAllowance < 0:
		return fmt.Errorf("approval: Config.QueueAllowance must not be negative, got %s", c.QueueAllowance)
	case c.PayloadLimit < 0:
		return fmt.Errorf("approval: Config.PayloadLimit must not be negative, got %d", c.PayloadLimit)
	case c.ClaimAfter < 0:
		return fmt.Errorf("approval: Config.ClaimAfter must not be negative, got %s", c.ClaimAfter)
	case c.Retention < 0:
		return fmt.Errorf("approval: Config.Retention must not be negative, got %s", c.Retention)
	case c.Replicas < 0:
		return fmt.Errorf("approval: Config.Replicas must not be negative, got %d", c.Replicas)
	case c.ReplicaAcks < 0:
		return fmt.Errorf("approval: Config.ReplicaAcks must not be negative, got %d", c.ReplicaAcks)
	}
	if err := c.validateIdentity(); err != nil {
		return err
	}
	if _, cluster := c.Redis.(*redis.ClusterClient); cluster && c.ReplicaAcks > 0 {
		return errors.New("approval: Config.ReplicaAcks is not for a Redis Cluster client: WAIT cannot follow the connection that wrote; leave it 0")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Policies)) {
		switch p := c.Policies[name]; {
		case p.Window < 0:
			return fmt.Errorf("approval: Config.Policies[%q].Window must not be negative, got %s", name, p.Window)
		case p.RequiredApprovals < 0:
			return fmt.Errorf("approval: Config.Policies[%q].RequiredApprovals must not be negative, got %d", name, p.RequiredApprovals)
		}
	}
	return nil
}

// ValidateReviewers checks Reviewers and the policies' ReviewerGroups, and
// nothing else (no client is needed): what [New] refuses of them. A
// reviewer or a group with an invalid name is refused, and so is a policy
// that names groups with fewer members among the reviewers than the
// approvals it requires: nobody could ever approve its calls (a group's
// name mistyped, say). The error names the field and the rule.
func (c Config) ValidateReviewers() error {
	auth, err := newAuthenticator(c.Reviewers)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(c.Policies)) {
		p := c.Policies[name]
		for _, g := range p.ReviewerGroups {
			if err := ValidateGroup(g); err != nil {
				return fmt.Errorf("approval: Config.Policies[%q].ReviewerGroups: %w", name, err)
			}
		}
		if len(p.ReviewerGroups) == 0 {
			continue
		}
		members := 0
		for _, r := range c.Reviewers {
			if auth.mayDecide(r.Name, p.ReviewerGroups) {
				members++
			}
		}
		if need := max(p.RequiredApprovals, 1); members < need {
			return fmt.Errorf("approval: Config.Policies[%q].ReviewerGroups %v: %d reviewer(s) belong to them, fewer than the %d approval(s) the tool requires; nobody could approve its calls (check the groups' names and Config.Reviewers' Groups)",
				name, p.ReviewerGroups, members, need)
		}
	}
	return nil
}

// New returns a service configured by cfg.
func New(cfg Config) (*Service, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := cfg.ValidateReviewers(); err != nil {
		return nil, err
	}
	auth, err := newAuthenticator(cfg.Reviewers)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("approval: jetstream: %w", err)
	}
	return &Service{groupsTurn: make(chan struct{}, 1), cfg: cfg, store: &store{rc: cfg.Redis, prefix: cfg.Prefix, retention: cfg.Retention, replicaAcks: cfg.ReplicaAcks}, js: js, auth: auth,
		tracer: telemetry.NewTracer(cfg.TracerProvider), metrics: telemetry.NewApprovalMetrics(cfg.MeterProvider),
		rates: redis_rate.NewLimiter(cfg.Redis), slots: cfg.Registry.Limits()}, nil
}

func (s *Service) policy(tool string) ToolPolicy {
	p := s.cfg.Policies[tool]
	p.Window = cmp.Or(p.Window, s.cfg.DefaultWindow)
	p.RequiredApprovals = cmp.Or(p.RequiredApprovals, 1)
	p.ReviewerGroups = normalizeGroups(p.ReviewerGroups)
	return p
}

// ConsumerName is the approval service's durable consumer on the approvals
// stream, shared by its replicas.
const ConsumerName = "approval-service"

// intakeConcurrency bounds the gated calls one service takes in at once:
// each intake waits for Redis and NATS several times, so taking them one
// after the other caps the service at a few thousand calls a second.
const intakeConcurrency = 32

// Run consumes gated calls, follows the cancels stream (a held call its
// caller canceled becomes canceled and is never released), expires lapsed
// ones, finishes releases a crash interrupted and feeds Notify, until ctx
// ends.
func (s *Service) Run(ctx context.Context) error {
	defer s.slots.Wait() // the slots its answers freed are written
	opts := layout.StreamOptions{Replicas: s.cfg.Replicas}
	if err := layout.EnsureStreams(ctx, s.js, layout.AllStreams(opts)...); err != nil {
		return fmt.Errorf("approval: %w", err)
	}
	// The release ledger the workers claim releases in: created here, by
	// the one role that may create streams in a deployment with
	// permissions (deploy/nats/accounts.conf).
	if _, err := layout.EnsureReleases(ctx, s.js, opts); err != nil {
		return fmt.Errorf("approval: %w", err)
	}
	// The payloads bucket, where the arguments of a large call are: its
	// reviewers see them from there.
	obs, err := layout.EnsurePayloads(ctx, s.js, opts)
	if err != nil {
		return fmt.Errorf("approval: %w", err)
	}
	s.payloads.Store(payload.New(obs, s.cfg.Conn))
	// The notification queues exist before any event is appended (a call
	// held, canceled, expired or released).
	if err := s.ensureGroups(ctx); err != nil {
		return err
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, layout.ApprovalsStream, jetstream.ConsumerConfig{
		Durable: ConsumerName, FilterSubject: layout.ApprovalSubjects, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 10 * time.Second, MaxDeliver: -1, Description: "Windlass approval service",
	})
	if err != nil {
		return fmt.Errorf("approval: consumer: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return fmt.Errorf("approval: pull: %w", err)
	}
	statusSub, err := s.cfg.Conn.QueueSubscribe(layout.ApprovalStatusSubject, ConsumerName, s.answerStatus)
	if err != nil {
		it.Stop()
		return fmt.Errorf("approval: status subject: %w", err)
	}
	defer func() { _ = statusSub.Unsubscribe() }()
	summarySub, err := s.cfg.Conn.QueueSubscribe(layout.ApprovalSummarySubject, ConsumerName, s.answerSummary)
	if err != nil {
		it.Stop()
		return fmt.Errorf("approval: summary subject: %w", err)
	}
	defer func() { _ = summarySub.Unsubscribe() }()
	defer s.metrics.ObserveHeld(s.store.countPending)()
	stopCancels, err := s.followCancels(ctx)
	if err != nil {
		it.Stop()
		return err
	}
	defer stopCancels()
	if err := s.resumeReleases(ctx); err != nil {
		s.cfg.Logger.WarnContext(ctx, "approval: resuming interrupted releases failed; will retry", "error", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		// Calls are taken in concurrently: each is held (stored in Redis)
		// before its own message is acked, whatever the others do.
		var intakes sync.WaitGroup
		defer intakes.Wait()
		slots := make(chan struct{}, intakeConcurrency)
		for {
			msg, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					return
				}
				continue
			}
			slots <- struct{}{}
			intakes.Go(func() {
				defer func() { <-slots }()
				s.intake(ctx, msg)
			})
		}
	})
	wg.Go(func() { s.expiryLoop(ctx) })
	for _, q := range s.cfg.queues() {
		wg.Go(func() { s.notifyLoop(ctx, q) })
	}
	<-ctx.Done()
	it.Stop()
	wg.Wait()
	return nil
}

// answerStatus replies to a status request (the body is a call id) with
// {"found": bool, "call": HeldCall}.
func (s *Service) answerStatus(m *nats.Msg) {
	ctx, cancel := context.WithTimeout(context.Background(), retry.ReadTimeout)
	defer cancel()
	reply := map[string]any{"found": false}
	if h, err := s.store.get(ctx, string(m.Data)); err == nil {
		reply = map[string]any{"found": true, "call": h}
	} else if !errors.Is(err, ErrNotFound) {
		reply["error"] = err.Error()
	}
	b, _ := json.Marshal(reply)
	_ = m.Respond(b)
}

// argumentsPreview is how much of arguments by reference a held call
// shows.
const argumentsPreview = 4 << 10

// arguments returns a gated call's arguments, fetched when they travel by
// reference (and checked against their size and SHA-256): the hash an
// approval binds covers them in full. A call whose arguments cannot be
// used is answered and terminated; one whose arguments cannot be fetched
// now is left for redelivery. ok is false for both.
func (s *Service) arguments(ctx context.Context, msg jetstream.Msg, call *windlass.ToolCall) (json.RawMessage, bool) {
	if call.ArgumentsRef == nil {
		return call.Arguments, true
	}
	args, err := s.payloads.Load().Get(ctx, *call.ArgumentsRef, s.cfg.PayloadLimit)
	if err == nil {
		return args, true
	}
	var tooLarge *payload.TooLargeError
	switch {
	case errors.As(err, &tooLarge):
		s.refuseUnheld(ctx, msg, call, windlass.CodePayloadTooLarge, fmt.Sprintf("The arguments of the call to %q are %d bytes, over the approval service's limit of %d bytes; nothing was held.", call.Name, tooLarge.Size, tooLarge.Limit))
	case errors.Is(err, payload.ErrUnreadable):
		s.refuseUnheld(ctx, msg, call, windlass.CodePayloadUnreadable, fmt.Sprintf("The arguments of the call to %q, stored by reference, cannot be used: %v. Nothing was held.", call.Name, err))
	default:
		s.cfg.Logger.ErrorContext(ctx, "approval: could not fetch the call's arguments; leaving it for redelivery", "call_id", call.ID, "error", err)
		// not acked: redelivered after the ack wait
	}
	return nil, false
}

// sequenceOf is the message's sequence in the approvals stream; 0 when
// its metadata cannot be read.
func sequenceOf(msg jetstream.Msg) uint64 {
	meta, err := msg.Metadata()
	if err != nil {
		return 0
	}
	return meta.Sequence.Stream
}

// refusalClaim is how long a refused message keeps its call's id from
// being held by another message after it answered the id (see
// store.claim): longer than any redelivery of a message taken in at the
// same time, and the default approval window.
const refusalClaim = time.Hour

// refuseUnheld answers a call the intake does not hold, and terminates its
// message — unless a call of that id is held: then this message is another
// one of the id, which must not answer for it (RELIABILITY.md row 17), and
// is dropped; so is it when another message of the id claimed it (one
// waiting for its tool's bound, one refused before). The id is claimed
// before the answer, in one step with the check (store.claim), so no
// message of the id is held after it. While Redis cannot say, the message
// is delivered again later.
func (s *Service) refuseUnheld(ctx context.Context, msg jetstream.Msg, call *windlass.ToolCall, code windlass.ErrorCode, text string) {
	seq := sequenceOf(msg)
	got, err := s.store.claim(ctx, call.ID, seq, refusalClaim, false, code)
	if err == nil && got == isOwn {
		// The id's body is this message's own: its hold was interrupted
		// after the body (a Redis blip, the process gone), or finished
		// and its ack lost. Held: its call is pending, and is left so.
		// Never held: the body is given up, and the id claimed, so that
		// no hold of it finishes after the answer.
		if _, err = s.store.get(ctx, call.ID); errors.Is(err, errNotFound) {
			got, err = s.store.claim(ctx, call.ID, seq, refusalClaim, true, code)
		} else if err == nil {
			got = isHeld
		}
	}
	switch {
	case err != nil:
		s.cfg.Logger.WarnContext(ctx, "approval: cannot tell whether the refused call's id is held; delivering it again later", "call_id", call.ID, "error", err)
		_ = msg.NakWithDelay(unknownBoundRetry)
		return
	case got != claimed:
		s.cfg.Logger.WarnContext(ctx, "approval: a message of a held or claimed call's id was refused; dropped, that call untouched", "call_id", call.ID, "code", code, "id_is", got)
		_ = msg.Term()
		return
	}
	if hook := s.beforeRefusalAnswer.Load(); hook != nil {
		(*hook)(call.ID)
	}
	err = s.answerWithin(ctx, &HeldCall{ID: call.ID, Tool: call.Name, call: call, origin: msg.Headers().Get(layout.HeaderOrigin)}, code, text, refusalAnswerRetry)
	if err != nil && !errors.Is(err, nats.ErrMaxPayload) {
		// Not stored (the results stream unwritable): delivered again,
		// and refused again (its claim says so), until its caller is
		// answered. Terminated, it would leave its caller waiting for
		// its deadline, no decision in Redis for a sweep to answer.
		_ = msg.NakWithDelay(unknownBoundRetry)
		return
	}
	_ = msg.Term()
}

// refusalAnswerRetry is how long a refusal's answer is retried before its
// message is delivered again: under the intake consumer's ack wait (10 s),
// so that no redelivery of the message runs beside a retrying refusal.
const refusalAnswerRetry = 5 * time.Second

// argumentValueLimit is the bound on the JSON values of a call of tool as
// the registry has it; when the registry cannot say (Redis unreachable,
// the tool's keys lost until its workers advertise again), the default,
// with why.
func (s *Service) argumentValueLimit(ctx context.Context, tool string) (int, error) {
	info, err := s.cfg.Registry.Lookup(ctx, tool)
	if err != nil {
		if !errors.Is(err, registry.ErrToolNotFound) {
			s.registryUnread.failed(tool, time.Now())
		}
		return windlass.DefaultMaxArgumentValues, err
	}
	return info.Spec.ArgumentValueLimit(), nil
}

// awaitBound settles a call of more JSON values than the default bound
// whose tool's own bound the registry could not give (lookupErr): it may
// be within its tool's bound, so it is neither held nor refused on a
// guess but delivered again later, until its wait ends (see
// unheldExpiry); then its caller is told expired, unless the id is held
// or claimed by another message, which this one must not answer for. It
// claims the id meanwhile (store.claim).
func (s *Service) awaitBound(ctx context.Context, msg jetstream.Msg, call *windlass.ToolCall, limit int, lookupErr error) {
	log := s.cfg.Logger
	until, seq := s.unheldExpiry(*call, msg, lookupErr), sequenceOf(msg)
	// The id's body being this message's own (its hold interrupted, or
	// its ack lost) is no other message's: it waits on.
	// The claim outlives the wait: the delivery that settles the message
	// comes after it (up to unknownBoundRetry, or an ack wait, or longer
	// while no replica runs), and the id must not be free for another
	// message of it meanwhile; refuseUnheld then claims it for
	// refusalClaim from its answer.
	if got, err := s.store.claim(ctx, call.ID, seq, time.Until(until)+refusalClaim, false, ""); err == nil && got != claimed && got != isOwn {
		log.WarnContext(ctx, "approval: a message over the default bound of a held or claimed call's id; dropped, that call untouched", "call_id", call.ID, "id_is", got)
		_ = msg.Term()
		return
	}
	if time.Now().Before(until) {
		log.WarnContext(ctx, "approval: the gated call's arguments hold more JSON values than the default bound and its tool's own bound cannot be read now; delivering it again later",
			"call_id", call.ID, "tool", call.Name, "default_bound", limit, "error", lookupErr)
		_ = msg.NakWithDelay(unknownBoundRetry)
		return
	}
	why := "its tool's own bound could not be read"
	if errors.Is(lookupErr, registry.ErrToolNotFound) {
		why = "its tool was not in the registry"
	}
	s.refuseUnheld(ctx, msg, call, windlass.CodeExpired, fmt.Sprintf("The call to %q reached the end of its approval window before the approval service could hold it: its arguments hold more than %d JSON values (the default bound) and %s. Nothing was held or run.", call.Name, limit, why))
}

// unheldExpiry is when a call the intake cannot hold yet stops waiting: its
// tool's approval window after the call was published, or its deadline if
// sooner — what it would have had, held at once. A call of a tool the
// registry does not list waits at most unknownToolWait: its workers
// advertise again within a heartbeat of a registry that lost its keys, and
// a message of a tool nobody serves must not keep a place among the
// intake's unacknowledged messages for the whole window.
func (s *Service) unheldExpiry(call windlass.ToolCall, msg jetstream.Msg, lookupErr error) time.Time {
	published := time.Now()
	if meta, err := msg.Metadata(); err == nil {
		published = meta.Timestamp
	}
	expires := published.Add(s.policy(call.Name).Window)
	if errors.Is(lookupErr, registry.ErrToolNotFound) {
		from := published
		if u := s.registryUnread.last(call.Name); u.After(from) {
			from = u
		}
		if capped := from.Add(time.Duration(unknownToolWait.Load())); capped.Before(expires) {
			expires = capped
		}
	}
	if !call.Deadline.IsZero() && call.Deadline.Before(expires) {
		expires = call.Deadline
	}
	return expires
}

// unreadTools keeps, by tool, when the registry last failed to answer a
// lookup of it for another reason than "not found": a call of that tool
// over the default bound waits unknownToolWait from then. Only its own
// tool's failures count (another tool's entry unreadable, its Redis
// Cluster slot down, must not keep it waiting its whole window); entries
// older than the wait, which can no longer lengthen one, are dropped.
type unreadTools struct {
	mu     sync.Mutex
	at     map[string]time.Time
	pruned time.Time
}

func (u *unreadTools) failed(tool string, now time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.at == nil {
		u.at = map[string]time.Time{}
	}
	u.at[tool] = now
	wait := time.Duration(unknownToolWait.Load())
	if now.Sub(u.pruned) > wait {
		u.pruned = now
		for name, t := range u.at {
			if now.Sub(t) > wait {
				delete(u.at, name)
			}
		}
	}
}

func (u *unreadTools) last(tool string) time.Time {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.at[tool]
}

// unknownToolWait bounds the wait of a call over the default bound whose
// tool the registry does not list (nanoseconds; a variable for the tests).
var unknownToolWait atomic.Int64

func init() { unknownToolWait.Store(int64(time.Minute)) }

// unknownBoundRetry is how long a call of more values than the default
// bound waits before it is delivered again, while its tool's own bound
// cannot be read.
const unknownBoundRetry = 2 * time.Second

// intake persists one gated call, then acks it.
func (s *Service) intake(ctx context.Context, msg jetstream.Msg) {
	log := s.cfg.Logger
	var call windlass.ToolCall
	err := wirejson.Decode(msg.Data(), &call)
	if err == nil {
		err = call.Validate()
	}
	if err == nil && layout.ApprovalSubject(call.Name) != msg.Subject() {
		err = fmt.Errorf("the call names tool %q but arrived on %s", call.Name, msg.Subject())
	}
	if err != nil {
		log.WarnContext(ctx, "approval: malformed gated call; terminating it", "subject", msg.Subject(), "error", err)
		if windlass.ValidateCallID(call.ID) == nil {
			s.refuseUnheld(ctx, msg, &call, windlass.CodeInvalidCall, fmt.Sprintf("The call message is malformed: %v", err))
			return
		}
		_ = msg.Term()
		return
	}
	args, ok := s.arguments(ctx, msg, &call)
	if !ok {
		return
	}
	// The arguments are counted against their tool's bound before they
	// are hashed: the dispatcher bounded them when it accepted the call,
	// but a publisher that bypasses it can send any number. While the
	// registry cannot give the tool's bound, the default bounds the hash;
	// a call over it may be within its tool's own, so it is neither held
	// nor refused on a guess but delivered again later.
	limit, lookupErr := s.argumentValueLimit(ctx, call.Name)
	argsHash, err := release.ArgumentsHashWithin(args, limit)
	if errors.Is(err, release.ErrTooManyValues) && lookupErr != nil {
		s.awaitBound(ctx, msg, &call, limit, lookupErr)
		return
	}
	if err != nil {
		log.WarnContext(ctx, "approval: the gated call's arguments cannot be hashed; terminating it", "call_id", call.ID, "error", err)
		if errors.Is(err, release.ErrTooManyValues) {
			s.refuseUnheld(ctx, msg, &call, windlass.CodeInvalidArguments, fmt.Sprintf("The call's arguments hold more JSON values than tool %q takes (its max_argument_values, %d); nothing was held.", call.Name, limit))
			return
		}
		_ = msg.Term()
		return
	}
	now := time.Now()
	p := s.policy(call.Name)
	expires := now.Add(p.Window)
	if !call.Deadline.IsZero() && call.Deadline.Before(expires) {
		expires = call.Deadline // nobody waits for a decision past the caller's deadline
	}
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	h := &HeldCall{ID: call.ID, Tool: call.Name, Arguments: args, ArgsHash: argsHash, SpecHash: call.SpecHash,
		Requester: call.Metadata["requester"], Metadata: call.Metadata, RequestedAt: now, ExpiresAt: expires,
		Status: StatusPending, RequiredApprovals: p.RequiredApprovals, ReviewerGroups: p.ReviewerGroups, call: &call,
		origin: msg.Headers().Get(layout.HeaderOrigin), forbidSelf: p.ForbidSelfApproval,
		traceparent: msg.Headers().Get(layout.HeaderTraceparent)}
	if call.ArgumentsRef != nil {
		// The service keeps the reference, its digest and a preview, not
		// a copy: the dashboard shows the preview and fetches the rest
		// on request.
		h.Arguments, h.ArgumentsRef, h.ArgumentsPreview = nil, call.ArgumentsRef, textcut.Cut(string(args), argumentsPreview)
	}
	if strings.ContainsRune(h.Requester, ',') {
		h.Requester = strings.ReplaceAll(h.Requester, ",", "_")
	}
	_, err = s.store.hold(ctx, h, sequenceOf(msg))
	var refused *refusedError
	switch {
	case errors.As(err, &refused):
		// Refused on an earlier delivery, and answered then (or about
		// to be: the process gone before, the answer not stored): its
		// caller was told it is not held, so it is not; answered again
		// (the results stream keeps the first answer).
		log.WarnContext(ctx, "approval: a message refused on an earlier delivery; refusing it again", "call_id", call.ID, "code", refused.code)
		s.refuseUnheld(ctx, msg, &call, refused.code, fmt.Sprintf("The call to %q was refused (%s) when the approval service first took it in; nothing was held or run.", call.Name, refused.code))
		return
	case errors.Is(err, errAnotherCall):
		// Not the held call's message (anyone who may publish calls may
		// send one with its id): neither held nor answered.
		log.WarnContext(ctx, "approval: another message of a held or claimed call's id; terminating it", "call_id", call.ID, "error", err)
		_ = msg.Term()
		return
	case err != nil:
		log.ErrorContext(ctx, "approval: could not persist the call; leaving it for redelivery", "call_id", call.ID, "error", err)
		return // not acked: redelivered after the ack wait
	}
	// Canceled before it got here (it waited in the stream while the
	// service was down): the follower found nothing held to cancel then.
	canceled := s.cancelIfRecorded(ctx, call.ID)
	if err := msg.DoubleAck(ctx); err != nil {
		log.WarnContext(ctx, "approval: ack failed; the call will be redelivered and found held", "call_id", call.ID, "error", err)
	}
	if !canceled {
		log.InfoContext(ctx, "approval: call held", "call_id", call.ID, "tool", call.Name, "expires_at", expires)
	}
}

// expiryLoop expires lapsed calls and answers their callers, now and then
// finishes releases that failed (NATS unreachable at decision time) and
// answers the callers of decided calls whose answers were lost, and
// deletes what is past Config.Retention (every quarter of it, at most a
// minute apart).
func (s *Service) expiryLoop(ctx context.Context) {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	lastResume, lastTrim := time.Now(), time.Time{}
	trimEvery := min(s.cfg.Retention/4, time.Minute)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ids, err := s.store.expireDue(ctx, time.Now())
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.WarnContext(ctx, "approval: expiry pass failed", "error", err)
		}
		s.answerExpired(ctx, ids)
		if time.Since(lastTrim) >= trimEvery {
			lastTrim = time.Now()
			if n, err := s.store.trim(ctx, lastTrim.Add(-s.cfg.Retention)); err != nil && ctx.Err() == nil {
				s.cfg.Logger.WarnContext(ctx, "approval: retention pass failed", "error", err)
			} else if n > 0 {
				s.cfg.Logger.DebugContext(ctx, "approval: deleted decided calls past the retention", "calls", n)
			}
		}
		if time.Since(lastResume) > 5*time.Second {
			lastResume = time.Now()
			if err := s.resumeReleases(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Logger.WarnContext(ctx, "approval: resuming releases failed; retrying later", "error", err)
			}
			if err := s.answerDecided(ctx); err != nil && ctx.Err() == nil {
				s.cfg.Logger.WarnContext(ctx, "approval: answering decided calls failed; retrying later", "error", err)
			}
		}
	}
}

// answerExpired tells the callers of just-expired calls.
func (s *Service) answerExpired(ctx context.Context, ids []string) {
	for _, id := range ids {
		h, err := s.store.get(ctx, id)
		if err != nil {
			continue
		}
		s.ended(ctx, h, StatusExpired)
		s.answerDecision(ctx, h, answerRetry)
	}
}

// decisionAnswer is the one place that says what the caller of a call
// decided against is told: rejected, expired or canceled (with the
// cancellation's cause), each with its message, made from the stored
// call. ok is false for any other status: a pending call is not decided,
// and an approved one is answered by the tool.
func decisionAnswer(h *HeldCall) (code windlass.ErrorCode, text string, ok bool) {
	switch h.Status {
	case StatusRejected:
		return windlass.CodeRejected, RejectedMessage(h), true
	case StatusExpired:
		return windlass.CodeExpired, ExpiredMessage(h), true
	case StatusCanceled:
		call, _ := h.toolCall() // undecodable: its id and tool still answer it
		r := windlass.ResultFromError(call, windlass.CancelCause(h.Reason))
		return r.Error.Code, r.Content, true
	}
	return "", "", false
}

// answerDecision answers the caller of a call decided against as
// decisionAnswer says, retrying for retryFor, and reports whether h was
// such a call.
func (s *Service) answerDecision(ctx context.Context, h *HeldCall, retryFor time.Duration) bool {
	code, text, ok := decisionAnswer(h)
	if ok {
		_ = s.answerWithin(ctx, h, code, text, retryFor)
	}
	return ok
}

// answer publishes an error result to the call's caller, retrying for
// answerRetry.
func (s *Service) answer(ctx context.Context, h *HeldCall, code windlass.ErrorCode, text string) {
	_ = s.answerWithin(ctx, h, code, text, answerRetry)
}

// answerWithin is answer, retrying for retryFor; it returns why the
// answer could not be stored (logged already).
func (s *Service) answerWithin(ctx context.Context, h *HeldCall, code windlass.ErrorCode, text string, retryFor time.Duration) error {
	call, _ := h.toolCall() // undecodable: its id and tool still answer it
	r := windlass.ErrorResult(call, code, textcut.Cut(text, maxAnswerText))
	data, _ := json.Marshal(r)
	origin := h.origin
	if windlass.ValidateName(origin) != nil {
		origin = "anonymous"
	}
	m := &nats.Msg{Subject: layout.ResultSubject(origin, h.ID), Data: data, Header: nats.Header{
		nats.MsgIdHdr: []string{layout.ResultMsgID(h.ID)}, layout.HeaderProtocol: []string{fmt.Sprint(windlass.ProtocolVersion)}}}
	// Retried for a while: the decision is recorded, and its caller waits
	// for this answer.
	err := retry.Do(context.WithoutCancel(ctx), retry.Policy{Initial: 50 * time.Millisecond, For: retryFor, PerAttempt: retry.WriteTimeout}, func(ctx context.Context) error {
		_, err := s.js.PublishMsg(ctx, m)
		if errors.Is(err, nats.ErrMaxPayload) {
			return retry.Permanent(err)
		}
		return err
	})
	if err != nil {
		s.cfg.Logger.ErrorContext(ctx, "approval: could not answer the caller", "call_id", h.ID, "code", code, "error", err)
		return err
	}
	// Its answer is stored: the admission slot the call took, if any, is
	// free (see package limits, "A call's slot"), and the answer sweep
	// has nothing to do for it.
	s.slots.FreeCall(h.Tool, call.Key, h.ID)
	if err := s.store.answered(ctx, h.ID); err != nil {
		s.cfg.Logger.DebugContext(ctx, "approval: could not mark the call answered; the answer sweep will answer it again (the first answer stands)", "call_id", h.ID, "error", err)
	}
	return nil
}

// answerDecided answers again the callers of calls decided against —
// rejected, expired, canceled — whose answers are not known to be stored:
// a Redis read or a publish that failed after the decision was recorded,
// or the process gone in between, would leave such a caller waiting until
// its deadline, to be told timeout. The work comes from the unanswered
// index (a decision's script adds the call; a stored answer takes it
// out), the answer is made again from the stored state, and the results
// stream keeps the first. A decision answers at once itself: the sweep
// takes only calls decided answerSweepAfter ago or more.
func (s *Service) answerDecided(ctx context.Context) error {
	page, err := s.store.unanswered(ctx, time.Now().Add(-answerSweepAfter), resumeBatch)
	for _, h := range page {
		if !s.answerDecision(ctx, h, retry.WriteTimeout) {
			err = errors.Join(err, s.store.answered(ctx, h.ID))
		}
	}
	return err
}

// answerSweepAfter is how long after a decision the answer sweep answers
// its caller again, if its answer is not known to be stored.
const answerSweepAfter = 2 * time.Second

// maxAnswerText bounds the text of the service's answers (a rejection's
// reason is bounded by MaxReason already); answerRetry how long an answer
// is retried.
const (
	maxAnswerText = 16 << 10
	answerRetry   = 30 * time.Second
)

// marshalCall encodes a call as the dispatcher does, its arguments as
// they are: json.Marshal writes each '<', '>' and '&' of a RawMessage as
// six bytes, so a call the dispatcher measured, with room for its
// release, could grow past the max payload here.
func marshalCall(call windlass.ToolCall) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(call); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// release publishes an approved call to its tool's subject with a signed
// release, deduplicated by call id, and marks it released (h.Released), or
// undeliverable (h.Undeliverable) when it never can be. A calls stream
// that is full (at its bound) refuses it: the release fails and is tried
// again every few seconds (resumeReleases) until there is room, or until
// the caller's deadline has passed, when the caller is answered
// overloaded and the call is marked undeliverable (never released, never
// run; the dashboard is sent approval.undeliverable, not
// approval.approved). With Config.ReplicaAcks, a call is released only
// once that many Redis replicas have its approval: a failover cannot
// bring back as pending a call that ran.
func (s *Service) release(ctx context.Context, h *HeldCall) error {
	if err := s.store.waitReplicas(ctx, h); err != nil {
		return err
	}
	timeout := windlass.DefaultTimeout
	if info, err := s.cfg.Registry.Lookup(ctx, h.Tool); err == nil {
		timeout = info.Spec.Timeout
	}
	call, err := h.toolCall()
	if err != nil {
		return err
	}
	call.Attempt = 0
	callerDeadline := call.Deadline
	if h.ApprovedArguments != nil {
		call.Arguments, call.ArgumentsRef = h.ApprovedArguments, nil // an edit travels inline
	}
	// The execution deadline starts at release: the tool's timeout plus an
	// allowance for a free worker, not the time the request was made — but
	// never past the caller's own deadline, after which nobody waits for
	// the result (the dispatcher's default deadline for a gated call leaves
	// room for the approval window and then this).
	deadline := time.Now().Add(timeout + s.cfg.QueueAllowance)
	if !call.Deadline.IsZero() && call.Deadline.Before(deadline) {
		deadline = call.Deadline // the caller's own
	}
	call.Deadline = deadline
	data, err := marshalCall(call)
	if err != nil {
		return err
	}
	origin := h.origin
	if windlass.ValidateName(origin) != nil {
		origin = "anonymous"
	}
	hdr, err := s.cfg.Signer.Sign(release.Release{CallID: h.ID, Tool: h.Tool, SpecHash: h.SpecHash, ArgsHash: h.ArgsHash, ExpiresAt: call.Deadline, ApprovedBy: h.Approvers, Origin: origin})
	if err != nil {
		return err
	}
	m := &nats.Msg{Subject: layout.CallSubject(h.Tool, h.ID), Data: data, Header: nats.Header{
		nats.MsgIdHdr: []string{s.cfg.Signer.MessageID(h.ID)}, layout.HeaderOrigin: []string{origin}, release.Header: []string{hdr},
		layout.HeaderProtocol: []string{fmt.Sprint(windlass.ProtocolVersion)}}}
	if h.traceparent != "" {
		// The worker's span continues the caller's trace.
		m.Header.Set(layout.HeaderTraceparent, h.traceparent)
	}
	if limit, size := s.cfg.Conn.MaxPayload(), layout.MessageSize(m); limit > 0 && int64(size) > limit {
		// Cannot happen for a call the dispatcher checked and arguments
		// this service checked (both keep room for the release); for one
		// that came another way, answer the caller rather than retry a
		// publish that can never succeed.
		s.cfg.Logger.ErrorContext(ctx, "approval: the approved call is too large to release; answering its caller", "call_id", h.ID, "size", size, "limit", limit)
		reason := fmt.Sprintf("The call to %q was approved, but with its release it is %d bytes, over the NATS server's max payload of %d bytes, so it cannot be sent to the tool; it was not run.", h.Tool, size, limit)
		s.answer(ctx, h, windlass.CodePayloadTooLarge, reason)
		return s.undeliverable(ctx, h, windlass.CodePayloadTooLarge, reason)
	}
	if _, err := s.js.PublishMsg(ctx, m); err != nil {
		if layout.IsCallsFull(err) && !callerDeadline.IsZero() && !time.Now().Before(callerDeadline) {
			// Approved, but the fleet's queue stayed full until the
			// caller's deadline: nobody waits for a run any more. Say
			// why, rather than timeout, and stop trying.
			s.cfg.Logger.WarnContext(ctx, "approval: the calls stream stayed full until the approved call's deadline; answering its caller overloaded", "call_id", h.ID, "tool", h.Tool)
			reason := fmt.Sprintf("The call to %q was approved, but the fleet's queue was full until the call's deadline (%s), so it was not run.", h.Tool, callerDeadline.Format(time.RFC3339))
			s.answer(ctx, h, windlass.CodeOverloaded, reason)
			return s.undeliverable(ctx, h, windlass.CodeOverloaded, reason)
		}
		// A full calls stream included: the release is tried again
		// (resumeReleases) while the caller's deadline allows.
		return fmt.Errorf("approval: release %q: %w", h.ID, err)
	}
	if err := s.store.markReleased(ctx, h.ID); err != nil {
		return err
	}
	h.Released = true
	return nil
}

// undeliverable marks h, an approved call whose caller was answered code
// instead of a run, as never to be released.
func (s *Service) undeliverable(ctx context.Context, h *HeldCall, code windlass.ErrorCode, reason string) error {
	if err := s.store.markUndeliverable(ctx, h.ID, code, reason); err != nil {
		return err
	}
	h.Undeliverable = code
	return nil
}

// resumeReleases finishes the releases of approved calls a crash (or a
// failed publish) left unpublished, read from the unreleased index: its
// cost follows the calls waiting for a release, not the history. The
// calls stream's duplicate window drops a second publish of a release that
// did reach it (another replica, or the decision itself, racing this).
func (s *Service) resumeReleases(ctx context.Context) error {
	page, err := s.store.unreleased(ctx, resumeBatch)
	var failed error
	for _, h := range page {
		// One that fails does not hold back the others.
		if err := s.release(ctx, h); err != nil {
			failed = errors.Join(failed, err)
			continue
		}
		s.cfg.Logger.InfoContext(ctx, "approval: finished an interrupted release", "call_id", h.ID)
	}
	return errors.Join(err, failed)
}

// resumeBatch bounds the releases one pass finishes.
const resumeBatch = 100
