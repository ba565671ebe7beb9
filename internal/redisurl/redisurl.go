// Package redisurl turns a Redis URL into a go-redis client for any of the
// deployments Windlass runs on: a single server, a Redis Cluster, or a
// replicated Redis whose master Sentinel names. Every command of the binary
// (--redis-url, $WINDLASS_REDIS_URL) and the local fleet get their client
// here; the library packages take the resulting redis.UniversalClient.
//
// The forms, with TLS (the scheme with an extra "s") and passwords in each:
//
//	redis://[[user]:password@]host:port[/db][?option=value...]
//	rediss://...
//	unix://[[user]:password@]/path/to/redis.sock[?db=N]
//	    One server (redis.ParseURL). db defaults to 0.
//
//	redis+cluster://[[user]:password@]host:port[?addr=host:port...][&option=value...]
//	rediss+cluster://...
//	    A Redis Cluster (redis.ParseClusterURL): the host and every addr are
//	    seed nodes; the client learns the others. A cluster has database 0
//	    only, so a path other than /0 is refused.
//
//	redis+sentinel://[[user]:password@]host:port[/db]?master_name=NAME[&addr=host:port...][&username=U][&password=P][&option=value...]
//	rediss+sentinel://...
//	    A master and its replicas watched by Sentinel (redis.ParseFailoverURL):
//	    the host and every addr are sentinels, asked for the master named
//	    master_name, which is required. The user and password in the URL's
//	    user info authenticate to the sentinels; the username and password
//	    query parameters to the master and replicas.
//
// The options are go-redis's, named in snake case (dial_timeout=3s,
// pool_size=20, ...); an unknown option is refused. Over TLS the server
// certificate is checked against the URL's host name, for every node (as
// go-redis does); the single and Sentinel forms take skip_verify=true.
//
// Anything else is refused with a [*URLError] that names the accepted
// forms; the URL in it has its passwords masked.
package redisurl

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Kind is the deployment a URL names.
type Kind int

// The deployments.
const (
	// Single is one server: redis:// or rediss://.
	Single Kind = iota
	// Cluster is a Redis Cluster: redis+cluster:// or rediss+cluster://.
	Cluster
	// Sentinel is a master watched by Sentinel: redis+sentinel:// or
	// rediss+sentinel://.
	Sentinel
)

// String returns the kind's name: single, cluster or sentinel.
func (k Kind) String() string {
	switch k {
	case Single:
		return "single"
	case Cluster:
		return "cluster"
	case Sentinel:
		return "sentinel"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Forms is the one-line summary of the accepted URL forms, for flag help
// and error messages.
const Forms = "redis://[user:password@]host:port/db (rediss:// for TLS), " +
	"redis+cluster://[user:password@]host:port?addr=host:port... (rediss+cluster://), " +
	"redis+sentinel://[user:password@]host:port?master_name=NAME&addr=host:port... (rediss+sentinel://)"

// Options are the parsed options of a URL: exactly one of Single, Cluster
// and Sentinel is set, as Kind says.
type Options struct {
	// Kind is the deployment.
	Kind Kind
	// Single is set for the Single kind.
	Single *redis.Options
	// Cluster is set for the Cluster kind.
	Cluster *redis.ClusterOptions
	// Sentinel is set for the Sentinel kind.
	Sentinel *redis.FailoverOptions
}

// URLError is a URL that could not be parsed: Err says why. URL has its
// passwords masked; Error names the accepted forms.
type URLError struct {
	URL string
	Err error
}

// Error implements error.
func (e *URLError) Error() string {
	return fmt.Sprintf("%q: %v; want one of %s", e.URL, e.Err, Forms)
}

// Unwrap returns Err.
func (e *URLError) Unwrap() error { return e.Err }

// schemes maps each accepted scheme to its kind and to the scheme go-redis
// parses it with.
var schemes = map[string]struct {
	kind    Kind
	goRedis string
}{
	"redis":           {Single, "redis"},
	"rediss":          {Single, "rediss"},
	"unix":            {Single, "unix"},
	"redis+cluster":   {Cluster, "redis"},
	"rediss+cluster":  {Cluster, "rediss"},
	"redis+sentinel":  {Sentinel, "redis"},
	"rediss+sentinel": {Sentinel, "rediss"},
}

// Parse parses rawURL into the options of its deployment. It connects to
// nothing.
func Parse(rawURL string) (*Options, error) {
	o, err := parse(rawURL)
	if err != nil {
		return nil, &URLError{URL: Redact(rawURL), Err: err}
	}
	return o, nil
}

func parse(rawURL string) (*Options, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// The reason may quote part of a password: say only what to check.
		if Redact(rawURL) != rawURL {
			return nil, errors.New("not a URL (percent-encode the special characters of a password)")
		}
		// url.Error repeats the URL; keep its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, err
	}
	s, ok := schemes[u.Scheme]
	if !ok {
		return nil, fmt.Errorf("unknown scheme %q", u.Scheme)
	}
	u.Scheme = s.goRedis
	o := &Options{Kind: s.kind}
	switch s.kind {
	case Single:
		o.Single, err = redis.ParseURL(u.String())
	case Cluster:
		if p := strings.Trim(u.Path, "/"); p != "" && p != "0" {
			return nil, fmt.Errorf("a Redis Cluster has database 0 only, not %q", p)
		}
		o.Cluster, err = redis.ParseClusterURL(u.String())
	case Sentinel:
		if u.Query().Get("master_name") == "" {
			return nil, errors.New("the sentinel form needs master_name=NAME, the name the sentinels know the master by")
		}
		o.Sentinel, err = redis.ParseFailoverURL(u.String())
	}
	if err != nil {
		return nil, err
	}
	return o, nil
}

// NewClient returns a new client for the options' deployment: a
// *redis.Client for Single, a *redis.ClusterClient for Cluster, a failover
// *redis.Client (which follows the master Sentinel names) for Sentinel. The
// caller closes it.
func (o *Options) NewClient() redis.UniversalClient {
	switch o.Kind {
	case Cluster:
		return redis.NewClusterClient(o.Cluster)
	case Sentinel:
		return redis.NewFailoverClient(o.Sentinel)
	}
	return redis.NewClient(o.Single)
}

// New parses rawURL and returns a new client for it, as [Parse] and
// [Options.NewClient] do. The caller closes it.
func New(rawURL string) (redis.UniversalClient, error) {
	o, err := Parse(rawURL)
	if err != nil {
		return nil, err
	}
	return o.NewClient(), nil
}

// passwordParam matches a password query parameter and its value.
var passwordParam = regexp.MustCompile(`([?&](?:password|sentinel_password)=)[^&#]*`)

// Redact returns rawURL with the passwords (of the user info, and of
// password query parameters) replaced by "xxxxx", for logs and errors. It
// works on URLs that do not parse too, masking too much rather than too
// little: the user info runs to the last "@".
func Redact(rawURL string) string {
	s := rawURL
	if scheme, rest, ok := strings.Cut(s, "://"); ok {
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if user, _, hasPassword := strings.Cut(rest[:at], ":"); hasPassword {
				rest = user + ":xxxxx" + rest[at:]
			}
		}
		s = scheme + "://" + rest
	}
	return passwordParam.ReplaceAllString(s, "${1}xxxxx")
}
