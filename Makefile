# Windlass fleet — developer commands. `make help` lists them.
GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_FLAGS  ?= -race -count=1 -timeout 30m

.PHONY: help test lint fmt-check vet deps dev bench local faults

help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "} {printf "  %-10s %s\n", $$1, $$2}'

test: deps fmt-check vet ## gofmt check, go vet and every test with the race detector (installs redis-server and chromium if absent)
	$(GO) test $(TEST_FLAGS) ./...

deps: ## install Debian's redis-server and chromium when they are not on PATH (the tests start their own redis-server on free ports; the dashboard's browser tests drive headless chromium)
	@command -v redis-server >/dev/null 2>&1 || { \
		echo "redis-server not found: installing Debian's redis-server"; \
		SUDO=; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq redis-server; \
	}
	@redis-server --version
	@command -v chromium >/dev/null 2>&1 || { \
		echo "chromium not found: installing Debian's chromium (for the dashboard's browser tests in approval/)"; \
		SUDO=; [ "$$(id -u)" -eq 0 ] || SUDO=sudo; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; \
	}
	@chromium --version 2>/dev/null || chromium --version

fmt-check: ## fail when gofmt would change a file
	@out=$$(gofmt -l .); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet: ## go vet ./...
	$(GO) vet ./...

lint: fmt-check vet ## gofmt, go vet and staticcheck
	$(GO) run $(STATICCHECK) ./...

dev: ## run the whole fleet in one process on its embedded default
	$(GO) run ./cmd/windlass dev

faults: deps ## the long fault suite (5,000 calls a scenario: workers SIGKILLed every 2 s, NATS and Redis restarted, a worker paused), figures printed
	WINDLASS_FAULT_LONG=1 $(GO) test -race -count=1 -timeout 30m -run 'TestFault' -v ./integration/ | grep -E 'FAULT|^(---|ok|FAIL|PASS)'

local: ## the production topology on this machine: 3 clustered NATS nodes, Redis, approval, 2 workers (deploy/local)
	$(GO) run ./deploy/local

bench: deps ## the targets of BENCHMARKS.md: the fleet beside raw NATS (and, at 64 and 512 in flight, with admission limits none/default/rate+caps), the dispatcher's own work, argument validation with and without its fast path, a worker's memory with 10,000 calls, the approval path (5 runs each)
	$(GO) test -run '^$$' -bench 'RoundTrip' -benchtime 5000x -count 5 ./integration/
	$(GO) test -run '^$$' -bench 'Prepare' -benchmem -count 5 ./dispatcher/
	$(GO) test -run '^$$' -bench 'Validate' -benchmem -count 5 .
	$(GO) test -run '^$$' -bench 'WorkerMemory' -benchtime 1x -count 3 ./integration/
	$(GO) test -run '^$$' -bench 'ApprovalPath' -benchtime 3000x -count 5 ./integration/
