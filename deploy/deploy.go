// Package deploy holds the files that run the fleet beyond one machine — the
// Dockerfile, the compose file (Redis under Sentinel), the Kubernetes
// manifests, the NATS and Redis (Sentinel) Helm values and the NATS server
// configuration with its accounts and per-role
// permissions — and the tests that check them without a Docker engine or a
// Kubernetes cluster: every manifest parses strictly into typed objects,
// every command, flag and environment variable in them is one the windlass
// binary accepts, every port matches, and the NATS configuration loads in
// nats-server's own parser.
//
// The package exports the NATS accounts file, which deploy/local (a
// three-node cluster on one machine) and the integration tests load as
// they are, so the permissions that are tested are the ones deployed.
package deploy

import _ "embed"

// NATSAccounts is deploy/nats/accounts.conf: the fleet's NATS accounts, its
// users (passwords from the server's environment, NATS_<ROLE>_PASSWORD)
// and each role's permissions. A server configuration includes it.
//
//go:embed nats/accounts.conf
var NATSAccounts []byte

// Users returns the users of NATSAccounts, each with the environment
// variable the server reads its password from.
func Users() map[string]string {
	return map[string]string{
		"sys":          "NATS_SYS_PASSWORD",
		"admin":        "NATS_ADMIN_PASSWORD",
		"worker":       "NATS_WORKER_PASSWORD",
		"approval":     "NATS_APPROVAL_PASSWORD",
		"dispatcher-a": "NATS_DISPATCHER_A_PASSWORD",
		"dispatcher-b": "NATS_DISPATCHER_B_PASSWORD",
	}
}

// InboxPrefix is the reply-subject prefix a user's processes must use
// (--nats-inbox-prefix): the only inbox its permissions let it subscribe to.
func InboxPrefix(user string) string { return "_INBOX_" + user }
