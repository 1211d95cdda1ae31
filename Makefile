# The runtime's tasks. `make` lists them.
GO ?= go
PKGS := ./...

.DEFAULT_GOAL := help

.PHONY: help
help: ## list targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## compile everything and bin/runtime
	$(GO) build $(PKGS)
	$(GO) build -o bin/runtime ./cmd/runtime

.PHONY: run
run: ## run the runtime on its embedded in-memory default (loopback only), with the demo thread and its credential
	$(GO) run ./cmd/runtime --demo

.PHONY: run-cluster
run-cluster: ## three runtime nodes and a development etcd on loopback (n1 runs the demo thread); Ctrl-C stops them
	bash scripts/run-cluster.sh

.PHONY: demo
demo: ## the whole story over real HTTP on free loopback ports, with real agent processes (and the real agent CLIs, when installed); fails if a step deviates
	$(GO) build -o bin/runtime ./cmd/runtime
	$(GO) build -o bin/agent ./examples/agent
	$(GO) build -o bin/scriptedmodel ./examples/scriptedmodel
	bash scripts/demo.sh bin/runtime bin/agent bin/scriptedmodel

.PHONY: test-deps
test-deps: ## install what the tests need besides Go when missing: the TypeScript SDK clients and the agent CLIs (npm, pinned) and Chromium (apt-get)
	bash scripts/test-deps.sh

.PHONY: test
test: test-deps ## vet, every test with the race detector, the official conformance suite, then the multi-node tests (what CI runs)
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 $(PKGS)
	RUNS='$(CONFORMANCE_RUNS)' SERVER='$(SERVER)' bash scripts/conformance.sh
	$(MAKE) cluster-test

.PHONY: race
race: test-deps ## every test with the race detector
	$(GO) test -race $(PKGS)

.PHONY: prop
prop: ## the property suite, long: 1000 checks per machine, under the race detector
	$(GO) test -race -run 'Prop|Machine' -count=1 -timeout 60m ./proptest/ -rapid.checks=1000

.PHONY: crash-long
crash-long: ## the crash test, long: 2000 SIGKILLs of the real binary mid-write, each restart checked against the model of what was acknowledged
	CRASH_KILLS=2000 $(GO) test -race -run '^TestCrashRestart$$' -count=1 -timeout 60m -v ./cmd/runtime

.PHONY: fuzz
fuzz: ## fuzz JSON-RPC decoding (messages, batches, event ids), the 2026-07-28 ladder, header values and request states, the HTTP handler, the lifecycle state machine, the OAuth endpoints and the arguments' fast path's JSON check, 30 s each
	$(GO) test -run '^$$' -fuzz=FuzzHandler -fuzztime=30s ./transport/
	$(GO) test -run '^$$' -fuzz=FuzzDecodeMessage -fuzztime=30s ./transport/
	$(GO) test -run '^$$' -fuzz=FuzzSplitBatch -fuzztime=30s ./transport/
	$(GO) test -run '^$$' -fuzz='^FuzzEventID$$' -fuzztime=30s ./transport/
	$(GO) test -run '^$$' -fuzz=FuzzModernRequest -fuzztime=30s ./transport/
	$(GO) test -run '^$$' -fuzz=FuzzHeaderValue -fuzztime=30s ./transport/
	$(GO) test -run '^$$' -fuzz=FuzzRequestState -fuzztime=30s ./transport/
	$(GO) test -run '^$$' -fuzz=FuzzLifecycleMachine -fuzztime=30s ./proptest/
	$(GO) test -run '^$$' -fuzz=FuzzRegister -fuzztime=30s ./internal/oauth/
	$(GO) test -run '^$$' -fuzz=FuzzToken -fuzztime=30s ./internal/oauth/
	$(GO) test -run '^$$' -fuzz=FuzzAuthorize -fuzztime=30s ./internal/oauth/
	$(GO) test -run '^$$' -fuzz=FuzzValidJSON -fuzztime=30s ./internal/fastschema/

.PHONY: mutants
mutants: ## run the suite against each deliberate bug in scripts/mutants/; fails if one survives
	bash scripts/mutants.sh

.PHONY: bench
bench: ## ns/op and allocs/op of the hot paths
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

.PHONY: bench-peers
bench-peers: ## the runtime, embedded and as the shipped binary, against the official go-sdk, mcp-go and a bare net/http floor (bench/, both eras, ~25 min)
	bash bench/run-peers.sh

# The server under test of `make conformance`: run as `$(SERVER) -listen 127.0.0.1:PORT`.
SERVER ?= go run ./examples/everything
# The suite's runs `make test` makes (every one must pass): the 2025-11-25 suite, active and all, and the 2026-07-28 requirements.
CONFORMANCE_RUNS ?= active all 2026-07-28

.PHONY: conformance
conformance: ## the official MCP conformance suite (2025-11-25 active and all, 2026-07-28) against SERVER, through the bearer proxy
	SERVER='$(SERVER)' bash scripts/conformance.sh

.PHONY: cluster-test
cluster-test: ## the multi-node tests (tests/cluster, in the tests/ module with the browser test and the client matrix of tests/clients): three in-process nodes on an embedded etcd, under the race detector (~30 s)
	cd tests && $(GO) vet ./... && $(GO) test -race -count=1 ./...

.PHONY: cluster-bench
cluster-bench: ## three nodes: calls/s and p99 through the home and a forwarding node, failover time, revoke latency healthy and with one paused, OAuth refresh and sign-in across nodes (tests/cluster; ~1.5 min)
	cd tests/cluster && $(GO) test -run '^$$' -bench 'ClusterCalls' -benchtime=5000x -count=3 .
	cd tests/cluster && $(GO) test -run '^$$' -bench 'Failover' -benchtime=3x .
	cd tests/cluster && $(GO) test -run '^$$' -bench 'Revoke/healthy' -benchtime=200x -count=3 .
	cd tests/cluster && $(GO) test -run '^$$' -bench 'Revoke/one-paused' -benchtime=10x -count=2 .
	cd tests/cluster && $(GO) test -run '^$$' -bench 'ClusterOAuth' -benchtime=300x -count=3 .

.PHONY: cluster-scale
cluster-scale: ## three nodes at a long-running host's size (100 000 threads, 300 000 credentials of which 100 000 live, 10 000 client grants, bulk-written into etcd): join time and heap, revoke p50/p99, idle etcd requests per node, failover; a table (tests/cluster; minutes, ~12 GB; SCALE_ARGS='-scale.threads=10000 -scale.grants=1000' for a smaller run)
	cd tests/cluster && $(GO) test -c -o ../../bin/cluster-scale.test .
	cd tests/cluster && ../../bin/cluster-scale.test -test.run '^$$' -test.bench '^BenchmarkClusterScale$$' -test.benchtime=1x -test.count=1 -test.timeout 30m $(SCALE_ARGS)

.PHONY: lint
lint: ## gofmt, go vet, and every mutant of scripts/mutants/ still applies
	@test -z "$$(gofmt -l .)" || (gofmt -l .; echo "gofmt: files above need formatting"; exit 1)
	$(GO) vet $(PKGS)
	bash scripts/mutants.sh --check

.PHONY: check
check: lint test ## lint and test
