# kvca — the two commands a new machine needs are `make demo` and `make test`.
GO       ?= go
PKGS     := ./...
BIN      := bin/kvca
BENCHBIN := bin/kvca-bench
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)

.PHONY: all build test vet fmt-check unit allocs fuzz-short fuzz soak bench-go demo bench docs clean

all: build

# bin/kvca is what runs at the edge; bin/kvca-bench (bench and demo) links
# the embedded NATS server and the plotting library, which kvca does not.
build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/kvca
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BENCHBIN) ./cmd/kvca-bench

# make test: what CI runs. Race detector on, short fuzz runs, no timing asserts.
test: fmt-check vet unit allocs fuzz-short

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet $(PKGS)

unit:
	$(GO) test -race -count=1 -timeout 12m $(PKGS)

# Zero-allocation checks (testing.AllocsPerRun); sync.Pool drops items at
# random under -race, so these run without it.
allocs:
	$(GO) test -count=1 -run 'NoAllocs|MaxBlocksHolds' $(PKGS)

# Each fuzz target runs briefly; long runs: make fuzz FUZZTIME=10m
FUZZTIME ?= 10s
fuzz-short:
	@scripts/fuzz.sh $(FUZZTIME)

fuzz:
	@scripts/fuzz.sh $(or $(FUZZTIME),5m)

# Micro-benchmarks of the hot path (canon, chain, table, scheduler).
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem ./canon ./chain ./sched ./edge

# Soak: mixed streaming traffic at high concurrency while backends are
# killed and restarted (make test runs a 4-second version).
SOAK ?= 3m
soak:
	KVCA_SOAK=$(SOAK) $(GO) test -race -count=1 -v -run '^TestSoak$$' -timeout 30m ./edge

demo: build
	./$(BENCHBIN) demo

# The full suite: the Mooncake conversation trace on 8 engines whose caches
# are smaller than the working set, six policies, table + JSON + charts.
BENCH_ARGS ?= --trace bench/testdata/conversation_trace.jsonl --engines 8 --cache-tokens 2000000 --time-scale 0.1 --arrival-scale 0.22
bench: build
	mkdir -p bench/results
	./$(BENCHBIN) bench $(BENCH_ARGS) --json bench/results/bench.json --charts bench/results | tee bench/results/bench.txt

# The flag tables of docs/configuration.md and docs/bench.md, from the flags themselves
# (make test fails when they differ).
docs:
	KVCA_UPDATE_DOCS=1 $(GO) test -count=1 -run '^Test(Configuration|Bench)Doc$$' ./cmd/kvca ./cmd/kvca-bench

clean:
	rm -rf bin

# Mutation testing (slow, not part of make test): gremlins, pinned and
# installed under bin/, mutates each package's code and runs its tests;
# efficacy per package is printed and written to docs/mutation.md.
MUTATE_PKGS ?= ./sched ./chain ./canon
GREMLINS_VERSION := v0.6.0
.PHONY: mutate
mutate:
	@scripts/mutate.sh $(GREMLINS_VERSION) $(MUTATE_PKGS)

# The proxy's transport-independent core (the request lifecycle, the picker, planning, retries, replies,
# forwarding rules, request ids, access log): only these files of edge are
# mutated. The edge suite is long, so its slowest tests, which exercise
# timing, limits and memory rather than the core, are skipped, and the
# target stands apart from make mutate (docs/mutation.md).
MUTATE_EDGE_FILES := lifecycle.go,picker.go,exchange.go,forward.go,answers.go
MUTATE_EDGE_SKIP := ^(TestSoak|TestAcceptBacksOffOutOfDescriptors|TestMaxBlocksHolds.*|TestWireNoAllocs|TestRoutePathNoAllocs|TestSpareP|TestStreamIdleTimeout|TestSlowlorisIsCut|TestDrainDelay|TestHostileBodies|TestGracefulDrain|TestShutdownDeadlineCutsStreams|TestEngineTelemetryWired|TestVacuumReclaimsIdleLocations|TestTLSEdgeStreamingAndRotation|TestAbandonedStreamsReleaseLoad)$$
.PHONY: mutate-edge
mutate-edge:
	@MUTATE_GOFLAGS='-skip=$(MUTATE_EDGE_SKIP)' nice -n 10 scripts/mutate.sh $(GREMLINS_VERSION) ./edge:$(MUTATE_EDGE_FILES)
